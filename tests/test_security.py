"""One test per item of the vulnerability review (V-01..V-10); SECURITY.md maps them.

Other tests cover the same ground in more detail; these state each fix plainly.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable

import pytest
from fastapi.testclient import TestClient

from queuelog.sanitize import sanitize_error
from queuelog.storage.sqlite.store import SqliteStorage
from tests.conftest import Api, claim_one, enqueue


def test_v01_every_job_route_requires_an_api_key(anonymous: Api, producer: Api) -> None:
    job = enqueue(producer)
    for method, path in [
        ("POST", "/jobs"),
        ("GET", "/jobs"),
        ("GET", f"/jobs/{job['id']}"),
        ("POST", "/jobs/claim"),
        ("POST", f"/jobs/{job['id']}/complete"),
        ("POST", f"/jobs/{job['id']}/fail"),
    ]:
        assert anonymous.request(method, path, json={}).status_code == 401, path


def test_v01_producers_and_workers_have_separate_roles(producer: Api, worker: Api) -> None:
    assert producer.post("/jobs/claim", json={}).status_code == 403
    assert worker.post("/jobs", json={"type": "noop"}).status_code == 403


# Reads the SQLite file itself; tests/storage/test_postgres.py checks PostgreSQL's tables.
@pytest.mark.parametrize("storage", ["sqlite"], indirect=True)
def test_v01_keys_are_stored_only_as_hashes(admin: Api, storage: SqliteStorage) -> None:
    created = admin.post("/keys", json={"name": "p", "roles": ["producer"]}).json()
    with sqlite3.connect(storage.path) as conn:
        dump = "\n".join(conn.iterdump())
    assert created["key"] not in dump
    assert created["key"][len(created["prefix"]) :] not in dump


def test_v02_unknown_job_type_is_rejected_with_422(producer: Api) -> None:
    for job_type in ["DROP TABLE", "shutdown", "admin_task"]:
        response = producer.post("/jobs", json={"type": job_type, "payload": {}})
        assert response.status_code == 422
        assert response.json()["type"] == "unknown-job-type"


def test_v03_priority_above_the_keys_ceiling_is_403(
    as_key: Callable[..., Api], worker: Api
) -> None:
    spammer = as_key("spam", "producer")  # default ceiling: medium
    response = spammer.post("/jobs", json={"type": "noop", "priority": "critical"})
    assert response.status_code == 403 and response.json()["type"] == "forbidden"
    assert spammer.post("/jobs", json={"type": "noop", "priority": "high"}).status_code == 403
    assert spammer.post("/jobs", json={"type": "noop", "priority": "medium"}).status_code == 201
    trusted = as_key("ops", "producer", max_priority="critical")
    assert trusted.post("/jobs", json={"type": "noop", "priority": "critical"}).status_code == 201


def test_v04_worker_id_cannot_be_chosen_by_the_caller(producer: Api, worker: Api) -> None:
    enqueue(producer)
    spoof = worker.post("/jobs/claim", json={"worker_id": "legitimate-worker-1"})
    assert spoof.status_code == 422
    assert claim_one(worker)["worker_id"] == "mailer"


def test_v05_only_the_lease_holder_can_complete_or_fail(
    producer: Api, worker: Api, as_key: Callable[..., Api], admin: Api
) -> None:
    job = enqueue(producer)
    held = claim_one(worker)
    intruder = as_key("intruder", "worker")
    body = {"lease_token": held["lease_token"]}
    complete = intruder.post(f"/jobs/{job['id']}/complete", json=body)
    fail = intruder.post(f"/jobs/{job['id']}/fail", json={**body, "error": "x"})
    assert (complete.status_code, fail.status_code) == (409, 409)
    assert complete.json()["type"] == fail.json()["type"] == "not-lease-holder"
    assert admin.get(f"/jobs/{job['id']}").json()["status"] == "running"


def test_v06_concurrent_claims_hand_each_job_to_exactly_one_worker(
    producer: Api, as_key: Callable[..., Api]
) -> None:
    producer.post("/jobs/batch", json={"jobs": [{"type": "noop"}] * 120})
    workers = [as_key(f"racer-{i}", "worker") for i in range(8)]
    start = threading.Barrier(len(workers))
    claimed: list[tuple[int, str]] = []
    lock = threading.Lock()

    def race(api: Api) -> None:
        start.wait(timeout=30)
        for _ in range(100):
            jobs = api.post("/jobs/claim", json={"limit": 1}).json()["jobs"]
            if not jobs:
                return
            with lock:
                claimed.extend((j["id"], j["worker_id"]) for j in jobs)

    threads = [threading.Thread(target=race, args=(w,)) for w in workers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    ids = [job_id for job_id, _ in claimed]
    assert len(ids) == 120 and len(set(ids)) == 120


def test_v07_oversized_payload_is_422_and_oversized_body_413(producer: Api) -> None:
    response = producer.post("/jobs", json={"type": "noop", "payload": {"x": "a" * 70_000}})
    assert response.status_code == 422 and response.json()["type"] == "payload-too-large"
    huge = producer.post("/jobs", json={"type": "noop", "payload": {"x": "a" * 2_000_000}})
    assert huge.status_code == 413 and huge.json()["type"] == "body-too-large"


@pytest.mark.parametrize("storage", ["sqlite"], indirect=True)
def test_v08_sql_metacharacters_are_stored_as_text(
    producer: Api, admin: Api, storage: SqliteStorage
) -> None:
    payload = {"q": "'; DROP TABLE jobs; --"}
    job = enqueue(producer, payload=payload, idempotency_key="'); DELETE FROM jobs; --")
    assert admin.get(f"/jobs/{job['id']}").json()["payload"] == payload
    listed = admin.get("/jobs", params={"type": "noop' OR '1'='1"}).json()["jobs"]
    assert listed == []
    assert storage.integrity_check() == "ok"


def test_v09_idempotency_keys_do_not_reveal_other_producers_jobs(
    producer: Api, as_key: Callable[..., Api]
) -> None:
    enqueue(producer, payload={"order": 1}, idempotency_key="order-1")
    prober = as_key("prober", "producer")
    probe = prober.post("/jobs", json={"type": "noop", "idempotency_key": "order-1"})
    assert probe.status_code == 201  # a new job of its own: nothing learnt
    assert probe.json()["payload"] == {}


def test_v10_error_text_is_sanitised_and_shown_to_admins_only(
    producer: Api, worker: Api, admin: Api, client: TestClient
) -> None:
    job = enqueue(producer)
    held = claim_one(worker)
    error = (
        "Traceback: File /srv/app/worker.py line 3\n"
        "connect postgresql://app:hunter2@db.internal/prod failed; "
        "Authorization: Bearer abc.def.ghi password=swordfish"
    )
    worker.post(
        f"/jobs/{job['id']}/fail", json={"lease_token": held["lease_token"], "error": error}
    )
    stored = admin.get(f"/jobs/{job['id']}").json()["error"]
    assert stored == sanitize_error(error)
    for secret in ["hunter2", "abc.def.ghi", "swordfish", "/srv/app"]:
        assert secret not in stored
    assert producer.get(f"/jobs/{job['id']}").json()["error"] is None
    assert all(j["error"] is None for j in producer.get("/jobs").json()["jobs"])
    events = producer.get(f"/jobs/{job['id']}/events").json()["events"]
    assert all(e["detail"] is None for e in events)
