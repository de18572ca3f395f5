"""Unique jobs over HTTP, on both backends: the answers (201, 200), the `replaced` event,
batches, the refusals, and idempotency checked first."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from queuelog.clock import FakeClock
from queuelog.models import JobStatus
from queuelog.storage.protocol import Storage
from tests.conftest import Api, claim_one, enqueue, run_blocking


def _post(api: Api, **body: object) -> tuple[int, dict[str, object]]:
    response = api.post("/jobs", json={"type": "noop", "unique_key": "report-7", **body})
    return response.status_code, response.json()


def test_keep_answers_200_with_the_active_job(producer: Api) -> None:
    status, first = _post(producer, payload={"v": 1})
    assert status == 201 and first["unique_key"] == "report-7"
    status, again = _post(producer, payload={"v": 2}, on_duplicate="keep")
    assert status == 200 and again == first


def test_replace_is_a_debounce_with_a_replaced_event(producer: Api) -> None:
    _, first = _post(producer, payload={"v": 1})
    status, replaced = _post(
        producer, payload={"v": 2}, priority="high", delay_seconds=60, on_duplicate="replace"
    )
    assert status == 200 and replaced["id"] == first["id"]
    assert (replaced["payload"], replaced["priority"]) == ({"v": 2}, "high")
    assert replaced["run_at"] > first["run_at"]
    events = producer.get(f"/jobs/{first['id']}/events").json()["events"]
    assert [e["event"] for e in events] == ["enqueued", "replaced"]
    assert events[1]["from_status"] == events[1]["to_status"] == "pending"


def test_replace_while_the_holder_runs_makes_a_new_job(producer: Api, worker: Api) -> None:
    _, first = _post(producer)
    claim_one(worker)
    status, second = _post(producer, payload={"v": 2}, on_duplicate="replace")
    assert status == 201 and second["id"] != first["id"]
    status, kept = _post(producer)
    assert status == 200 and kept["id"] == second["id"]


def test_the_key_is_free_once_the_job_is_cancelled(producer: Api) -> None:
    _, first = _post(producer)
    assert producer.post(f"/jobs/{first['id']}/cancel").status_code == 200
    status, second = _post(producer)
    assert status == 201 and second["id"] != first["id"]


def test_another_producer_s_key_never_collides(producer: Api, as_key: Callable[..., Api]) -> None:
    _, mine = _post(producer)
    status, theirs = _post(as_key("other-shop", "producer"))
    assert status == 201 and theirs["id"] != mine["id"]


def test_a_batch_item_meets_an_earlier_items_key(producer: Api) -> None:
    item = {"type": "noop", "unique_key": "sync-1"}
    response = producer.post(
        "/jobs/batch",
        json={"jobs": [item, {**item, "payload": {"v": 2}, "on_duplicate": "replace"}, item]},
    )
    assert response.status_code == 200
    results = response.json()["jobs"]
    assert [r["created"] for r in results] == [True, False, False]
    assert {r["job"]["id"] for r in results} == {results[0]["job"]["id"]}
    assert results[2]["job"]["payload"] == {"v": 2}


def test_every_item_answers_with_its_job_as_the_batch_left_it(producer: Api) -> None:
    # The first item answered with the job before the second replaced it: two answers
    # of one batch showed one job with two payloads and two priorities.
    item = {"type": "noop", "unique_key": "sync-1", "payload": {"v": 1}}
    later = {**item, "payload": {"v": 2}, "priority": "medium", "on_duplicate": "replace"}
    response = producer.post("/jobs/batch", json={"jobs": [item, later, {"type": "noop"}]})
    assert response.status_code == 200
    first, replaced, other = (r["job"] for r in response.json()["jobs"])
    assert first == replaced == producer.get(f"/jobs/{first['id']}").json()
    assert first["payload"] == {"v": 2} and first["priority"] == "medium"
    assert other["id"] != first["id"]


def test_the_idempotency_key_is_checked_first(producer: Api) -> None:
    status, first = _post(producer, idempotency_key="k-1")
    assert status == 201
    assert _post(producer, idempotency_key="k-1") == (200, first)
    status, refused = _post(producer, idempotency_key="k-1", payload={"v": 2})
    assert status == 422 and refused["type"] == "idempotency-key-reused"
    # The same idempotency key with another unique key is another request.
    status, refused = _post(producer, idempotency_key="k-1", unique_key="report-8")
    assert status == 422 and refused["type"] == "idempotency-key-reused"


def test_bad_unique_fields_are_422_validation_and_store_nothing(producer: Api) -> None:
    bad = [
        {"unique_key": ""},
        {"unique_key": "x" * 256},
        {"unique_key": "caf\u00e9"},
        {"unique_key": 7},
        {"on_duplicate": "merge"},
        {"unique_key": None, "on_duplicate": "keep"},
    ]
    for fields in bad:
        status, problem = _post(producer, **fields)
        assert status == 422 and problem["type"] == "validation", fields
    response = producer.post(
        "/jobs/batch", json={"jobs": [{"type": "noop", "on_duplicate": "keep"}]}
    )
    assert response.status_code == 422 and response.json()["type"] == "validation"
    assert producer.get("/jobs").json()["jobs"] == []


def test_jobs_without_a_unique_key_show_null(producer: Api) -> None:
    job = enqueue(producer)
    assert job["unique_key"] is None and job["progress"] is None


def test_hardening_17_a_key_its_unique_holder_settled_names_that_job_for_good(
    producer: Api,
) -> None:
    status, holder = _post(producer, payload={"v": 1})
    status, kept = _post(producer, payload={"v": 1}, idempotency_key="k-9")
    assert status == 200 and kept["id"] == holder["id"]
    assert producer.post(f"/jobs/{holder['id']}/cancel").status_code == 200
    # Sent again once the holder has ended: the same job, not a new one.
    status, again = _post(producer, payload={"v": 1}, idempotency_key="k-9")
    assert status == 200 and again["id"] == holder["id"] and again["status"] == "cancelled"
    status, refused = _post(producer, payload={"v": 2}, idempotency_key="k-9")
    assert status == 422 and refused["type"] == "idempotency-key-reused"
    plain = producer.post("/jobs", json={"type": "noop", "idempotency_key": "k-9"})
    assert plain.status_code == 422 and plain.json()["type"] == "idempotency-key-reused"
    batch = producer.post(
        "/jobs/batch", json={"jobs": [{"type": "noop", "idempotency_key": "k-9"}]}
    )
    assert batch.status_code == 422 and batch.json()["index"] == 0
    assert [j["id"] for j in producer.get("/jobs").json()["jobs"]] == [holder["id"]]


def test_hardening_17_a_replace_sent_again_after_its_job_started_makes_no_second_job(
    producer: Api, worker: Api
) -> None:
    _, holder = _post(producer, payload={"v": 1})
    body = {"payload": {"v": 2}, "on_duplicate": "replace", "idempotency_key": "k-10"}
    status, replaced = _post(producer, **body)
    assert status == 200 and replaced["id"] == holder["id"]
    assert claim_one(worker)["payload"] == {"v": 2}  # it runs with the new data
    status, again = _post(producer, **body)  # the answer was lost: sent again
    assert status == 200 and again["id"] == holder["id"] and again["status"] == "running"
    assert len(producer.get("/jobs").json()["jobs"]) == 1


def test_hardening_17_the_key_is_free_once_its_job_is_pruned(
    producer: Api, storage: Storage, clock: FakeClock
) -> None:
    _, holder = _post(producer)
    status, kept = _post(producer, idempotency_key="k-11")
    assert status == 200 and kept["id"] == holder["id"]
    assert producer.post(f"/jobs/{holder['id']}/cancel").status_code == 200
    clock.advance(3600)
    assert run_blocking(storage.job_prune({JobStatus.CANCELLED: clock.now()})) == 1
    status, made = _post(producer, idempotency_key="k-11")
    assert status == 201 and made["id"] != holder["id"]


@pytest.mark.parametrize("on_duplicate", ["keep", "replace"])
def test_hardening_72_a_batch_item_does_not_settle_on_an_earlier_item_cancelled_at_once(
    producer: Api, on_duplicate: str
) -> None:
    """Item 0 depends on a job already cancelled, so it is made `cancelled` at once (201,
    `dependency_failed`) and holds its unique key no more. Item 1, the same key without
    dependencies, then sees no active holder and makes a job, as it does when sent alone
    after item 0: a batch settles each job before it makes the next. (It was settled on
    item 0 while that one was `waiting` inside the insert: answered with a job cancelled
    a moment later, its payload never ran.)"""
    gone = enqueue(producer)
    assert producer.post(f"/jobs/{gone['id']}/cancel").status_code == 200
    first = {"type": "noop", "unique_key": "sync-9", "depends_on": [gone["id"]]}
    later = {"type": "noop", "unique_key": "sync-9", "payload": {"v": 2}}
    later["on_duplicate"] = on_duplicate
    response = producer.post("/jobs/batch", json={"jobs": [first, later]})
    assert response.status_code == 200, response.text
    (made, second) = response.json()["jobs"]
    assert made["job"]["status"] == "cancelled"
    assert second["created"] is True, second
    assert second["job"]["status"] == "pending" and second["job"]["payload"] == {"v": 2}
    active = producer.get("/jobs", params={"status": "pending"}).json()["jobs"]
    assert [j["payload"] for j in active if j["unique_key"] == "sync-9"] == [{"v": 2}]


def test_a_single_enqueue_after_a_job_cancelled_at_once_makes_a_new_job(producer: Api) -> None:
    """The same two requests sent one after the other: the reference the batch must match."""
    gone = enqueue(producer)
    assert producer.post(f"/jobs/{gone['id']}/cancel").status_code == 200
    status, first = _post(producer, unique_key="sync-9", depends_on=[gone["id"]])
    assert status == 201 and first["status"] == "cancelled"
    status, second = _post(producer, unique_key="sync-9", payload={"v": 2}, on_duplicate="replace")
    assert status == 201 and second["status"] == "pending"
