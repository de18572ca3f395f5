"""On SQLite, a claim long-polling on the server's loop is woken before the enqueue that
feeds it commits, and claims in the insert's own group: one commit for both."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from queuelog.api.routes import claims
from queuelog.api.schemas import ClaimRequest
from queuelog.auth import KeyRing
from queuelog.clock import FakeClock
from queuelog.config import Settings
from queuelog.models import ApiKey, JobStatus, Role
from queuelog.service import JobService
from queuelog.specs import EnqueueSpec
from queuelog.storage.sqlite.store import SqliteStorage
from queuelog.storage.sqlite.transactions import SingleInsert
from queuelog.wakeup import Wakeup
from tests.conftest import Api


@pytest.fixture
def groups(sqlite: SqliteStorage, monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """What each group the writer commits from now on holds: its operations' names."""
    writer = sqlite._writer
    seen: list[list[str]] = []
    outcomes = writer._outcomes

    def recording(conn: Any, group: Any, wait: bool) -> Any:
        seen.append([_name(op) for op, _ in group])
        return outcomes(conn, group, wait)

    monkeypatch.setattr(writer, "_outcomes", recording)
    # No fallback recheck during a test: every claim here is one the test caused.
    monkeypatch.setattr(claims, "_RECHECK_SECONDS", 60.0)
    return seen


def _name(operation: Any) -> str:
    """A single enqueue's insert is a ``SingleInsert``; other operations are closures
    made by the store's methods, named after them."""
    if isinstance(operation, SingleInsert):
        return "SingleInsert"
    return str(operation.__qualname__.split(".")[1])


def _waiting_claim(
    worker: Api, app: Any, body: dict[str, Any]
) -> tuple[threading.Thread, list[Any]]:
    answers: list[Any] = []
    thread = threading.Thread(target=lambda: answers.append(worker.post("/jobs/claim", json=body)))
    thread.start()
    wakeup = app.state.queuelog.wakeup
    for _ in range(500):  # bounded: until the claim has found nothing and waits
        with wakeup._lock:
            waiting = [w for w in wakeup._waiters if w._future is not None]
        if waiting:
            return thread, answers
        time.sleep(0.01)
    raise AssertionError("the claim did not start waiting")


def test_a_waiting_claim_is_made_in_the_enqueues_own_group(
    sqlite_app: tuple[Any, Api, Api], sqlite: SqliteStorage, groups: list[list[str]]
) -> None:
    app, producer, worker = sqlite_app
    thread, answers = _waiting_claim(worker, app, {"wait_seconds": 10})
    groups.clear()
    job = producer.post("/jobs", json={"type": "noop"}).json()
    thread.join(20)
    assert [j["id"] for j in answers[0].json()["jobs"]] == [job["id"]]
    # The insert and the claim, one transaction and one commit.
    assert groups == [["SingleInsert", "job_claim_async"]]
    events = sqlite.job_events(job["id"])
    assert [e.event.value for e in events] == ["enqueued", "claimed"]


def test_a_claimer_of_another_type_is_not_woken_before_the_commit(
    sqlite_app: tuple[Any, Api, Api], groups: list[list[str]]
) -> None:
    app, producer, worker = sqlite_app
    thread, answers = _waiting_claim(worker, app, {"types": ["send_email"], "wait_seconds": 1})
    groups.clear()
    producer.post("/jobs", json={"type": "noop"})
    thread.join(20)
    assert answers[0].json() == {"jobs": []}
    # Only the notification after the commit woke it: its claim came in a later group.
    assert groups[0] == ["SingleInsert"]
    claimed = worker.post("/jobs/claim", json={"types": ["noop"]}).json()["jobs"]
    assert len(claimed) == 1


def _service_and_keys(
    sqlite: SqliteStorage, settings: Settings, clock: FakeClock
) -> tuple[JobService, ApiKey, ApiKey]:
    ring = KeyRing(sqlite, clock)
    producer, _ = ring.create("shop", frozenset({Role.PRODUCER}))
    worker, _ = ring.create("mailer", frozenset({Role.WORKER}))
    return JobService(sqlite, settings, clock), producer, worker


def test_a_long_poll_from_a_client_already_gone_claims_nothing(
    sqlite: SqliteStorage, settings: Settings, clock: FakeClock
) -> None:
    service, producer, worker = _service_and_keys(sqlite, settings, clock)
    ((job, _),) = service.enqueue_many(producer, [EnqueueSpec(type="noop")])

    async def gone() -> dict[str, Any]:
        return {"type": "http.disconnect"}

    body = ClaimRequest(wait_seconds=5)
    jobs = asyncio.run(claims.claim_or_wait(service, Wakeup(), worker, body, gone))
    assert jobs == []
    assert service.get(producer, job.id).status == JobStatus.PENDING


def test_a_long_poll_whose_channel_fails_raises_the_failure(
    sqlite: SqliteStorage, settings: Settings, clock: FakeClock
) -> None:
    service, _, worker = _service_and_keys(sqlite, settings, clock)

    async def broken() -> dict[str, Any]:
        raise RuntimeError("channel broken")

    body = ClaimRequest(wait_seconds=5)
    with pytest.raises(RuntimeError, match="channel broken"):
        asyncio.run(claims.claim_or_wait(service, Wakeup(), worker, body, broken))
