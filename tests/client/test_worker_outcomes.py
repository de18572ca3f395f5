"""A handler's exception becomes its job's outcome whatever the exception carries."""

from __future__ import annotations

from queuelog.client import Client, Fail, Job, Retry, Worker
from tests.client.test_worker import admin, running, settled
from tests.realserver import RealServer, wait_until


class Unprintable(Exception):
    """An exception whose own text cannot be made (a library's, half built)."""

    def __str__(self) -> str:
        raise RuntimeError("no text")


def test_hardening_91_a_reason_given_as_an_exception_fails_the_job_as_asked(
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
