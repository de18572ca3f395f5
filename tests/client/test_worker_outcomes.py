"""A handler's exception becomes its job's outcome whatever the exception carries."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from queuelog.client import Client, Fail, Job, Retry, Worker
from queuelog.client.transport import Answer, NotSent
from tests.client.pools import Noting, Sent
from tests.client.test_worker import DEADLINE, admin, running, settled
from tests.realserver import RealServer, wait_until


class Unprintable(Exception):
    """An exception whose own text cannot be made (a library's, half built)."""

    def __str__(self) -> str:
        raise RuntimeError("no text")


def test_hardening_81_a_reason_given_as_an_exception_fails_the_job_as_asked(
    server: RealServer,
) -> None:
    # "slow" has no retries left after one attempt: each outcome fails the job for good,
    # with the handler's reason; one that never reached the server ended by its lease.
    worker = Worker(concurrency=3, wait_seconds=1, linger_ms=0)

    @worker.handler("slow")
    def handle(job: Job) -> None:
        raised = job.payload["raise"]
        if raised == "fail":
            raise Fail(ValueError("no such mailbox"))  # type: ignore[arg-type]
        if raised == "retry":
            raise Retry(ValueError("mailbox busy"), after=0)  # type: ignore[arg-type]
        raise Unprintable()

    with Client(server.url, server.keys["shop"]) as shop:
        ids = {r: shop.enqueue("slow", {"raise": r}).id for r in ("fail", "retry", "unprintable")}
    with running(worker, server):
        wait_until(settled(server, *ids.values()), "every job failed")
    with admin(server) as root:
        errors = {raised: root.get(i).error for raised, i in ids.items()}
        histories = [[e.event for e in root.events(i)] for i in ids.values()]
    assert errors == {
        "fail": "no such mailbox",
        "retry": "mailbox busy",
        "unprintable": "Unprintable: <Unprintable that cannot be shown as text>",
    }
    assert all("lease_expired" not in events for events in histories), histories


class FirstLeaseHeld(Noting):
    """Sends no heartbeat of the first lease it sees (as a network that drops them); those
    of a later lease go, so that lease is never lost, however slow the machine."""

    def __init__(self) -> None:
        super().__init__()
        self.first: str | None = None

    def forward(self, sent: Sent, send: Callable[[], Answer]) -> Answer:
        if sent.path.endswith("/heartbeat"):
            token = sent.json()["lease_token"]
            self.first = self.first or token
            if token == self.first:
                raise NotSent("held back by the test")
        return send()


def test_hardening_83_a_worker_does_not_run_a_job_its_own_handler_still_runs(
    server: RealServer,
) -> None:
    """The first run's lease runs out (its heartbeats lost) while its handler goes on; the
    server gives the job back, and this same worker claims it again: the second run must
    wait for the first to end, not run beside it."""
    worker = Worker(concurrency=2, wait_seconds=1, lease_seconds=1, linger_ms=0)
    lock = threading.Lock()
    at_once: list[int] = []
    now = 0
    first_may_end = threading.Event()

    @worker.handler("noop")
    def handle(job: Job) -> None:
        nonlocal now
        with lock:
            now += 1
            at_once.append(now)
        try:
            if job.retry_count == 0:
                first_may_end.wait(DEADLINE)
        finally:
            with lock:
                now -= 1

    with Client(server.url, server.keys["shop"]) as shop:
        job = shop.enqueue("noop")
    try:
        with running(worker, server, FirstLeaseHeld()), admin(server) as root:
            claims = lambda: [e.event for e in root.events(job.id)].count("claimed")  # noqa: E731
            wait_until(lambda: claims() == 2, "the job claimed again")
            time.sleep(1.0)  # the free handler has had time to start the second claim
            first_may_end.set()
            wait_until(settled(server, job.id), "the job completed")
    finally:
        first_may_end.set()
    assert at_once == [1, 1]
