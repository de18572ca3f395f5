"""Awaiting a job's result (`GET /jobs/{id}?wait_seconds=N`) and a heartbeat's progress,
on both backends. Nothing here asserts on speed: an answer woken by a finish is checked
against a deadline far away."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from queuelog.clock import FakeClock
from tests.conftest import Api, claim_one, enqueue

FAR = 20  # seconds a wait could last: an answer much sooner was woken by the finish


def _beat(worker: Api, job: dict[str, Any], **body: Any) -> Any:
    return worker.post(
        f"/jobs/{job['id']}/heartbeat", json={"lease_token": job["lease_token"], **body}
    )


def _wait_later(pool: ThreadPoolExecutor, api: Api, job_id: int, seconds: float) -> Any:
    def run() -> tuple[float, Any]:
        response = api.get(f"/jobs/{job_id}", params={"wait_seconds": seconds})
        return time.monotonic(), response

    return pool.submit(run)


def test_a_waiting_read_is_answered_when_the_job_completes(producer: Api, worker: Api) -> None:
    job = enqueue(producer)
    held = claim_one(worker)
    with ThreadPoolExecutor(1) as pool:
        waiting = _wait_later(pool, producer, job["id"], FAR)
        time.sleep(0.3)
        assert not waiting.done()
        done = worker.post(
            f"/jobs/{job['id']}/complete",
            json={"lease_token": held["lease_token"], "result": {"ok": True}},
        )
        finished_at = time.monotonic()
        answered_at, response = waiting.result(timeout=FAR + 10)
    assert done.status_code == 200
    assert response.status_code == 200
    assert response.json()["status"] == "completed"
    assert response.json()["result"] == {"ok": True}
    assert answered_at - finished_at < 3, "the read waited for its deadline, not the finish"


def test_a_waiting_read_is_answered_when_the_job_is_cancelled(producer: Api) -> None:
    job = enqueue(producer, delay_seconds=3600)
    with ThreadPoolExecutor(1) as pool:
        waiting = _wait_later(pool, producer, job["id"], FAR)
        time.sleep(0.3)
        assert producer.post(f"/jobs/{job['id']}/cancel").status_code == 200
        _, response = waiting.result(timeout=FAR + 10)
    assert response.json()["status"] == "cancelled"


def test_a_waiting_read_is_answered_when_the_job_fails_for_good(producer: Api, worker: Api) -> None:
    job = enqueue(producer, max_retries=0)
    held = claim_one(worker)
    with ThreadPoolExecutor(1) as pool:
        waiting = _wait_later(pool, producer, job["id"], FAR)
        time.sleep(0.3)
        worker.post(
            f"/jobs/{job['id']}/fail", json={"lease_token": held["lease_token"], "error": "x"}
        )
        _, response = waiting.result(timeout=FAR + 10)
    assert response.json()["status"] == "failed"


def test_a_retry_does_not_end_the_wait(producer: Api, worker: Api) -> None:
    job = enqueue(producer)
    held = claim_one(worker)
    started = time.monotonic()
    with ThreadPoolExecutor(1) as pool:
        waiting = _wait_later(pool, producer, job["id"], 1.5)
        time.sleep(0.3)
        worker.post(
            f"/jobs/{job['id']}/fail", json={"lease_token": held["lease_token"], "error": "x"}
        )
        _, response = waiting.result(timeout=30)
    assert response.json()["status"] == "pending"
    assert time.monotonic() - started >= 1.5


def test_the_deadline_answers_with_the_job_as_it_is(producer: Api) -> None:
    job = enqueue(producer)
    started = time.monotonic()
    response = producer.get(f"/jobs/{job['id']}", params={"wait_seconds": 0.5})
    assert time.monotonic() - started >= 0.5
    assert response.status_code == 200 and response.json()["status"] == "pending"


def test_a_finished_job_is_answered_at_once(producer: Api) -> None:
    job = enqueue(producer)
    producer.post(f"/jobs/{job['id']}/cancel")
    started = time.monotonic()
    response = producer.get(f"/jobs/{job['id']}", params={"wait_seconds": 30})
    assert response.json()["status"] == "cancelled"
    assert time.monotonic() - started < FAR


def test_a_job_the_caller_may_not_see_is_404_at_once(
    producer: Api, as_key: Callable[..., Api]
) -> None:
    job = enqueue(producer)
    started = time.monotonic()
    response = as_key("stranger", "producer").get(f"/jobs/{job['id']}", params={"wait_seconds": 30})
    assert response.status_code == 404 and response.json()["type"] == "not-found"
    missing = producer.get("/jobs/999999", params={"wait_seconds": 30})
    assert missing.status_code == 404
    assert time.monotonic() - started < FAR


def test_wait_seconds_out_of_range_is_422(producer: Api) -> None:
    job = enqueue(producer)
    for value in ("-1", "30.5", "31", "soon", "nan"):
        response = producer.get(f"/jobs/{job['id']}", params={"wait_seconds": value})
        assert response.status_code == 422, value
        assert response.json()["type"] == "validation"
        assert response.headers["content-type"].startswith("application/problem+json")


def test_heartbeat_progress_is_shown_on_the_job_until_the_next_one(
    producer: Api, worker: Api
) -> None:
    job = enqueue(producer)
    held = claim_one(worker)
    first = _beat(worker, held, progress={"done": 10, "of": 100})
    assert first.status_code == 200 and first.json()["progress"] == {"done": 10, "of": 100}
    assert _beat(worker, held).json()["progress"] == {"done": 10, "of": 100}
    _beat(worker, held, progress={"done": 90, "of": 100})
    worker.post(f"/jobs/{job['id']}/complete", json={"lease_token": held["lease_token"]})
    after = producer.get(f"/jobs/{job['id']}").json()
    assert after["status"] == "completed" and after["progress"] == {"done": 90, "of": 100}


def test_progress_over_4096_bytes_is_422_payload_too_large_and_changes_nothing(
    producer: Api, worker: Api
) -> None:
    job = enqueue(producer)
    held = claim_one(worker)
    _beat(worker, held, progress={"step": 1})
    # Measured as compact UTF-8 JSON: exactly 4,096 bytes passes, one more does not.
    room = 4096 - len(json.dumps({"s": ""}, separators=(",", ":")))
    fits = {"s": "\u00e9" * (room // 2)}
    assert len(json.dumps(fits, separators=(",", ":"), ensure_ascii=False).encode()) == 4096
    assert _beat(worker, held, progress=fits).status_code == 200
    refused = _beat(worker, held, progress={"s": "\u00e9" * (room // 2) + "x"})
    assert refused.status_code == 422 and refused.json()["type"] == "payload-too-large"
    assert producer.get(f"/jobs/{job['id']}").json()["progress"] == fits


def test_progress_that_is_not_an_object_is_422_validation(producer: Api, worker: Api) -> None:
    enqueue(producer)
    held = claim_one(worker)
    for value in ([1, 2], "half", 50):
        response = _beat(worker, held, progress=value)
        assert response.status_code == 422 and response.json()["type"] == "validation"


def test_a_lease_that_expires_for_good_in_a_claims_rescue_answers_the_wait(
    producer: Api, worker: Api, clock: FakeClock
) -> None:
    job = enqueue(producer, max_retries=0)
    claim_one(worker, lease_seconds=1)
    with ThreadPoolExecutor(1) as pool:
        waiting = _wait_later(pool, producer, job["id"], FAR)
        time.sleep(0.3)
        clock.advance(5)
        assert worker.post("/jobs/claim", json={}).json() == {"jobs": []}
        finished_at = time.monotonic()
        answered_at, response = waiting.result(timeout=FAR + 10)
    assert response.json()["status"] == "failed"
    assert answered_at - finished_at < 3, "the read waited for its deadline, not the rescue"


def test_a_worker_awaiting_its_held_job_is_answered_404_once_it_ended(
    producer: Api, worker: Api
) -> None:
    job = enqueue(producer)
    held = claim_one(worker)
    with ThreadPoolExecutor(1) as pool:
        waiting = _wait_later(pool, worker, job["id"], FAR)
        time.sleep(0.3)
        worker.post(f"/jobs/{job['id']}/complete", json={"lease_token": held["lease_token"]})
        _, response = waiting.result(timeout=FAR + 10)
    assert response.status_code == 404 and response.json()["type"] == "not-found"
