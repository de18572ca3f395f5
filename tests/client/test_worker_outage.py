"""A worker's outcomes against a server that is away for longer than one send's retries
(they reach it once it is back, and no job runs twice), or that has them already."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from queuelog.client import Client, Fail, Job, Snooze, Worker
from queuelog.client.policy import RetryPolicy
from queuelog.client.transport import Answer
from queuelog.models import JobStatus
from tests.client.pools import Noting, Sent
from tests.client.test_worker import DEADLINE, admin
from tests.realserver import RealServer, wait_until
from tests.tcpproxy import TcpProxy

# Longer than the worker's client tries one send for (its retry policy's pauses).
AWAY_SECONDS = 2.0


@contextmanager
def through(proxy: TcpProxy, worker: Worker, server: RealServer) -> Iterator[None]:
    """``worker`` running with a client that reaches ``server`` only through ``proxy``."""
    policy = RetryPolicy(attempts=3, base_delay=0.1, max_delay=0.3)
    client = Client(f"http://127.0.0.1:{proxy.port}", server.keys["mailer"], retry_policy=policy)
    thread = threading.Thread(target=worker.run, args=(client,), daemon=True)
    thread.start()
    try:
        yield
    finally:
        worker.stop()
        thread.join(timeout=DEADLINE)
        client.close()
        proxy.close()
    assert not thread.is_alive(), "the worker did not stop"


@pytest.mark.parametrize(
    ("outcome", "status"),
    [
        ("complete", JobStatus.COMPLETED),
        ("fail", JobStatus.FAILED),
        ("snooze", JobStatus.PENDING),
    ],
)
def test_an_outcome_the_server_was_away_for_reaches_it_once_it_is_back(
    server: RealServer, outcome: str, status: JobStatus
) -> None:
    worker = Worker(concurrency=3, wait_seconds=1, linger_ms=0)
    finish = threading.Event()
    runs: list[int] = []

    @worker.handler("send_email")  # a 30 s lease: it does not run out while away
    def handle(job: Job) -> dict[str, bool]:
        runs.append(job.id)
        finish.wait(DEADLINE)
        if outcome == "fail":
            raise Fail("no such mailbox")
        if outcome == "snooze":
            raise Snooze(3600)
        return {"sent": True}

    with Client(server.url, server.keys["shop"]) as shop:
        ids = [shop.enqueue("send_email", {"to": f"{n}@example.com"}).id for n in range(3)]
    proxy = TcpProxy(("127.0.0.1", server.port))
    with through(proxy, worker, server):
        wait_until(lambda: sorted(runs) == ids, "the jobs to start")
        proxy.cut()
        finish.set()  # they finish while the server cannot be reached
        time.sleep(AWAY_SECONDS)
        proxy.restore()
        with admin(server) as root:

            def ended() -> bool:
                return all(root.get(i).status is status for i in ids)

            wait_until(ended, f"the jobs to be {status}")
            histories = [[e.event for e in root.events(i)] for i in ids]
    assert sorted(runs) == ids  # each ran once
    for events in histories:
        assert "lease_expired" not in events and events.count("claimed") == 1, events


def test_a_worker_stopped_while_its_server_is_away_stops_and_leaves_the_job_to_its_lease(
    server: RealServer, caplog: pytest.LogCaptureFixture
) -> None:
    worker = Worker(concurrency=1, wait_seconds=1, linger_ms=0, shutdown_seconds=1)
    started, away = threading.Event(), threading.Event()

    @worker.handler("send_email")
    def handle(job: Job) -> None:
        started.set()
        away.wait(DEADLINE)

    with Client(server.url, server.keys["shop"]) as shop:
        job = shop.enqueue("send_email", {"to": "a@example.com"})
    proxy = TcpProxy(("127.0.0.1", server.port))
    with caplog.at_level("ERROR", logger="queuelog.worker"), through(proxy, worker, server):
        assert started.wait(DEADLINE)
        proxy.cut()
        away.set()
        time.sleep(AWAY_SECONDS)
    # ``through`` stopped the worker (it did not wait for the server for ever), which
    # said what it could not report.
    assert any("outcome=unreported" in r.getMessage() for r in caplog.records), caplog.text
    with admin(server) as root:
        assert root.get(job.id).status is JobStatus.RUNNING  # until its lease runs out


class HeartbeatAfterCompletion(Noting):
    """Holds the answer to a completion until a heartbeat has gone out after it."""

    def __init__(self) -> None:
        super().__init__()
        self.completing = threading.Event()
        self.beaten = threading.Event()

    def forward(self, sent: Sent, send: Callable[[], Answer]) -> Answer:
        if sent.path == "/jobs/batch/complete":
            self.completing.set()
            answer = send()
            self.beaten.wait(DEADLINE)
            return answer
        answer = send()
        if sent.path.endswith("/heartbeat") and self.completing.is_set():
            self.beaten.set()
        return answer


def test_a_heartbeat_that_meets_its_jobs_own_completion_warns_of_no_lost_lease(
    server: RealServer, caplog: pytest.LogCaptureFixture
) -> None:
    worker = Worker(concurrency=1, wait_seconds=1, linger_ms=0)
    worker.handler("slow")(lambda job: None)  # a 2 s lease: a heartbeat every 0.67 s
    transport = HeartbeatAfterCompletion()
    with Client(server.url, server.keys["shop"]) as shop:
        job = shop.enqueue("slow")
    client = Client(server.url, server.keys["mailer"], transport=transport)
    thread = threading.Thread(target=worker.run, args=(client,), daemon=True)
    with caplog.at_level("INFO", logger="queuelog.worker"):
        thread.start()
        try:
            assert transport.beaten.wait(DEADLINE), "no heartbeat met the completion"
            with admin(server) as root:
                wait_until(lambda: root.get(job.id).status is JobStatus.COMPLETED, "completed")
            wait_until(lambda: "outcome=completed" in caplog.text, "the completion's line")
        finally:
            worker.stop()
            thread.join(timeout=DEADLINE)
            client.close()
    assert "lost its lease" not in caplog.text, caplog.text
