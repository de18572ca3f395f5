"""The SDK's awaited results, unique jobs and progress against a real server:
``wait``/``result`` on both clients, ``unique_key``/``on_duplicate``, and
``job.report_progress`` sent with the worker's heartbeats."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from queuelog.client import (
    AsyncClient,
    Client,
    Job,
    JobCancelled,
    JobFailed,
    JobTimeout,
    ServerUnavailable,
    Worker,
)
from queuelog.client.awaiting import Awaiting
from queuelog.client.policy import RetryPolicy
from queuelog.client.transport import Answer, Outgoing
from queuelog.errors import NotFound
from queuelog.models import JobStatus
from tests.client.pools import Noting, Sent, answer
from tests.client.test_worker import DEADLINE, running, wait_until
from tests.realserver import RealServer
from tests.tcpproxy import TcpProxy


def _client(server: RealServer, name: str) -> Client:
    return Client(server.url, server.keys[name])


def test_result_returns_what_the_worker_returned(server: RealServer) -> None:
    worker = Worker(concurrency=1, wait_seconds=1)
    worker.handler("noop")(lambda job: {"doubled": job.payload["n"] * 2})
    with _client(server, "shop") as shop, running(worker, server):
        job = shop.enqueue("noop", {"n": 21})
        assert shop.result(job, timeout=DEADLINE) == {"doubled": 42}
        finished = shop.wait(job.id, timeout=DEADLINE)
        assert finished.status is JobStatus.COMPLETED


def test_result_raises_job_failed_with_the_job(server: RealServer) -> None:
    worker = Worker(concurrency=1, wait_seconds=1)

    @worker.handler("slow")  # no retries: the first failure is the last
    def fail(job: Job) -> Any:
        raise RuntimeError("no")

    with _client(server, "shop") as shop, running(worker, server):
        job = shop.enqueue("slow")
        with pytest.raises(JobFailed) as failed:
            shop.result(job, timeout=DEADLINE)
    assert failed.value.job.id == job.id and failed.value.job.status is JobStatus.FAILED


def test_result_raises_job_cancelled_and_a_timeout_leaves_the_job_as_it_is(
    real_server: RealServer,
) -> None:
    with _client(real_server, "shop") as shop:
        job = shop.enqueue("noop", delay_seconds=3600)
        started = time.monotonic()
        with pytest.raises(JobTimeout) as late:
            shop.result(job, timeout=0.5)
        assert time.monotonic() - started >= 0.5
        assert isinstance(late.value, TimeoutError)
        assert late.value.job.status is JobStatus.PENDING
        threading.Timer(0.3, shop.cancel, args=(job.id,)).start()
        with pytest.raises(JobCancelled) as cancelled:
            shop.result(job, timeout=DEADLINE)
    assert cancelled.value.job.status is JobStatus.CANCELLED


def test_a_wait_longer_than_one_read_sends_several(real_server: RealServer) -> None:
    """Each read is held at most 30 s by the server; a longer wait reads again."""
    now = [0.0]
    waiting = Awaiting(7, timeout=70, then=lambda job: job, clock=lambda: now[0])
    call = waiting.next_call()
    assert call is not None and call.params == {"wait_seconds": 30.0}
    with _client(real_server, "shop") as shop:
        job = shop.enqueue("noop")
    waiting.take(job)
    now[0] = 65.0
    call = waiting.next_call()
    assert call is not None and call.params == {"wait_seconds": 5.0}
    now[0] = 70.0
    assert waiting.next_call() is None
    with pytest.raises(JobTimeout):
        waiting.finished()


def test_waiting_on_a_job_the_caller_may_not_see_is_not_found(real_server: RealServer) -> None:
    with _client(real_server, "shop") as shop, pytest.raises(NotFound):
        shop.wait(10**12, timeout=5)


def test_async_client_waits_and_reads_results(real_server: RealServer) -> None:
    async def main() -> None:
        async with (
            AsyncClient(real_server.url, real_server.keys["shop"]) as shop,
            AsyncClient(real_server.url, real_server.keys["mailer"]) as mailer,
        ):
            job = await shop.enqueue("send_email", {"to": "a@example.com"})
            waiting = asyncio.ensure_future(shop.result(job, timeout=DEADLINE))
            await asyncio.sleep(0.2)
            (held,) = await mailer.claim(types=["send_email"])
            await mailer.complete(held, {"sent": True})
            assert await waiting == {"sent": True}
            other = await shop.enqueue("noop", delay_seconds=3600)
            with pytest.raises(JobTimeout):
                await shop.wait(other, timeout=0.2)
            await shop.cancel(other)
            with pytest.raises(JobCancelled):
                await shop.result(other, timeout=DEADLINE)

    asyncio.run(main())


def test_an_async_client_with_many_waits_in_flight_still_sends_other_calls(
    real_server: RealServer,
) -> None:
    """A wait holds its connection while the server holds its read; more waits at once
    than a capped pool holds made an enqueue on the same client queue behind them, until
    a wait ended."""

    async def main() -> None:
        async with AsyncClient(real_server.url, real_server.keys["shop"]) as shop:
            later = await shop.enqueue("noop", delay_seconds=3600)
            waits = [asyncio.ensure_future(shop.wait(later, timeout=20)) for _ in range(110)]
            await asyncio.sleep(1.0)  # every wait's read sent, or queued for a connection
            try:
                await shop.enqueue("noop")
                assert not any(wait.done() for wait in waits)
            finally:
                for wait in waits:
                    wait.cancel()
                await asyncio.gather(*waits, return_exceptions=True)

    asyncio.run(main())


def test_enqueue_takes_unique_key_and_on_duplicate(real_server: RealServer) -> None:
    with _client(real_server, "shop") as shop:
        first = shop.enqueue("noop", {"v": 1}, unique_key="nightly", delay_seconds=3600)
        kept = shop.enqueue("noop", {"v": 2}, unique_key="nightly")
        assert kept.id == first.id and kept.payload == {"v": 1} and kept.unique_key == "nightly"
        replaced = shop.enqueue("noop", {"v": 3}, unique_key="nightly", on_duplicate="replace")
        assert replaced.id == first.id and replaced.payload == {"v": 3}
        assert [e.event for e in shop.events(first)] == ["enqueued", "replaced"]
        shop.cancel(first)


def test_report_progress_reaches_the_job_with_the_heartbeats(server: RealServer) -> None:
    worker = Worker(concurrency=1, wait_seconds=1)
    seen: list[dict[str, Any] | None] = []
    release = threading.Event()

    @worker.handler("noop")
    def handle(job: Job) -> Any:
        for step in range(1, 4):
            job.report_progress({"step": step})
        with pytest.raises(ValueError):
            job.report_progress({"big": "x" * 5000})
        release.wait(DEADLINE)
        return None

    with _client(server, "shop") as shop, running(worker, server):
        job = shop.enqueue("noop")

        def shown() -> bool:
            seen.append(shop.get(job).progress)
            return seen[-1] == {"step": 3}

        # Sent within about a second, long before the lease's first heartbeat is due.
        wait_until(shown, "the last progress shown", timeout=DEADLINE)
        release.set()
        done = shop.wait(job, timeout=DEADLINE)
    assert done.progress == {"step": 3}
    assert {"step": 1} not in seen[1:]  # later reports replaced earlier ones unsent


def test_report_progress_outside_a_worker_is_refused(real_server: RealServer) -> None:
    with _client(real_server, "shop") as shop:
        job = shop.enqueue("noop")
        with pytest.raises(ValueError):
            job.report_progress({"step": 1})
        shop.cancel(job)


class Beats(Noting):
    """A real pool that keeps, for each heartbeat sent, when and whether it carried
    progress."""

    def __init__(self) -> None:
        super().__init__()
        self.beats: list[tuple[float, bool]] = []

    def forward(self, sent: Sent, send: Callable[[], Any]) -> Any:
        if sent.path.endswith("/heartbeat"):
            self.beats.append((time.monotonic(), "progress" in sent.json()))
        return send()


def test_progress_goes_out_at_most_once_a_second(server: RealServer) -> None:
    worker = Worker(concurrency=1, wait_seconds=1)
    reporting = 2.5

    @worker.handler("noop")  # a 30 s lease: no heartbeat falls due on its own meanwhile
    def handle(job: Job) -> Any:
        until = time.monotonic() + reporting
        step = 0
        while time.monotonic() < until:
            step += 1
            job.report_progress({"step": step})
            time.sleep(0.02)
        return {"steps": step}

    transport = Beats()
    client = Client(server.url, server.keys["mailer"], transport=transport)
    thread = threading.Thread(target=worker.run, args=(client,), daemon=True)
    thread.start()
    try:
        with _client(server, "shop") as shop:
            job = shop.enqueue("noop")
            done = shop.wait(job, timeout=DEADLINE)
    finally:
        worker.stop()
        thread.join(timeout=DEADLINE)
        client.close()
    sent = [at for at, carried in transport.beats if carried]
    assert 1 <= len(sent) <= reporting + 1
    assert all(later - earlier >= 0.9 for earlier, later in itertools.pairwise(sent))
    assert done.progress is not None and done.progress["step"] <= done.result["steps"]


def test_progress_is_what_was_reported_even_if_the_handler_changes_its_object_after(
    server: RealServer,
) -> None:
    worker = Worker(concurrency=1, wait_seconds=1)
    release = threading.Event()

    @worker.handler("noop")
    def handle(job: Job) -> Any:
        progress: dict[str, Any] = {"done": [1]}
        job.report_progress(progress)
        progress["done"].extend(range(2, 2_000))  # far past 4,096 bytes, never reported
        release.wait(DEADLINE)
        return None

    with _client(server, "shop") as shop, running(worker, server):
        job = shop.enqueue("noop")
        wait_until(lambda: shop.get(job).progress == {"done": [1]}, "the progress reported")
        release.set()
        done = shop.wait(job, timeout=DEADLINE)
    assert done.progress == {"done": [1]} and done.status is JobStatus.COMPLETED


class RefusingProgress(Noting):
    """Refuses every heartbeat that carries progress, as a server with a lower limit would."""

    def forward(self, sent: Sent, send: Callable[[], Any]) -> Any:
        if sent.path.endswith("/heartbeat") and "progress" in sent.json():
            problem = {"type": "payload-too-large", "status": 422, "detail": "too large"}
            return answer(422, problem)
        return send()


def test_a_heartbeat_refused_for_its_progress_renews_the_lease_without_it(
    server: RealServer,
) -> None:
    # A 3 s lease, renewed every second: a progress sent again and again left it to run out.
    worker = Worker(concurrency=1, wait_seconds=1, lease_seconds=3)

    @worker.handler("noop")
    def handle(job: Job) -> Any:
        job.report_progress({"step": 1})
        time.sleep(5)
        return None

    client = Client(server.url, server.keys["mailer"], transport=RefusingProgress())
    thread = threading.Thread(target=worker.run, args=(client,), daemon=True)
    thread.start()
    try:
        with _client(server, "shop") as shop, _client(server, "root") as root:
            job = shop.enqueue("noop")
            done = shop.wait(job, timeout=DEADLINE)
            events = [e.event for e in root.events(job)]
    finally:
        worker.stop()
        thread.join(timeout=DEADLINE)
        client.close()
    assert done.status is JobStatus.COMPLETED and done.progress is None
    assert "lease_expired" not in events, events


def _await_across_an_outage(server: RealServer, wait: Callable[[str, int], Any]) -> Any:
    """``wait(url, job_id)`` through a forwarder cut for longer than the client's own tries
    (a server restarting), the job completed once it is back; what the wait answered."""
    with _client(server, "shop") as shop:
        job = shop.enqueue("noop")
    proxy = TcpProxy(("127.0.0.1", server.port))
    answered: list[Any] = []

    def run() -> None:
        try:
            answered.append(wait(f"http://127.0.0.1:{proxy.port}", job.id))
        except Exception as error:
            answered.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    time.sleep(0.5)  # the wait's read is held by the server
    proxy.cut()
    time.sleep(2.0)
    proxy.restore()
    with _client(server, "mailer") as mailer:
        (held,) = mailer.claim(types=["noop"], limit=1)
        mailer.complete(held, {"done": True})
    thread.join(DEADLINE)
    proxy.close()
    assert len(answered) == 1, "the wait never ended"
    return answered[0]


SHORT_TRIES = RetryPolicy(attempts=2, base_delay=0.05, max_delay=0.1)


def test_a_wait_with_time_left_reads_again_through_a_server_away_for_a_while(
    server: RealServer,
) -> None:
    def wait(url: str, job_id: int) -> Any:
        with Client(url, server.keys["shop"], retry_policy=SHORT_TRIES) as waiter:
            return waiter.result(job_id, timeout=DEADLINE)

    assert _await_across_an_outage(server, wait) == {"done": True}


def test_an_async_wait_with_time_left_reads_again_through_a_server_away_for_a_while(
    server: RealServer,
) -> None:
    async def wait(url: str, job_id: int) -> Any:
        async with AsyncClient(url, server.keys["shop"], retry_policy=SHORT_TRIES) as waiter:
            return await waiter.result(job_id, timeout=DEADLINE)

    answer = _await_across_an_outage(server, lambda url, i: asyncio.run(wait(url, i)))
    assert answer == {"done": True}


def test_a_wait_without_a_timeout_says_a_server_it_cannot_reach_at_once() -> None:
    """With no timeout there is no time left to read again in: a server that cannot be
    reached (a wrong address) is ServerUnavailable once the client's own tries are spent,
    never a wait without end."""
    raised: list[BaseException] = []

    def wait() -> None:
        with Client("http://127.0.0.1:1", "ql_x", retry_policy=SHORT_TRIES) as waiter:
            try:
                waiter.wait(7)
            except ServerUnavailable as error:
                raised.append(error)

    thread = threading.Thread(target=wait, daemon=True)
    thread.start()
    thread.join(DEADLINE)
    assert not thread.is_alive(), "the wait went on reading a server it cannot reach"
    assert len(raised) == 1


PENDING_JOB = {
    "id": 7, "type": "noop", "payload": {}, "priority": "low", "status": "pending",
    "retry_count": 0, "max_retries": 3, "run_at": "2026-11-30T03:32:31Z",
    "created_at": "2026-11-30T03:32:31Z", "updated_at": "2026-11-30T03:32:31Z",
}  # fmt: skip


def _scripted_waits(answers: list[tuple[int, Any, dict[str, str]]]) -> tuple[Client, list[str]]:
    """A client whose reads are answered from ``answers`` in turn (then the last again);
    the URLs it sent."""
    urls: list[str] = []

    class Script(Noting):
        def send(self, request: Outgoing) -> Answer:
            urls.append(request.url)
            status, body, headers = answers[min(len(urls), len(answers)) - 1]
            return answer(status, body, headers)

    client = Client("http://127.0.0.1:1", "ql_x", retry_policy=RetryPolicy(), transport=Script())
    return client, urls


def test_a_wait_ends_by_its_timeout_though_the_server_asks_for_a_longer_pause() -> None:
    # A 429 (or 503) asking for 20 s: waited out and sent again, the read ended the wait
    # 20 s past a timeout of 2.
    for status in (429, 503):
        limited = {"type": "rate-limited" if status == 429 else "unavailable"}
        client, _ = _scripted_waits(
            [(200, PENDING_JOB, {}), (status, limited, {"Retry-After": "20"})]
        )
        started = time.monotonic()
        with client, pytest.raises(JobTimeout):
            client.wait(7, timeout=2)
        assert time.monotonic() - started < 6


def test_a_wait_s_read_sent_again_asks_the_server_to_hold_it_no_longer_than_the_wait_has_left() -> (
    None
):
    client, urls = _scripted_waits(
        [
            (503, {"type": "unavailable"}, {"Retry-After": "1"}),
            (200, PENDING_JOB | {"status": "completed"}, {}),
        ]
    )
    with client:
        assert client.wait(7, timeout=3).status is JobStatus.COMPLETED
    first, again = (float(parse_qs(urlsplit(u).query)["wait_seconds"][0]) for u in urls)
    assert first > 2.5 and again <= first - 0.9  # a second of the wait went on the pause
