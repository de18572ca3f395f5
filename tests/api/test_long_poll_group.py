"""On SQLite, a claim long-polling on the server's loop is woken before the enqueue that
feeds it commits, and claims in the insert's own group: one commit for both."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from queuelog.api.app import create_app
from queuelog.auth import KeyRing
from queuelog.clock import FakeClock
from queuelog.config import Settings
from queuelog.models import Role
from queuelog.storage.sqlite.store import SqliteStorage
from tests.conftest import Api


@pytest.fixture
def sqlite(settings: Settings) -> Iterator[SqliteStorage]:
    assert settings.sqlite_path is not None
    store = SqliteStorage(settings.sqlite_path)
    yield store
    store.close()


@pytest.fixture(params=[True, False], ids=["fast-lane", "routes"])
def app_apis(
    request: pytest.FixtureRequest, settings: Settings, sqlite: SqliteStorage, clock: FakeClock
) -> Iterator[tuple[Any, Api, Api]]:
    app = create_app(
        settings, storage=sqlite, clock=clock, run_maintenance=False, fast_lane=request.param
    )
    ring = KeyRing(sqlite, clock)
    _, producer = ring.create("shop", frozenset({Role.PRODUCER}))
    _, worker = ring.create("mailer", frozenset({Role.WORKER}))
    with TestClient(app, raise_server_exceptions=False) as client:
        yield app, Api(client, producer), Api(client, worker)


def _waiting_claim(
    worker: Api, app: Any, body: dict[str, Any]
) -> tuple[threading.Thread, list[Any]]:
    answers: list[Any] = []
    thread = threading.Thread(target=lambda: answers.append(worker.post("/jobs/claim", json=body)))
    thread.start()
    waiters = app.state.queuelog.wakeup._waiters
    for _ in range(500):  # bounded: until the claim has found nothing and waits
        if waiters and all(w._future is not None for w in waiters):
            break
        time.sleep(0.01)
    assert waiters, "the claim did not start waiting"
    return thread, answers


def test_a_waiting_claim_is_made_in_the_enqueues_own_group(
    app_apis: tuple[Any, Api, Api], sqlite: SqliteStorage
) -> None:
    app, producer, worker = app_apis
    thread, answers = _waiting_claim(worker, app, {"wait_seconds": 10})
    before = sqlite._writer.groups_committed
    job = producer.post("/jobs", json={"type": "noop"}).json()
    thread.join(20)
    assert [j["id"] for j in answers[0].json()["jobs"]] == [job["id"]]
    assert sqlite._writer.groups_committed == before + 1  # insert and claim, one commit
    events = sqlite.job_events(job["id"])
    assert [e.event.value for e in events] == ["enqueued", "claimed"]


def test_a_claim_woken_for_a_job_of_another_type_waits_on(
    app_apis: tuple[Any, Api, Api],
) -> None:
    app, producer, worker = app_apis
    thread, answers = _waiting_claim(worker, app, {"types": ["send_email"], "wait_seconds": 1})
    producer.post("/jobs", json={"type": "noop"})
    thread.join(20)
    assert answers[0].json() == {"jobs": []}
    claimed = worker.post("/jobs/claim", json={"types": ["noop"]}).json()["jobs"]
    assert len(claimed) == 1
