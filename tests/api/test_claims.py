"""POST /jobs/claim: order, filters, identity, atomicity, long-poll."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from queuelog.api.app import create_app
from queuelog.clock import FakeClock, rfc3339
from queuelog.storage.protocol import Storage
from tests.conftest import TYPES, Api, KeyMaker, claim_one, enqueue, make_settings


def test_claim_takes_highest_priority_then_oldest_then_lowest_id(
    producer: Api, worker: Api, clock: FakeClock
) -> None:
    low = enqueue(producer, priority="low")
    clock.advance(1)
    high_old = enqueue(producer, priority="high")
    clock.advance(1)
    medium = enqueue(producer, priority="medium")
    high_new_a = enqueue(producer, priority="high")
    high_new_b = enqueue(producer, priority="high")
    order = [claim_one(worker)["id"] for _ in range(5)]
    assert order == [high_old["id"], high_new_a["id"], high_new_b["id"], medium["id"], low["id"]]


def test_hardening_69_a_claim_naming_no_type_takes_only_the_types_this_node_configures(
    tmp_path: Path, storage: Storage, clock: FakeClock, make_key: KeyMaker, worker: Api
) -> None:
    # Another node (or this one before its config changed) knows a type this one does
    # not: a claim naming no type took its jobs, past the limits the other node keeps,
    # while one naming it was refused as an unknown type.
    other = make_settings(tmp_path, types={**TYPES, "gone": {"concurrency": 1}})
    app = create_app(other, storage=storage, clock=clock, run_maintenance=False)
    _, shop = make_key("shop-2", "producer")
    with TestClient(app, raise_server_exceptions=False) as there:  # closes the storage
        gone = [enqueue(Api(there, shop), "gone") for _ in range(2)]
        assert worker.post("/jobs/claim", json={"limit": 5}).json() == {"jobs": []}
        refused = worker.post("/jobs/claim", json={"types": ["gone"]})
        assert refused.status_code == 422 and refused.json()["type"] == "unknown-job-type"
        # A key allowed the type takes none of its jobs here either, and its others still.
        _, allowed = make_key("mailer-2", "worker", types=("gone", "noop"))
        mine = enqueue(Api(worker.client, shop))
        here = Api(worker.client, allowed)
        assert [
            job["id"] for job in here.post("/jobs/claim", json={"limit": 5}).json()["jobs"]
        ] == [mine["id"]]
        assert [Api(there, shop).get(f"/jobs/{j['id']}").json()["status"] for j in gone] == [
            "pending",
            "pending",
        ]


def test_claim_on_empty_queue_answers_empty_list(worker: Api) -> None:
    response = worker.post("/jobs/claim", json={})
    assert response.status_code == 200 and response.json() == {"jobs": []}


def test_claim_without_a_body_is_422_and_claims_nothing(producer: Api, worker: Api) -> None:
    enqueue(producer)
    response = worker.post("/jobs/claim")
    assert response.status_code == 422 and response.json()["type"] == "validation"
    assert len(worker.post("/jobs/claim", json={}).json()["jobs"]) == 1


def test_claim_limit_hands_out_several(producer: Api, worker: Api) -> None:
    for _ in range(5):
        enqueue(producer)
    jobs = worker.post("/jobs/claim", json={"limit": 3}).json()["jobs"]
    assert len(jobs) == 3 and len({j["lease_token"] for j in jobs}) == 3
    assert all(j["status"] == "running" for j in jobs)


def test_claim_limit_outside_1_to_100_is_422(worker: Api) -> None:
    for bad in (0, 101):
        assert worker.post("/jobs/claim", json={"limit": bad}).status_code == 422


def test_claim_filters_by_type(producer: Api, worker: Api) -> None:
    enqueue(producer, "noop")
    mail = enqueue(producer, "send_email", payload={"to": "x"})
    assert claim_one(worker, types=["send_email"])["id"] == mail["id"]
    assert worker.post("/jobs/claim", json={"types": ["send_email"]}).json()["jobs"] == []


def test_claim_of_unconfigured_type_is_422(worker: Api) -> None:
    response = worker.post("/jobs/claim", json={"types": ["nope"]})
    assert response.status_code == 422 and response.json()["type"] == "unknown-job-type"


def test_claim_of_type_outside_the_key_is_403_and_default_is_the_keys_types(
    producer: Api, as_key: Callable[..., Api]
) -> None:
    mailer = as_key("mail-only", "worker", types=("send_email",))
    enqueue(producer, "noop")
    response = mailer.post("/jobs/claim", json={"types": ["noop"]})
    assert response.status_code == 403 and response.json()["type"] == "forbidden"
    assert mailer.post("/jobs/claim", json={}).json()["jobs"] == []


def test_worker_id_comes_from_the_key_and_instance(producer: Api, worker: Api) -> None:
    enqueue(producer)
    enqueue(producer)
    assert claim_one(worker)["worker_id"] == "mailer"
    assert claim_one(worker, instance="host-1.a_b")["worker_id"] == "mailer/host-1.a_b"


def test_bad_instance_is_422(worker: Api) -> None:
    for bad in ["", "a/b", "x" * 65, "sp ace"]:
        assert worker.post("/jobs/claim", json={"instance": bad}).status_code == 422, bad


def test_claim_sets_lease_from_type_or_request(
    producer: Api, worker: Api, clock: FakeClock
) -> None:
    enqueue(producer, "resize_image")
    enqueue(producer, "resize_image")
    assert claim_one(worker)["lease_expires_at"] == rfc3339(clock.now() + timedelta(seconds=60))
    leased = claim_one(worker, lease_seconds=5)
    assert leased["lease_expires_at"] == rfc3339(clock.now() + timedelta(seconds=5))
    assert leased["claimed_at"] == rfc3339(clock.now())
    for bad in (0, 3601):
        assert worker.post("/jobs/claim", json={"lease_seconds": bad}).status_code == 422


def test_job_is_not_claimable_before_run_at(producer: Api, worker: Api, clock: FakeClock) -> None:
    enqueue(producer, delay_seconds=30)
    clock.advance(29.9)
    assert worker.post("/jobs/claim", json={}).json()["jobs"] == []
    clock.advance(0.1)
    assert len(worker.post("/jobs/claim", json={}).json()["jobs"]) == 1


def test_concurrent_claims_in_process_hand_each_job_to_one_worker(
    producer: Api, as_key: Callable[..., Api]
) -> None:
    producer.post("/jobs/batch", json={"jobs": [{"type": "noop"}] * 100})
    workers = [as_key(f"w{i}", "worker") for i in range(6)]
    claimed: list[int] = []
    lock = threading.Lock()

    def drain(api: Api) -> None:
        for _ in range(200):
            jobs = api.post("/jobs/claim", json={"limit": 2}).json()["jobs"]
            if not jobs:
                return
            with lock:
                claimed.extend(j["id"] for j in jobs)

    threads = [threading.Thread(target=drain, args=(w,)) for w in workers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(claimed) == sorted(set(claimed)) and len(claimed) == 100


def test_long_poll_returns_when_a_job_is_enqueued(producer: Api, worker: Api) -> None:
    answer: dict[str, Any] = {}

    def wait() -> None:
        started = time.monotonic()
        answer["response"] = worker.post("/jobs/claim", json={"wait_seconds": 20})
        answer["elapsed"] = time.monotonic() - started

    waiter = threading.Thread(target=wait)
    waiter.start()
    time.sleep(0.3)
    job = enqueue(producer)
    waiter.join(timeout=30)
    assert answer["response"].json()["jobs"][0]["id"] == job["id"]
    assert answer["elapsed"] < 15


def test_long_poll_answers_empty_when_time_is_up(worker: Api) -> None:
    started = time.monotonic()
    response = worker.post("/jobs/claim", json={"wait_seconds": 0.3})
    assert response.json() == {"jobs": []}
    assert time.monotonic() - started >= 0.3


def test_wait_seconds_above_30_is_422(worker: Api) -> None:
    assert worker.post("/jobs/claim", json={"wait_seconds": 31}).status_code == 422


def test_wait_seconds_below_0_is_422(worker: Api) -> None:
    response = worker.post("/jobs/claim", json={"wait_seconds": -1})
    assert response.status_code == 422 and response.json()["type"] == "validation"
