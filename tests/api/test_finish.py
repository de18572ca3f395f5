"""Heartbeat, complete, fail and batch complete: guarded by lease and holder."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from queuelog.clock import FakeClock, rfc3339
from tests.conftest import Api, claim_one, enqueue

# Every route that acts on a held job, with the body fields it needs besides the token.
HELD_ACTIONS = [("heartbeat", {}), ("release", {}), ("complete", {}), ("fail", {"error": "x"})]


def _post(api: Api, job: dict[str, Any], action: str, **body: Any) -> Any:
    return api.post(f"/jobs/{job['id']}/{action}", json={"lease_token": job["lease_token"], **body})


def test_heartbeat_extends_the_lease(producer: Api, worker: Api, clock: FakeClock) -> None:
    enqueue(producer)
    job = claim_one(worker)
    clock.advance(20)
    response = _post(worker, job, "heartbeat")
    assert response.status_code == 200
    expected = rfc3339(clock.now() + timedelta(seconds=30))
    assert response.json()["lease_expires_at"] == expected
    longer = _post(worker, job, "heartbeat", lease_seconds=600)
    expected = rfc3339(clock.now() + timedelta(seconds=600))
    assert longer.json()["lease_expires_at"] == expected


def test_heartbeat_without_lease_seconds_renews_for_the_claim_s_lease(
    producer: Api, worker: Api, clock: FakeClock
) -> None:
    enqueue(producer)
    (job,) = worker.post("/jobs/claim", json={"lease_seconds": 600}).json()["jobs"]
    for _ in range(3):  # past the claim's first lease: not the type's 30 s
        clock.advance(400)
        beat = _post(worker, job, "heartbeat")
        assert beat.status_code == 200
        assert beat.json()["lease_expires_at"] == rfc3339(clock.now() + timedelta(seconds=600))


def test_held_job_routes_answer_404_for_unknown_job(worker: Api) -> None:
    for action, extra in HELD_ACTIONS:
        response = worker.post(f"/jobs/999/{action}", json={"lease_token": "t", **extra})
        assert response.status_code == 404 and response.json()["type"] == "not-found", action


def test_held_job_routes_answer_409_invalid_state_when_not_running(
    producer: Api, worker: Api
) -> None:
    job = enqueue(producer)
    for action, extra in HELD_ACTIONS:
        response = worker.post(f"/jobs/{job['id']}/{action}", json={"lease_token": "t", **extra})
        assert response.status_code == 409, action
        assert response.json()["type"] == "invalid-state"


def test_another_workers_job_is_409_not_lease_holder_and_unchanged(
    producer: Api, worker: Api, as_key: Callable[..., Api], admin: Api
) -> None:
    enqueue(producer)
    job = claim_one(worker)
    thief = as_key("thief", "worker")
    for action, extra in HELD_ACTIONS:
        response = _post(thief, job, action, **extra)
        assert response.status_code == 409, action
        assert response.json()["type"] == "not-lease-holder"
    after = admin.get(f"/jobs/{job['id']}").json()
    assert after["status"] == "running" and after["worker_id"] == "mailer"
    assert after["lease_expires_at"] == job["lease_expires_at"] and after["error"] is None


def test_stale_lease_token_is_409_not_lease_holder(producer: Api, worker: Api) -> None:
    enqueue(producer)
    job = claim_one(worker)
    stale = {**job, "lease_token": "0" * 32}
    for action, extra in HELD_ACTIONS:
        response = _post(worker, stale, action, **extra)
        assert response.status_code == 409
        assert response.json()["type"] == "not-lease-holder"


def _post_raw(api: Api, path: str, body: Any) -> Any:
    """POST ``body`` as ASCII JSON, so strings no UTF-8 encoder takes (lone surrogates) travel."""
    headers = {**api.headers, "Content-Type": "application/json"}
    return api.client.post(path, content=json.dumps(body), headers=headers)


def test_a_lease_token_no_database_can_store_is_409_not_lease_holder(
    producer: Api, worker: Api
) -> None:
    enqueue(producer)
    job = claim_one(worker)
    for token in ("a\u0000b", "caf\u00e9", "\t" * 8):
        for action, extra in HELD_ACTIONS:
            body = {"lease_token": token, **extra}
            response = _post_raw(worker, f"/jobs/{job['id']}/{action}", body)
            assert response.status_code == 409, (token, action, response.text)
            assert response.json()["type"] == "not-lease-holder"
        items = [{"id": job["id"], "lease_token": token}, {"id": 10**12, "lease_token": token}]
        answer = _post_raw(worker, "/jobs/batch/complete", {"items": items})
        assert [r["status"] for r in answer.json()["results"]] == [409, 404]
    # A lone surrogate is no string at all: refused by validation.
    refused = _post_raw(worker, f"/jobs/{job['id']}/complete", {"lease_token": "\ud800"})
    assert refused.status_code == 422 and refused.json()["type"] == "validation"
    # The real token still holds the lease.
    assert _post(worker, job, "complete").status_code == 200


def test_an_error_text_with_a_lone_surrogate_is_stored_without_it(
    producer: Api, worker: Api, admin: Api
) -> None:
    enqueue(producer)
    job = claim_one(worker)
    body = {"lease_token": job["lease_token"], "error": "bad \ud800 byte", "retryable": False}
    response = _post_raw(worker, f"/jobs/{job['id']}/fail", body)
    assert response.status_code == 200, response.text
    assert admin.get(f"/jobs/{job['id']}").json()["error"] == "bad \ufffd byte"


def test_release_gives_a_held_job_back_unrun_with_its_attempt_unspent(
    producer: Api, worker: Api, admin: Api, clock: FakeClock
) -> None:
    enqueue(producer)
    job = claim_one(worker)
    clock.advance(5)
    released = _post(worker, job, "release")
    assert released.status_code == 200
    body = released.json()
    assert body["status"] == "pending" and body["retry_count"] == 0
    assert body["run_at"] == rfc3339(clock.now()) and body["worker_id"] is None
    assert body["claimed_at"] is None and body["lease_expires_at"] is None
    events = admin.get(f"/jobs/{job['id']}/events").json()["events"]
    assert [e["event"] for e in events] == ["enqueued", "claimed", "released"]
    assert events[-1]["from_status"] == "running" and events[-1]["actor"] == "mailer"
    # Claimable again at once; the old token no longer holds it.
    again = claim_one(worker)
    assert again["id"] == job["id"] and again["lease_token"] != job["lease_token"]
    assert _post(worker, job, "release").json()["type"] == "not-lease-holder"


def test_complete_stores_the_result(producer: Api, worker: Api) -> None:
    enqueue(producer)
    job = claim_one(worker)
    done = _post(worker, job, "complete", result={"rows": 3})
    assert done.json()["status"] == "completed"
    assert done.json()["result"] == {"rows": 3}
    again = _post(worker, job, "complete")
    assert again.status_code == 409
    assert again.json()["type"] == "invalid-state"


def test_result_over_the_limit_is_422_payload_too_large(producer: Api, worker: Api) -> None:
    enqueue(producer)
    job = claim_one(worker)
    response = _post(worker, job, "complete", result={"blob": "x" * 70_000})
    assert response.status_code == 422
    assert response.json()["type"] == "payload-too-large"


def test_fail_retries_with_backoff_until_exhausted(
    producer: Api, worker: Api, admin: Api, clock: FakeClock
) -> None:
    job = enqueue(producer, "resize_image")  # max_retries = 2, backoff base 2 s
    for attempt in range(2):
        held = claim_one(worker)
        failed = _post(worker, held, "fail", error="timeout").json()
        assert failed["status"] == "pending" and failed["retry_count"] == attempt + 1
        assert failed["worker_id"] is None and failed["claimed_at"] is None
        delay = (2.0 * 2**attempt) * 1.2
        assert worker.post("/jobs/claim", json={}).json()["jobs"] == []
        clock.advance(delay)
    held = claim_one(worker)
    final = _post(worker, held, "fail", error="timeout").json()
    assert final["status"] == "failed" and final["retry_count"] == 2
    events = [e["event"] for e in admin.get(f"/jobs/{job['id']}/events").json()["events"]]
    assert events == [
        "enqueued",
        "claimed",
        "retry_scheduled",
        "claimed",
        "retry_scheduled",
        "claimed",
        "failed",
    ]


def test_fail_not_retryable_fails_at_once(producer: Api, worker: Api) -> None:
    enqueue(producer)
    job = claim_one(worker)
    failed = _post(worker, job, "fail", error="bad input", retryable=False)
    body = failed.json()
    assert body["status"] == "failed" and body["retry_count"] == 0


def test_retry_in_seconds_overrides_backoff(producer: Api, worker: Api, clock: FakeClock) -> None:
    enqueue(producer)
    job = claim_one(worker)
    body = _post(worker, job, "fail", error="busy", retry_in_seconds=300).json()
    assert body["run_at"] == rfc3339(clock.now() + timedelta(seconds=300))


def test_fail_body_needs_error_and_lease_token(producer: Api, worker: Api) -> None:
    enqueue(producer)
    job = claim_one(worker)
    assert worker.post(f"/jobs/{job['id']}/fail", json={"lease_token": "t"}).status_code == 422
    assert worker.post(f"/jobs/{job['id']}/complete", json={}).status_code == 422


def test_batch_complete_answers_each_item_in_order(
    producer: Api, worker: Api, as_key: Callable[..., Api]
) -> None:
    for _ in range(3):
        enqueue(producer)
    jobs = worker.post("/jobs/claim", json={"limit": 3}).json()["jobs"]
    items = [
        {"id": jobs[0]["id"], "lease_token": jobs[0]["lease_token"], "result": {"n": 0}},
        {"id": 9999, "lease_token": "x"},
        {"id": jobs[1]["id"], "lease_token": "stale"},
        {"id": jobs[2]["id"], "lease_token": jobs[2]["lease_token"]},
    ]
    response = worker.post("/jobs/batch/complete", json={"items": items})
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert [r["status"] for r in results] == [200, 404, 409, 200]
    assert results[0]["job"]["result"] == {"n": 0}
    assert results[1]["type"] == "not-found" and results[2]["type"] == "not-lease-holder"
    assert [r["id"] for r in results] == [i["id"] for i in items]
    assert "preference-applied" not in response.headers


def test_batch_complete_answers_409_invalid_state_for_an_item_not_running(
    producer: Api, worker: Api
) -> None:
    waiting = enqueue(producer)
    held = claim_one(worker)
    done = _post(worker, held, "complete")
    assert done.status_code == 200
    items = [
        {"id": held["id"], "lease_token": held["lease_token"]},  # completed already
        {"id": enqueue(producer)["id"], "lease_token": "t"},  # pending, never claimed
    ]
    assert held["id"] == waiting["id"]
    results = worker.post("/jobs/batch/complete", json={"items": items}).json()["results"]
    assert [(r["status"], r["type"]) for r in results] == [(409, "invalid-state")] * 2


def test_batch_complete_item_refused_by_validation_is_named_by_index(
    producer: Api, worker: Api
) -> None:
    enqueue(producer)
    held = claim_one(worker)
    items = [{"id": held["id"], "lease_token": held["lease_token"]}, {"id": 0, "lease_token": "t"}]
    refused = worker.post("/jobs/batch/complete", json={"items": items})
    assert refused.status_code == 422 and refused.json()["index"] == 1
    assert refused.json()["errors"][0]["loc"] == ["body", "items", 1, "id"]
    # Nothing was completed: the whole batch is refused before any item is acted on.
    assert worker.get(f"/jobs/{held['id']}").json()["status"] == "running"


def test_heartbeat_lease_seconds_outside_1_to_3600_is_422(producer: Api, worker: Api) -> None:
    enqueue(producer)
    job = claim_one(worker)
    for bad in (0, 3601, -1, 1.5):
        response = _post(worker, job, "heartbeat", lease_seconds=bad)
        assert response.status_code == 422 and response.json()["type"] == "validation", bad
    assert _post(worker, job, "heartbeat", lease_seconds=3600).status_code == 200


def test_batch_complete_with_prefer_return_minimal_answers_without_the_jobs(
    producer: Api, worker: Api, admin: Api
) -> None:
    for _ in range(4):
        enqueue(producer)
    jobs = worker.post("/jobs/claim", json={"limit": 4}).json()["jobs"]
    minimal = {"Prefer": "return=minimal"}
    items = [
        {"id": jobs[0]["id"], "lease_token": jobs[0]["lease_token"], "result": {"n": 0}},
        {"id": 9999, "lease_token": "x"},
        {"id": jobs[1]["id"], "lease_token": "stale"},
        {"id": jobs[2]["id"], "lease_token": jobs[2]["lease_token"]},
    ]
    response = worker.post("/jobs/batch/complete", json={"items": items}, headers=minimal)
    assert response.status_code == 200, response.text
    assert response.headers["preference-applied"] == "return=minimal"
    assert response.json()["results"] == [
        {"id": jobs[0]["id"], "status": 200},
        {"id": 9999, "status": 404, "type": "not-found"},
        {"id": jobs[1]["id"], "status": 409, "type": "not-lease-holder"},
        {"id": jobs[2]["id"], "status": 200},
    ]
    # A batch of one is finished item by item: answered the same way.
    one = [{"id": jobs[3]["id"], "lease_token": jobs[3]["lease_token"]}]
    alone = worker.post("/jobs/batch/complete", json={"items": one}, headers=minimal)
    assert alone.json()["results"] == [{"id": jobs[3]["id"], "status": 200}]
    # The jobs are completed exactly as without the preference, events and all.
    for job, result in ((jobs[0], {"n": 0}), (jobs[2], None), (jobs[3], None)):
        stored = admin.get(f"/jobs/{job['id']}").json()
        assert stored["status"] == "completed" and stored["result"] == result
        events = admin.get(f"/jobs/{job['id']}/events").json()["events"]
        assert events[-1]["event"] == "completed"
    assert admin.get(f"/jobs/{jobs[1]['id']}").json()["status"] == "running"


def test_batch_complete_of_0_or_101_items_is_422(worker: Api) -> None:
    assert worker.post("/jobs/batch/complete", json={"items": []}).status_code == 422
    items = [{"id": i, "lease_token": "t"} for i in range(101)]
    assert worker.post("/jobs/batch/complete", json={"items": items}).status_code == 422


def test_expired_lease_is_rescued_by_the_next_claim(
    producer: Api, worker: Api, as_key: Callable[..., Api], admin: Api, clock: FakeClock
) -> None:
    job = enqueue(producer)
    first = claim_one(worker)
    clock.advance(31)
    other = as_key("other", "worker")
    assert other.post("/jobs/claim", json={}).json()["jobs"] == []  # backoff not yet over
    clock.advance(3)
    second = claim_one(other)
    assert second["id"] == job["id"] and second["retry_count"] == 1
    late = _post(worker, first, "complete")
    assert late.status_code == 409
    assert late.json()["type"] == "not-lease-holder"
    events = admin.get(f"/jobs/{job['id']}/events").json()["events"]
    expired = [e for e in events if e["event"] == "lease_expired"]
    assert expired and expired[0]["detail"] == "lease expired"


def test_error_text_up_to_16_kib_is_cut_to_2000_characters(
    producer: Api, worker: Api, admin: Api
) -> None:
    job = enqueue(producer, max_retries=0)
    held = claim_one(worker)
    response = _post(worker, held, "fail", error="error " * 2730)
    assert response.status_code == 200 and response.json()["status"] == "failed"
    error = admin.get(f"/jobs/{job['id']}").json()["error"]
    assert len(error) <= 2000 and error.endswith("error [cut]")
