"""The Worker runtime in this process against a real server: outcomes, leases, stopping."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import pytest

from queuelog.client import Client, Fail, Job, Retry, Worker
from queuelog.client.acknowledger import ACK_BYTES
from queuelog.client.claimer import AHEAD_SECONDS
from queuelog.client.transport import Answer
from queuelog.models import JobStatus
from tests.client.conftest import CONFIG, TYPES
from tests.client.pools import Noting, Sent, answer
from tests.realserver import RealServer, closing, wait_until

DEADLINE = 90.0  # seconds any single wait in these tests may take, on a busy machine


@contextmanager
def running(
    worker: Worker, server: RealServer, transport: Noting | None = None
) -> Iterator[threading.Thread]:
    client = Client(server.url, server.keys["mailer"], transport=transport)
    thread = threading.Thread(target=worker.run, args=(client,), daemon=True)
    thread.start()
    try:
        yield thread
    finally:
        worker.stop()
        thread.join(timeout=DEADLINE)
        client.close()
        assert not thread.is_alive(), "the worker did not stop"


def admin(server: RealServer) -> Client:
    return Client(server.url, server.keys["root"])


def settled(server: RealServer, *ids: int) -> Callable[[], bool]:
    def check() -> bool:
        with admin(server) as root:
            return all(root.get(i).status in _FINAL for i in ids)

    return check


_FINAL = {JobStatus.COMPLETED, JobStatus.FAILED}


def test_handler_outcomes_become_complete_retry_and_fail(server: RealServer) -> None:
    worker = Worker(concurrency=3, wait_seconds=1)

    @worker.handler("noop")
    def handle(job: Job) -> Any:
        kind = job.payload["kind"]
        if kind == "retry" and job.retry_count == 0:
            raise Retry("not yet", after=0)
        if kind == "fail":
            raise Fail("never")
        if kind == "crash":
            raise RuntimeError("boom")
        return {"dict": True} if kind == "dict" else 42

    with Client(server.url, server.keys["shop"]) as shop:
        kinds = ["dict", "value", "retry", "fail", "crash"]
        ids = {k: shop.enqueue("noop", {"kind": k}).id for k in kinds}
    with running(worker, server):
        wait_until(settled(server, *ids.values()), "every job to settle")
    with admin(server) as root:
        jobs = {k: root.get(i) for k, i in ids.items()}
    assert jobs["dict"].result == {"dict": True}
    assert jobs["value"].result == {"value": 42}
    assert jobs["retry"].status is JobStatus.COMPLETED and jobs["retry"].retry_count == 1
    assert jobs["fail"].status is JobStatus.FAILED and jobs["fail"].retry_count == 0
    assert jobs["fail"].error == "never"
    assert jobs["crash"].status is JobStatus.FAILED  # noop allows 2 retries, then fails
    assert jobs["crash"].retry_count == 2 and jobs["crash"].error == "RuntimeError: boom"


def test_the_worker_acknowledges_without_asking_for_the_jobs_back(server: RealServer) -> None:
    worker = Worker(concurrency=2, wait_seconds=1)
    worker.handler("noop")(lambda job: {"n": job.payload["n"]})
    with Client(server.url, server.keys["shop"]) as shop:
        ids = [shop.enqueue("noop", {"n": n}).id for n in range(4)]
    transport = Noting()
    client = Client(server.url, server.keys["mailer"], transport=transport)
    thread = threading.Thread(target=worker.run, args=(client,), daemon=True)
    thread.start()
    try:
        wait_until(settled(server, *ids), "every job to settle")
    finally:
        worker.stop()
        thread.join(timeout=DEADLINE)
        client.close()
    with admin(server) as root:
        assert [root.get(i).result for i in ids] == [{"n": n} for n in range(4)]
    acks = [s.header("Prefer") for s in transport.sent if s.path == "/jobs/batch/complete"]
    assert acks and set(acks) == {"return=minimal"}


def test_a_result_too_large_to_store_fails_the_job_for_good(server: RealServer) -> None:
    worker = Worker(concurrency=1, wait_seconds=1)

    @worker.handler("noop")
    def huge(job: Job) -> dict[str, Any]:
        return {"blob": "x" * 70_000}  # over max_result_bytes (64 KiB)

    with Client(server.url, server.keys["shop"]) as shop:
        job = shop.enqueue("noop")
    with running(worker, server):
        wait_until(settled(server, job.id), "the job to settle")
    with admin(server) as root:
        failed = root.get(job.id)
    assert failed.status is JobStatus.FAILED and failed.error == "result too large"


def test_heartbeats_keep_a_long_job_alive_past_its_lease(server: RealServer) -> None:
    worker = Worker(concurrency=1, wait_seconds=1)

    @worker.handler("slow")  # lease 2 s, no retries: an expired lease would fail the job
    def slow(job: Job) -> dict[str, Any]:
        time.sleep(5)
        return {"slept": 5}

    with Client(server.url, server.keys["shop"]) as shop:
        job = shop.enqueue("slow")
    with running(worker, server):
        wait_until(settled(server, job.id), "the slow job to finish")
    with admin(server) as root:
        done = root.get(job.id)
        history = [e.event for e in root.events(job.id)]
    assert done.status is JobStatus.COMPLETED and done.retry_count == 0
    assert "lease_expired" not in history


def test_async_handlers_run_on_the_worker_loop(server: RealServer) -> None:
    worker = Worker(concurrency=4, wait_seconds=1)

    @worker.handler("noop")
    async def handle(job: Job) -> dict[str, Any]:
        await asyncio.sleep(0.05)
        return {"n": job.payload["n"] * 2}

    with Client(server.url, server.keys["shop"]) as shop:
        made = shop.enqueue_many([{"type": "noop", "payload": {"n": n}} for n in range(10)])
    ids = [m.job.id for m in made]
    with running(worker, server):
        wait_until(settled(server, *ids), "the async jobs")
    with admin(server) as root:
        assert [root.get(i).result for i in ids] == [{"n": n * 2} for n in range(10)]


@pytest.mark.parametrize("raised", [SystemExit(1), KeyboardInterrupt()])
def test_an_async_handler_that_raises_an_exit_fails_its_job_alone(
    server: RealServer, raised: BaseException
) -> None:
    # asyncio lets SystemExit and KeyboardInterrupt out of its loop, which ended the loop
    # that every other async handler runs on.
    worker = Worker(concurrency=2, wait_seconds=1)

    @worker.handler("noop")
    async def handle(job: Job) -> dict[str, Any]:
        if job.payload.get("exit"):
            raise raised
        await asyncio.sleep(0.05)
        return {"ran": True}

    with Client(server.url, server.keys["shop"]) as shop:
        exits = shop.enqueue("noop", {"exit": True}, max_retries=0).id
    with running(worker, server):
        wait_until(settled(server, exits), "the job that exits")
        with Client(server.url, server.keys["shop"]) as shop:
            after = [shop.enqueue("noop").id for _ in range(3)]
        wait_until(settled(server, *after), "the jobs after it")
    with admin(server) as root:
        failed = root.get(exits)
        assert failed.status is JobStatus.FAILED and type(raised).__name__ in (failed.error or "")
        assert [root.get(i).result for i in after] == [{"ran": True}] * 3


def test_arun_runs_async_handlers_on_the_callers_loop(server: RealServer) -> None:
    worker = Worker(concurrency=3, wait_seconds=1)
    loops: list[asyncio.AbstractEventLoop] = []

    @worker.handler("noop")
    async def handle(job: Job) -> dict[str, Any]:
        loops.append(asyncio.get_running_loop())
        await asyncio.sleep(0.01)
        return {"n": job.payload["n"]}

    with Client(server.url, server.keys["shop"]) as shop:
        ids = [m.job.id for m in shop.enqueue_many([{"type": "noop", "payload": {"n": 1}}] * 5)]

    async def main() -> asyncio.AbstractEventLoop:
        with Client(server.url, server.keys["mailer"]) as client:
            task = asyncio.create_task(worker.arun(client))
            while not settled(server, *ids)():  # bounded by the wait_for below
                await asyncio.sleep(0.2)
            task.cancel()  # cancelling stops the worker gracefully
            with pytest.raises(asyncio.CancelledError):
                await task
        return asyncio.get_running_loop()

    caller_loop = asyncio.run(asyncio.wait_for(main(), timeout=DEADLINE))
    assert len(loops) == 5 and set(loops) == {caller_loop}


def test_a_job_still_running_at_the_shutdown_deadline_is_failed_as_retryable(
    server: RealServer,
) -> None:
    worker = Worker(concurrency=1, wait_seconds=1, shutdown_seconds=0.5)
    release = threading.Event()
    started = threading.Event()

    @worker.handler("noop")
    def stuck(job: Job) -> None:
        started.set()
        release.wait(DEADLINE)

    with Client(server.url, server.keys["shop"]) as shop:
        job = shop.enqueue("noop")
    with running(worker, server):
        assert started.wait(DEADLINE)
    release.set()
    with admin(server) as root:
        after = root.get(job.id)
        history = [e.event for e in root.events(job.id)]
    assert after.status is JobStatus.PENDING and after.retry_count == 1
    assert history[-1] == "retry_scheduled"


def test_an_async_handler_still_pending_when_the_run_ends_is_cancelled_before_its_loop_closes(
    server: RealServer,
) -> None:
    worker = Worker(concurrency=1, wait_seconds=1, shutdown_seconds=0.3)
    tasks: list[asyncio.Task[Any]] = []
    started = threading.Event()
    seen: list[str] = []

    @worker.handler("noop")
    async def stubborn(job: Job) -> None:
        tasks.append(cast("asyncio.Task[Any]", asyncio.current_task()))
        started.set()
        try:
            await asyncio.sleep(DEADLINE)
        except asyncio.CancelledError:  # swallowed at the deadline: it tidies up first
            seen.append("cancelled at the deadline")
        try:
            await asyncio.sleep(DEADLINE)
        finally:
            seen.append("ended")

    with Client(server.url, server.keys["shop"]) as shop:
        shop.enqueue("noop")
    with running(worker, server):
        assert started.wait(DEADLINE)
    # The run's loop is closed once the run is over; the handler's task ended before.
    assert tasks[0].done() and tasks[0].cancelled()
    assert seen == ["cancelled at the deadline", "ended"]


def test_run_works_from_a_thread_whose_own_loop_is_running(server: RealServer) -> None:
    """As in a notebook cell: ``run`` blocks a thread whose loop is running, and its own
    loop starts, serves async handlers and closes without touching the caller's."""
    worker = Worker(concurrency=1, wait_seconds=1)

    @worker.handler("noop")
    async def handle(job: Job) -> dict[str, Any]:
        await asyncio.sleep(0)
        return {"ok": True}

    with Client(server.url, server.keys["shop"]) as shop:
        job = shop.enqueue("noop")
    stopper = threading.Thread(
        target=lambda: (wait_until(settled(server, job.id), "the job"), worker.stop()),
        daemon=True,
    )

    async def blocking_inside_a_loop() -> None:
        stopper.start()
        with Client(server.url, server.keys["mailer"]) as client:
            worker.run(client)

    asyncio.run(asyncio.wait_for(blocking_inside_a_loop(), timeout=DEADLINE))
    stopper.join(timeout=DEADLINE)
    with admin(server) as root:
        assert root.get(job.id).result == {"ok": True}


def running_on_server(server: RealServer) -> int:
    with admin(server) as root:
        return len(list(root.list(status="running")))


def test_prefetch_claims_ahead_but_runs_no_more_than_concurrency(server: RealServer) -> None:
    worker = Worker(concurrency=2, prefetch=3, wait_seconds=1)
    release = threading.Event()
    lock = threading.Lock()
    now_running: list[int] = []
    most = 0

    @worker.handler("noop")
    def handle(job: Job) -> None:
        nonlocal most
        with lock:
            now_running.append(job.id)
            most = max(most, len(now_running))
        release.wait(DEADLINE)
        with lock:
            now_running.remove(job.id)

    with Client(server.url, server.keys["shop"]) as shop:
        ids = [m.job.id for m in shop.enqueue_many([{"type": "noop"}] * 8)]
    with running(worker, server):
        try:
            # Two handlers busy, three more jobs claimed and waiting for them.
            wait_until(lambda: running_on_server(server) == 5, "five jobs held")
            assert len(now_running) == 2
        finally:
            release.set()
        wait_until(settled(server, *ids), "every job to complete")
    assert most == 2


class _ClaimLog(Client):
    """A client that notes the ``limit`` of every claim it sends."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits: list[int] = []

    def claim(self, *args: Any, **kwargs: Any) -> list[Job]:
        self.limits.append(kwargs["limit"])
        return super().claim(*args, **kwargs)


@contextmanager
def gated(worker: Worker, server: RealServer, jobs: int) -> Iterator[tuple[_ClaimLog, Any, Any]]:
    """Runs ``worker`` on ``jobs`` no-op jobs whose handlers each wait for a gate's permit;
    yields (the claim log, the gate, a function giving how many handlers have finished)."""
    gate = threading.Semaphore(0)
    finished: list[int] = []

    @worker.handler("noop")
    def handle(job: Job) -> None:
        assert gate.acquire(timeout=DEADLINE)
        finished.append(job.id)

    with Client(server.url, server.keys["shop"]) as shop:
        shop.enqueue_many([{"type": "noop"}] * jobs)
    client = _ClaimLog(server.url, server.keys["mailer"])
    thread = threading.Thread(target=worker.run, args=(client,), daemon=True)
    thread.start()
    try:
        yield client, gate, lambda: len(finished)
    finally:
        gate.release(jobs)
        worker.stop()
        thread.join(timeout=DEADLINE)
        client.close()
        assert not thread.is_alive(), "the worker did not stop"


def test_a_prefetching_worker_claims_again_once_half_its_room_is_free(server: RealServer) -> None:
    # Room for 10 jobs: one running, nine waiting for the handler.
    worker = Worker(concurrency=1, prefetch=9, wait_seconds=1)
    with gated(worker, server, jobs=20) as (client, gate, finished):
        wait_until(lambda: running_on_server(server) == 10, "ten jobs held")
        gate.release(4)
        wait_until(lambda: finished() == 4, "four jobs done")
        time.sleep(0.5)  # four free slots and jobs still waiting: no claim yet
        assert client.limits == [10]
        gate.release(1)
        wait_until(lambda: len(client.limits) == 2, "a second claim", timeout=30)
        assert client.limits == [10, 5]


def test_a_worker_claims_at_once_when_no_claimed_job_is_waiting(server: RealServer) -> None:
    # Room for 6: four handlers and two jobs waiting. Once those two start, two slots are
    # free (less than half the room) and nothing waits for a handler: claim them now
    # (woken by the handler taking the last waiting job).
    worker = Worker(concurrency=4, prefetch=2, wait_seconds=1)
    with gated(worker, server, jobs=10) as (client, gate, finished):
        wait_until(lambda: running_on_server(server) == 6, "six jobs held")
        gate.release(2)
        wait_until(lambda: len(client.limits) == 2, "a second claim", timeout=30)
        assert client.limits == [6, 2]
        assert finished() == 2


def claims_of(worker: Worker, server: RealServer, jobs: int) -> list[int]:
    """The limits of the claims ``worker`` sends until ``jobs`` enqueued jobs are done."""
    with Client(server.url, server.keys["shop"]) as shop:
        ids = [m.job.id for m in shop.enqueue_many([{"type": "noop"}] * jobs)]
    client = _ClaimLog(server.url, server.keys["mailer"])
    thread = threading.Thread(target=worker.run, args=(client,), daemon=True)
    thread.start()
    try:
        wait_until(settled(server, *ids), "every job to complete")
    finally:
        worker.stop()
        thread.join(timeout=DEADLINE)
        client.close()
    assert not thread.is_alive(), "the worker did not stop"
    return client.limits


def test_by_default_a_worker_claims_ahead_once_its_jobs_prove_short(server: RealServer) -> None:
    worker = Worker(concurrency=2, wait_seconds=1)
    worker.handler("noop")(lambda job: None)
    limits = claims_of(worker, server, jobs=60)
    assert limits[0] == 2  # nothing is known of the jobs yet: as many as the handlers
    assert max(limits) > 2  # they finish at once: many more are claimed ahead


def test_by_default_a_worker_claims_nothing_ahead_of_long_jobs(server: RealServer) -> None:
    worker = Worker(concurrency=1, wait_seconds=1)
    # Each job takes longer than the handlers may be kept waiting for: none is held ahead.
    worker.handler("noop")(lambda job: time.sleep(AHEAD_SECONDS * 1.2))
    assert set(claims_of(worker, server, jobs=3)) == {1}


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_hardening_49_prefetched_jobs_not_started_by_the_deadline_are_released_unrun(
    server: RealServer, kind: str
) -> None:
    """Also with an async handler, whose cancel at the deadline frees its thread before
    the jobs claimed ahead are all given up: that thread starts none of them."""
    worker = Worker(concurrency=1, prefetch=2, wait_seconds=1, shutdown_seconds=0.5)
    release = threading.Event()
    ran: list[int] = []

    def handle(job: Job) -> None:
        ran.append(job.id)
        release.wait(DEADLINE)

    async def handle_async(job: Job) -> None:
        ran.append(job.id)
        await asyncio.sleep(DEADLINE)

    worker.handler("noop")(handle if kind == "sync" else handle_async)

    with Client(server.url, server.keys["shop"]) as shop:
        ids = [m.job.id for m in shop.enqueue_many([{"type": "noop"}] * 3)]
    try:
        with running(worker, server):
            wait_until(lambda: running_on_server(server) == 3 and ran, "three jobs held")
    finally:
        release.set()
    # Stopped: the deadline passed with one job running and two never started.
    time.sleep(0.5)  # the handler thread is free again: it must not start the others
    assert len(ran) == 1
    with admin(server) as root:
        jobs = {i: root.get(i) for i in ids}
        last = {i: [e.event for e in root.events(i)][-1] for i in ids}
    assert all(j.status is JobStatus.PENDING for j in jobs.values())
    # The job that ran spent an attempt; the two never started were released unspent.
    (started,) = ran
    assert jobs[started].retry_count == 1 and last[started] == "retry_scheduled"
    unstarted = [i for i in ids if i != started]
    assert all(jobs[i].retry_count == 0 and last[i] == "released" for i in unstarted)


def test_worker_with_a_bad_key_stops_with_the_error(server: RealServer) -> None:
    worker = Worker(wait_seconds=0)
    worker.handler("noop")(lambda job: None)
    from queuelog.errors import Unauthenticated

    with pytest.raises(Unauthenticated):
        worker.run(url=server.url, api_key="ql_not_a_key")


class HoldingFirstAck(Noting):
    """A real pool that holds the first acknowledgement until ``release`` is set, so
    the completions after it queue up behind it; notes each one's size and status."""

    def __init__(self) -> None:
        super().__init__()
        self.holding = threading.Event()
        self.release = threading.Event()
        self.acks: list[tuple[int, int]] = []

    def forward(self, sent: Sent, send: Callable[[], Any]) -> Any:
        if sent.path != "/jobs/batch/complete":
            return send()
        if not self.holding.is_set():
            self.holding.set()
            self.release.wait(DEADLINE)
        response = send()
        self.acks.append((len(sent.body or b""), response.status))
        return response


def acknowledge_together(
    server: RealServer, worker_key: str, size: int, jobs: int
) -> HoldingFirstAck:
    """Runs a worker whose ``jobs`` handlers each return a result of ``size`` characters,
    with the first acknowledgement held until every handler has returned: the rest are
    then sent in one batch or more. Returns the transport once every job has settled."""
    worker = Worker(concurrency=jobs, wait_seconds=1)
    returned: list[int] = []

    @worker.handler("noop")
    def handle(job: Job) -> dict[str, Any]:
        returned.append(job.id)
        return {"blob": "x" * size}

    with Client(server.url, server.keys["shop"]) as shop:
        ids = [m.job.id for m in shop.enqueue_many([{"type": "noop"}] * jobs)]
    transport = HoldingFirstAck()
    client = Client(server.url, worker_key, transport=transport)
    thread = threading.Thread(target=worker.run, args=(client,), daemon=True)
    thread.start()
    try:
        wait_until(lambda: transport.holding.is_set() and len(returned) == jobs, "the handlers")
        time.sleep(0.5)  # the last handlers' completions reach the acknowledger's queue
        transport.release.set()
        wait_until(settled(server, *ids), "every job to settle")
    finally:
        transport.release.set()
        worker.stop()
        thread.join(timeout=DEADLINE)
        client.close()
    with admin(server) as root:
        finished = [root.get(i) for i in ids]
    assert all(j.status is JobStatus.COMPLETED and j.retry_count == 0 for j in finished)
    return transport


def test_acknowledgements_too_large_for_one_request_are_split(tmp_path: Path) -> None:
    # A server that takes at most 64 KiB a request, and six 30 KB results to report: three
    # or more of them in one acknowledgement are refused as too large, then split.
    limits = {**CONFIG["limits"], "max_request_bytes": 65_536, "max_result_bytes": 32_768}
    server = RealServer(tmp_path, types=TYPES, config={**CONFIG, "limits": limits})
    server.create_key("root", "admin")
    with closing(server):
        server.start()
        server.create_key_over_http("shop", "producer")
        mailer_key = server.create_key_over_http("mailer", "worker")
        transport = acknowledge_together(server, mailer_key, size=30_000, jobs=6)
    assert 413 in [status for _, status in transport.acks]


def test_acknowledgements_are_cut_by_size_before_sending(server: RealServer) -> None:
    # Twenty 60 KB results, ten or more of them waiting at once: more than one
    # acknowledgement should carry, though the server would take them in one.
    transport = acknowledge_together(server, server.keys["mailer"], size=60_000, jobs=20)
    assert all(status == 200 for _, status in transport.acks)
    assert max(size for size, _ in transport.acks) <= ACK_BYTES


def _nested(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(levels):
        value = {"a": value}
    return value


@pytest.mark.parametrize(
    "bad",
    [
        # A file name read with surrogateescape: not UTF-8.
        pytest.param({"name": b"caf\xe9.txt".decode("utf-8", "surrogateescape")}, id="surrogate"),
        pytest.param({"n": float("nan")}, id="nan"),
        # Deeper than the server takes: it refused the whole acknowledgement, so every
        # job of it ran again; deeper than the encoder's stack, the job was dropped.
        pytest.param(_nested(70), id="70-deep"),
        pytest.param(_nested(3000), id="3000-deep"),
    ],
)
def test_a_result_that_cannot_travel_fails_only_its_own_job(
    server: RealServer, bad: dict[str, Any]
) -> None:
    worker = Worker(concurrency=5, wait_seconds=1)
    together = threading.Barrier(5, timeout=DEADLINE)

    @worker.handler("noop")
    def handle(job: Job) -> dict[str, Any]:
        together.wait()
        return bad if job.payload["bad"] else {"ok": True}

    with Client(server.url, server.keys["shop"]) as shop:
        made = shop.enqueue_many([{"type": "noop", "payload": {"bad": i == 0}} for i in range(5)])
    ids = [m.job.id for m in made]
    with running(worker, server):
        wait_until(settled(server, *ids), "every job to settle")
    with admin(server) as root:
        bad, *good = (root.get(i) for i in ids)
    assert bad.status is JobStatus.FAILED and bad.error and "not JSON" in bad.error
    assert all(j.status is JobStatus.COMPLETED and j.retry_count == 0 for j in good)


def test_stopping_against_a_hung_server_takes_bounded_time(server: RealServer) -> None:
    worker = Worker(concurrency=2, wait_seconds=1, shutdown_seconds=0.5)
    started = threading.Barrier(3, timeout=DEADLINE)

    @worker.handler("noop")
    def handle(job: Job) -> None:
        started.wait()
        time.sleep(60)

    with Client(server.url, server.keys["shop"]) as shop:
        shop.enqueue_many([{"type": "noop"}] * 2)
    client = Client(server.url, server.keys["mailer"])
    thread = threading.Thread(target=worker.run, args=(client,), daemon=True)
    thread.start()
    started.wait()
    assert server.process is not None
    os.kill(server.process.pid, signal.SIGSTOP)  # connections now hang instead of failing
    try:
        began = time.monotonic()
        worker.stop()
        thread.join(timeout=DEADLINE)
        took = time.monotonic() - began
    finally:
        os.kill(server.process.pid, signal.SIGCONT)
        client.close()
    assert not thread.is_alive()
    # A claim in flight (10 s timeout + 1 s wait), the deadline, then at most a few
    # seconds each for the late reports and the threads: not a retried timeout per job.
    assert took < 45, took


def test_a_claim_that_brings_jobs_once_the_worker_stopped_gives_them_back(
    server: RealServer,
) -> None:
    worker = Worker(concurrency=1, wait_seconds=DEADLINE / 3)
    ran: list[int] = []
    worker.handler("noop")(lambda job: ran.append(job.id))
    transport = Noting()
    client = Client(server.url, server.keys["mailer"], transport=transport)
    thread = threading.Thread(target=worker.run, args=(client,), daemon=True)
    thread.start()
    try:
        wait_until(lambda: "POST /jobs/claim" in transport.paths(), "the long poll")
        worker.stop()  # the long poll is still waiting on the server
        with Client(server.url, server.keys["shop"]) as shop:
            job = shop.enqueue("noop")
        thread.join(timeout=DEADLINE)
        assert not thread.is_alive()
    finally:
        client.close()
    with admin(server) as root:
        kept = root.get(job)
        events = [e.event for e in root.events(job)]
    # Claimed by the poll, then given back unrun for another worker, its attempt unspent.
    assert ran == [] and (kept.status, kept.retry_count) == (JobStatus.PENDING, 0)
    assert events == ["enqueued", "claimed", "released"]


def test_a_completion_the_server_never_answers_is_said_unreported_as_the_worker_ends(
    server: RealServer, caplog: pytest.LogCaptureFixture
) -> None:
    # The worker returned with its completion still in flight, and said nothing of it.
    worker = Worker(concurrency=1, wait_seconds=1, shutdown_seconds=0.5)
    assert server.process is not None
    pid = server.process.pid

    @worker.handler("noop")
    def handle(job: Job) -> None:
        os.kill(pid, signal.SIGSTOP)  # its completion now waits on a server that hangs

    with Client(server.url, server.keys["shop"]) as shop:
        job = shop.enqueue("noop")
    transport = Noting()
    client = Client(server.url, server.keys["mailer"], timeout=DEADLINE, transport=transport)
    thread = threading.Thread(target=worker.run, args=(client,), daemon=True)
    thread.start()
    try:
        wait_until(lambda: "POST /jobs/batch/complete" in transport.paths(), "the completion")
        worker.stop()
        thread.join(timeout=DEADLINE)
        assert not thread.is_alive()
    finally:
        os.kill(pid, signal.SIGCONT)
        client.close()
    said = [r.getMessage() for r in caplog.records if f"job_id={job.id} " in r.getMessage()]
    unanswered = "outcome=unreported (no answer from the server before the worker stopped)"
    assert any(unanswered in line for line in said), said


class SlowCompletion(Noting):
    """Holds each completion back for a second and a half before sending it."""

    def forward(self, sent: Sent, send: Callable[[], Answer]) -> Answer:
        if sent.path == "/jobs/batch/complete":
            time.sleep(1.5)
        return send()


def test_a_job_s_logged_duration_is_its_handler_s_not_its_outcome_s_way_to_the_server(
    server: RealServer, caplog: pytest.LogCaptureFixture
) -> None:
    # It counted from the claim to the server's answer: a job of a moment whose completion
    # waited out an outage was logged as taking the whole outage.
    caplog.set_level(logging.INFO, logger="queuelog.worker")
    worker = Worker(concurrency=1, wait_seconds=1)
    worker.handler("noop")(lambda job: None)
    with Client(server.url, server.keys["shop"]) as shop:
        job = shop.enqueue("noop")
    with running(worker, server, SlowCompletion()):
        wait_until(settled(server, job.id), "the job to complete")
    (record,) = [r for r in caplog.records if f"job_id={job.id} " in r.getMessage()]
    assert record.getMessage().count("outcome=completed ") == 1
    assert record.duration < 1.5  # type: ignore[attr-defined]


def claims_sent(
    worker: Worker, server: RealServer, spacing: float | None, transport: Noting | None = None
) -> list[Sent]:
    """The claims ``worker`` sends while it runs six jobs: all enqueued before it starts
    (``spacing`` None), or one every ``spacing`` seconds once its first claim waits."""
    worker.handler("noop")(lambda job: None)
    transport = transport or Noting()
    client = Client(server.url, server.keys["mailer"], transport=transport)
    with Client(server.url, server.keys["shop"]) as shop:
        ids = [shop.enqueue("noop").id for _ in range(6)] if spacing is None else []
        thread = threading.Thread(target=worker.run, args=(client,), daemon=True)
        thread.start()
        try:
            wait_until(lambda: "POST /jobs/claim" in transport.paths(), "the first claim")
            for _ in range(0 if spacing is None else 6):
                time.sleep(spacing or 0)
                ids.append(shop.enqueue("noop").id)
            wait_until(settled(server, *ids), "every job to settle")
        finally:
            worker.stop()
            thread.join(timeout=DEADLINE)
            client.close()
    return [s for s in transport.sent if s.path == "/jobs/claim"]


def test_a_worker_lingers_while_its_claims_come_back_with_several_jobs(
    server: RealServer,
) -> None:
    claims = claims_sent(Worker(concurrency=2), server, spacing=None)
    # The first claim takes two of the six waiting jobs at once: the next ones linger.
    assert "linger_ms" not in claims[0].json()
    assert len(claims) > 1 and claims[1].json()["linger_ms"] == 10


def test_a_worker_does_not_linger_for_a_slow_trickle(server: RealServer) -> None:
    # Each claim waits about 0.3 s for its one job: a linger would only delay the next.
    claims = claims_sent(Worker(concurrency=2), server, spacing=0.3)
    assert len(claims) >= 6 and all("linger_ms" not in s.json() for s in claims)


def test_a_worker_told_linger_ms_0_never_lingers(server: RealServer) -> None:
    claims = claims_sent(Worker(concurrency=2, linger_ms=0), server, spacing=None)
    assert len(claims) > 1 and all("linger_ms" not in s.json() for s in claims)


class RefusingLinger(Noting):
    """A server from before ``linger_ms``: a claim that sends it is a 422."""

    def forward(self, sent: Sent, send: Callable[[], Any]) -> Any:
        if sent.path == "/jobs/claim" and "linger_ms" in sent.json():
            problem = {"type": "validation", "title": "Request is not valid", "status": 422}
            return answer(422, problem, {"Content-Type": "application/problem+json"})
        return send()


def test_a_worker_whose_server_refuses_linger_ms_claims_without_it(server: RealServer) -> None:
    worker = Worker(concurrency=2)
    claims = claims_sent(worker, server, spacing=None, transport=RefusingLinger())
    lingered = [i for i, s in enumerate(claims) if "linger_ms" in s.json()]
    assert lingered == [1]  # refused once, then never sent again; every job still ran


@pytest.mark.parametrize("linger_ms", [-1, 1001])
def test_a_linger_outside_0_to_1000_ms_is_refused(linger_ms: int) -> None:
    with pytest.raises(ValueError, match="linger_ms"):
        Worker(linger_ms=linger_ms)


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("wait_seconds", -0.5),
        ("wait_seconds", 30.5),
        ("wait_seconds", True),
        ("lease_seconds", 0),
        ("lease_seconds", 3601),
        ("lease_seconds", 2.5),
        ("lease_seconds", True),
    ],
)
def test_a_claim_option_the_server_refuses_is_refused_when_the_worker_is_made(
    option: str, value: float
) -> None:
    # Else the worker starts, and every claim it sends is refused 422.
    with pytest.raises(ValueError, match=option):
        Worker(**{option: value})
