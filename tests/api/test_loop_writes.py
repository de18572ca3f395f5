"""On SQLite, the writes producers and workers make are committed by the event loop's
group, never queued for the writer's thread (see storage/sqlite/writer.py)."""

from __future__ import annotations

from typing import Any

import pytest

from queuelog.storage.sqlite.store import SqliteStorage
from tests.conftest import Api


@pytest.fixture
def queued(sqlite: SqliteStorage, monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The operations queued for the writer's thread from now on."""
    writer = sqlite._writer
    submitted: list[Any] = []
    submit = writer.submit

    def recording(operation: Any) -> Any:
        submitted.append(operation)
        return submit(operation)

    monkeypatch.setattr(writer, "submit", recording)
    return submitted


def test_the_writes_of_producers_and_workers_are_made_by_the_event_loop(
    sqlite_app: tuple[Any, Api, Api], queued: list[Any]
) -> None:
    _, producer, worker = sqlite_app
    assert producer.post("/jobs", json={"type": "noop"}).status_code == 201
    batch = producer.post("/jobs/batch", json={"jobs": [{"type": "noop"}] * 4})
    assert batch.status_code == 200
    jobs = worker.post("/jobs/claim", json={"limit": 5}).json()["jobs"]
    assert len(jobs) == 5
    one, two, three, four, five = jobs
    beat = worker.post(f"/jobs/{four['id']}/heartbeat", json={"lease_token": four["lease_token"]})
    assert beat.status_code == 200 and beat.json()["status"] == "running"
    back = worker.post(f"/jobs/{four['id']}/release", json={"lease_token": four["lease_token"]})
    assert back.status_code == 200 and back.json()["status"] == "pending"
    (four,) = worker.post("/jobs/claim", json={"limit": 5}).json()["jobs"]
    rest = [four, five]
    done = worker.post(f"/jobs/{one['id']}/complete", json={"lease_token": one["lease_token"]})
    assert done.status_code == 200 and done.json()["status"] == "completed"
    again = worker.post(
        f"/jobs/{two['id']}/fail", json={"lease_token": two["lease_token"], "error": "later"}
    )
    assert again.status_code == 200 and again.json()["status"] == "pending"
    failed = worker.post(
        f"/jobs/{three['id']}/fail",
        json={"lease_token": three["lease_token"], "error": "boom", "retryable": False},
    )
    assert failed.status_code == 200 and failed.json()["status"] == "failed"
    items = [{"id": j["id"], "lease_token": j["lease_token"]} for j in rest]
    results = worker.post("/jobs/batch/complete", json={"items": items}).json()["results"]
    assert [r["status"] for r in results] == [200, 200]
    # A guard that fails is answered the same way: from the loop's group.
    stale = worker.post(f"/jobs/{one['id']}/complete", json={"lease_token": one["lease_token"]})
    assert stale.status_code == 409
    assert queued == []
