"""A worker's hold on its jobs' leases: renewed from when the claim was sent, given up
when the server took a lease back, and handed back at the deadline through the
worker's own transport."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace

import pytest

from queuelog.client import Client, Job, Worker
from queuelog.client.transport import Answer, NotSent, Outgoing
from queuelog.models import JobStatus
from tests.client.pools import Noting, Scripted, Sent, answer
from tests.client.test_worker import DEADLINE, admin, running, running_on_server, settled
from tests.realserver import RealServer, wait_until


def history(server: RealServer, job_id: int) -> list[str]:
    with admin(server) as root:
        return [e.event for e in root.events(job_id)]


class LateClaims(Noting):
    """Holds back the answer of every claim that brought jobs for ``seconds``: a busy
    server, or a slow network, after the server leased them."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def forward(self, sent: Sent, send: Callable[[], Answer]) -> Answer:
        got = send()
        if sent.path == "/jobs/claim" and b'"jobs":[]' not in got.body.replace(b" ", b""):
            time.sleep(self.seconds)
        return got


def test_a_lease_is_renewed_from_when_its_claim_was_sent(server: RealServer) -> None:
    # The lease began when the server answered the claim's query, not when the answer
    # arrived: timed from the answer, the first heartbeat came after the lease had ended.
    lease, late = 6, 4.8
    worker = Worker(concurrency=1, wait_seconds=1, lease_seconds=lease, linger_ms=0)
    ran: list[int] = []

    @worker.handler("noop")
    def handle(job: Job) -> None:
        ran.append(job.id)
        time.sleep(2.5)  # past when a heartbeat timed from the answer would come

    with Client(server.url, server.keys["shop"]) as shop:
        job = shop.enqueue("noop")
    with running(worker, server, LateClaims(late)):
        wait_until(lambda: history(server, job.id)[-1] == "completed", "the job completed")
    assert ran == [job.id]
    assert "lease_expired" not in history(server, job.id)


class LateHeartbeats(Noting):
    """Holds back the answer of every heartbeat for ``seconds``, after the server renewed
    the lease: a slow network on the way back."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def forward(self, sent: Sent, send: Callable[[], Answer]) -> Answer:
        got = send()
        if sent.path.endswith("/heartbeat"):
            time.sleep(self.seconds)
        return got


def test_hardening_80_a_lease_is_renewed_from_when_its_heartbeat_was_sent(
    server: RealServer,
) -> None:
    # Each heartbeat renews the lease when the server takes it: timed from its late
    # answer, the next heartbeat came after the renewed lease had ended.
    lease, late = 3, 2.2
    worker = Worker(concurrency=1, wait_seconds=1, lease_seconds=lease, linger_ms=0)
    ran: list[int] = []

    @worker.handler("noop")
    def handle(job: Job) -> None:
        ran.append(job.id)
        time.sleep(6)  # past the second and third heartbeats

    with Client(server.url, server.keys["shop"]) as shop:
        job = shop.enqueue("noop")
    with running(worker, server, LateHeartbeats(late)):
        wait_until(settled(server, job.id), "the job completed or failed")
    assert history(server, job.id)[-1] == "completed"
    assert ran == [job.id]
    assert "lease_expired" not in history(server, job.id)


def test_hardening_82_progress_reported_while_a_heartbeat_travels_goes_with_the_next(
    server: RealServer,
) -> None:
    # The heartbeat's landing set the next one a third of the lease away (30 s here),
    # over the progress that had come meanwhile: it waited that long, not a second.
    lease, late = 90, 1.5
    worker = Worker(concurrency=1, wait_seconds=1, lease_seconds=lease, linger_ms=0)
    shown: list[bool] = []

    @worker.handler("noop")
    def handle(job: Job) -> None:
        job.report_progress({"step": 1})  # goes out about a second after the claim
        time.sleep(1.5)  # its heartbeat is on its way back now
        job.report_progress({"step": 2})
        with admin(server) as root:
            until = time.monotonic() + lease / 3 - 5  # before a renewal would bring it
            while time.monotonic() < until and root.get(job.id).progress != {"step": 2}:
                time.sleep(0.2)
            shown.append(root.get(job.id).progress == {"step": 2})

    with Client(server.url, server.keys["shop"]) as shop:
        job = shop.enqueue("noop")
    with running(worker, server, LateHeartbeats(late)):
        wait_until(settled(server, job.id), "the job completed")
    assert shown == [True]


class HeartbeatsHeld(Noting):
    """Sends no heartbeat until ``open`` is set (as a network that drops them)."""

    def __init__(self) -> None:
        super().__init__()
        self.open = threading.Event()

    def forward(self, sent: Sent, send: Callable[[], Answer]) -> Answer:
        if sent.path.endswith("/heartbeat") and not self.open.is_set():
            raise NotSent("held back by the test")
        return send()


def test_a_job_whose_lease_was_lost_while_it_waited_for_a_handler_is_not_run(
    server: RealServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Two jobs claimed ahead wait for the one handler; their leases run out meanwhile and
    the server fails them (no retries left). Once a heartbeat tells the worker, the handler
    must not start them: the server may have given them to another worker."""
    caplog.set_level(logging.INFO, logger="queuelog.worker")
    worker = Worker(concurrency=1, prefetch=2, wait_seconds=1, lease_seconds=1, linger_ms=0)
    release = threading.Event()
    ran: list[int] = []

    @worker.handler("slow")  # max_retries 0: a lease that runs out fails the job
    def handle(job: Job) -> None:
        ran.append(job.id)
        release.wait(DEADLINE)

    with Client(server.url, server.keys["shop"]) as shop:
        ids = [m.job.id for m in shop.enqueue_many([{"type": "slow"}] * 3)]
    transport = HeartbeatsHeld()
    try:
        with running(worker, server, transport):
            wait_until(lambda: len(ran) == 1, "the first job started")
            waiting = [i for i in ids if i not in ran]
            with admin(server) as root:
                expired = lambda: all(root.get(i).status is JobStatus.FAILED for i in waiting)  # noqa: E731
                wait_until(expired, "the waiting jobs' leases to run out")
            transport.open.set()
            said = [f"job_id={i} lost its lease before it ran" for i in waiting]
            wait_until(lambda: all(line in caplog.text for line in said), "the losses seen")
            release.set()
            time.sleep(1.0)  # the handler is free: it must start neither
            assert len(ran) == 1
    finally:
        release.set()


class Routed(Noting):
    """A transport of the application's own: it reaches the server behind a name only it
    knows (``http://queue.internal``)."""

    def __init__(self, url: str) -> None:
        super().__init__()
        self.url = url

    def send(self, request: Outgoing) -> Answer:
        real = replace(request, url=request.url.replace("http://queue.internal", self.url))
        return super().send(real)


def test_jobs_are_handed_back_at_the_deadline_through_the_worker_s_own_transport(
    server: RealServer,
) -> None:
    worker = Worker(concurrency=1, prefetch=1, wait_seconds=1, shutdown_seconds=0.5)
    release = threading.Event()
    ran: list[int] = []

    @worker.handler("noop")
    def stuck(job: Job) -> None:
        ran.append(job.id)
        release.wait(DEADLINE)

    with Client(server.url, server.keys["shop"]) as shop:
        ids = [m.job.id for m in shop.enqueue_many([{"type": "noop"}] * 2)]
    transport = Routed(server.url)
    client = Client("http://queue.internal", server.keys["mailer"], transport=transport)
    thread = threading.Thread(target=worker.run, args=(client,), daemon=True)
    thread.start()
    try:
        wait_until(lambda: running_on_server(server) == 2 and ran, "both jobs held")
        worker.stop()
        thread.join(timeout=DEADLINE)
    finally:
        release.set()
        client.close()
    (started,) = ran
    (unstarted,) = [i for i in ids if i != started]
    assert history(server, started)[-1] == "retry_scheduled"  # failed as retryable
    assert history(server, unstarted)[-1] == "released"  # its attempt unspent


def test_a_claim_told_to_wait_longer_than_the_client_waits_out_pauses_that_long() -> None:
    """A 429 asking for more than the client waits out is raised to the worker, which
    sent its next claim a second later, and the next, until the server's time was up."""
    pool = Scripted(lambda _: answer(429, {"type": "rate-limited"}, {"Retry-After": "400"}))
    worker = Worker(concurrency=1, wait_seconds=0.1, idle_seconds=0.1)
    worker.handler("noop")(lambda job: None)
    client = Client("http://127.0.0.1:1", "ql_x", transport=pool)
    thread = threading.Thread(target=worker.run, args=(client,), daemon=True)
    thread.start()
    try:
        wait_until(lambda: pool.sent, "a claim")
        time.sleep(1.5)
        assert pool.paths() == ["POST /jobs/claim"]
    finally:
        worker.stop()  # the pause ends with the run
        thread.join(timeout=DEADLINE)
        client.close()
    assert not thread.is_alive()


def test_hardening_84_a_claim_told_to_wait_longer_than_a_clock_counts_pauses_the_worker() -> None:
    """A Retry-After of seventeen digits overflowed the claimer's pause: the worker
    stopped with OverflowError instead of waiting."""
    asked = {"Retry-After": "99999999999999999"}
    pool = Scripted(lambda _: answer(429, {"type": "rate-limited"}, asked))
    worker = Worker(concurrency=1, wait_seconds=0.1, idle_seconds=0.1)
    worker.handler("noop")(lambda job: None)
    client = Client("http://127.0.0.1:1", "ql_x", transport=pool)
    raised: list[BaseException] = []

    def run() -> None:
        try:
            worker.run(client)
        except BaseException as error:
            raised.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: pool.sent, "a claim")
        time.sleep(1.0)  # the claimer has made its pause (or failed) by now
        assert thread.is_alive() and not raised, raised
        assert pool.paths() == ["POST /jobs/claim"]
    finally:
        worker.stop()  # the pause ends with the run
        thread.join(timeout=DEADLINE)
        client.close()
    assert not thread.is_alive() and not raised, raised
