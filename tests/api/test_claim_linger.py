"""POST /jobs/claim with ``linger_ms``: a claim that holds fewer jobs than its limit goes
on taking jobs as they become ready, then answers with all of them."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from fastapi.testclient import TestClient

from queuelog.api.app import create_app
from queuelog.clock import FakeClock
from queuelog.config import Settings
from queuelog.errors import StorageUnavailable
from queuelog.storage.protocol import Storage
from tests.conftest import Api, KeyMaker, enqueue
from tests.realserver import wait_until


def _claim_in_background(
    worker: Api, body: dict[str, Any]
) -> tuple[threading.Thread, dict[str, Any]]:
    answer: dict[str, Any] = {}

    def claim() -> None:
        answer["response"] = worker.post("/jobs/claim", json=body)

    thread = threading.Thread(target=claim)
    thread.start()
    return thread, answer


def _until_claimed(admin: Api, job: dict[str, Any]) -> None:
    """Wait until ``job`` is running: the claim that took it now lingers."""
    running = lambda: admin.get(f"/jobs/{job['id']}").json()["status"] == "running"  # noqa: E731
    wait_until(running, "the lingering claim to hold the job")


def test_a_lingering_claim_takes_jobs_enqueued_after_its_first(
    producer: Api, worker: Api, admin: Api
) -> None:
    first = enqueue(producer)
    thread, answer = _claim_in_background(worker, {"limit": 3, "linger_ms": 1000})
    _until_claimed(admin, first)
    later = [enqueue(producer), enqueue(producer)]
    thread.join(timeout=30)
    jobs = answer["response"].json()["jobs"]
    assert [j["id"] for j in jobs] == [first["id"]] + [j["id"] for j in later]
    assert all(j["status"] == "running" and j["lease_token"] for j in jobs)
    for job in jobs:
        events = admin.get(f"/jobs/{job['id']}/events").json()["events"]
        assert [e["event"] for e in events] == ["enqueued", "claimed"]


def test_a_lingering_claim_answers_with_what_it_holds_when_the_linger_is_over(
    producer: Api, worker: Api
) -> None:
    job = enqueue(producer)
    started = time.monotonic()
    response = worker.post("/jobs/claim", json={"limit": 5, "linger_ms": 300})
    assert [j["id"] for j in response.json()["jobs"]] == [job["id"]]
    assert time.monotonic() - started >= 0.3  # it lingered for more that never came
    assert worker.post("/jobs/claim", json={"limit": 5}).json() == {"jobs": []}


def test_without_linger_a_claim_answers_with_what_is_ready_at_once(
    producer: Api, worker: Api
) -> None:
    job = enqueue(producer)
    thread, answer = _claim_in_background(worker, {"limit": 3})
    time.sleep(0.2)
    later = enqueue(producer)
    thread.join(timeout=30)
    assert [j["id"] for j in answer["response"].json()["jobs"]] == [job["id"]]
    assert [j["id"] for j in worker.post("/jobs/claim", json={}).json()["jobs"]] == [later["id"]]


def test_the_linger_is_counted_from_the_first_job_not_from_the_request(
    producer: Api, worker: Api, admin: Api
) -> None:
    thread, answer = _claim_in_background(
        worker, {"limit": 2, "wait_seconds": 20, "linger_ms": 600}
    )
    time.sleep(0.8)  # waiting for a first job, longer than the linger
    first = enqueue(producer)
    _until_claimed(admin, first)
    second = enqueue(producer)
    thread.join(timeout=30)
    assert [j["id"] for j in answer["response"].json()["jobs"]] == [first["id"], second["id"]]


@pytest.mark.parametrize("bad", [-1, 1001, 2.5, "10", True, None])
def test_linger_ms_outside_0_to_1000_or_not_an_integer_is_422_and_claims_nothing(
    producer: Api, worker: Api, bad: Any
) -> None:
    job = enqueue(producer)
    response = worker.post("/jobs/claim", json={"limit": 2, "linger_ms": bad})
    assert response.status_code == 422 and response.json()["type"] == "validation"
    assert [j["id"] for j in worker.post("/jobs/claim", json={}).json()["jobs"]] == [job["id"]]


def test_hardening_11_a_claim_that_can_neither_read_its_key_nor_release_answers_with_its_jobs(
    storage: Storage, settings: Settings, clock: FakeClock, make_key: KeyMaker
) -> None:
    # Its last look at the key met the database away: the claim gave its job back, and
    # as the release failed too, the job stayed leased to nobody until its lease ended.
    class AwayOnceClaimed:
        """The app's storage, away for keys and releases once a claim has taken a job."""

        def __init__(self) -> None:
            self.away = False
            self.refused: list[str] = []

        def __getattr__(self, name: str) -> Any:
            return getattr(storage, name)

        async def job_claim(self, params: Any) -> Any:
            jobs = await storage.job_claim(params)
            self.away = self.away or bool(jobs)
            return jobs

        async def key_by_hash(self, digest: str) -> Any:
            if self.away:
                self.refused.append("key")
                raise StorageUnavailable("The database cannot be reached")
            return await storage.key_by_hash(digest)

        async def job_release(self, held: Any) -> Any:
            if self.away:
                self.refused.append("release")
                raise StorageUnavailable("The database cannot be reached")
            return await storage.job_release(held)

    away = AwayOnceClaimed()
    app = create_app(settings, storage=away, clock=clock, run_maintenance=False)  # type: ignore[arg-type]
    client = TestClient(app)  # no lifespan: the storage is the test's, closed by its fixture
    producer = Api(client, make_key("shop", "producer")[1])
    worker = Api(client, make_key("mailer", "worker")[1])
    job = enqueue(producer)
    # The key, read at the request's start, is read again once the linger (1 s) is over.
    response = worker.post("/jobs/claim", json={"limit": 2, "linger_ms": 1000})
    assert response.status_code == 200, response.text
    (held,) = response.json()["jobs"]
    assert held["id"] == job["id"] and held["lease_token"]
    assert away.refused == ["key", "release"]  # one try each: no release waits in vain
