"""POST /jobs and POST /jobs/batch."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from queuelog.clock import FakeClock, rfc3339
from tests.conftest import Api, enqueue


def test_enqueue_answers_201_with_location_and_defaults(producer: Api, clock: FakeClock) -> None:
    response = producer.post("/jobs", json={"type": "send_email", "payload": {"to": "a@b.c"}})
    assert response.status_code == 201
    job = response.json()
    assert response.headers["location"] == f"/jobs/{job['id']}"
    assert job["priority"] == "low" and job["status"] == "pending"
    assert job["max_retries"] == 5  # from the type
    assert job["retry_count"] == 0 and job["worker_id"] is None and job["error"] is None
    assert job["run_at"] == job["created_at"] == rfc3339(clock.now())


def test_enqueue_without_type_settings_defaults_to_three_retries(producer: Api) -> None:
    assert enqueue(producer, "noop")["max_retries"] == 3


def test_priority_labels_are_case_insensitive(producer: Api) -> None:
    assert enqueue(producer, priority="HIGH")["priority"] == "high"
    assert enqueue(producer, priority="Medium")["priority"] == "medium"


def test_unknown_priority_label_is_422(producer: Api) -> None:
    response = producer.post("/jobs", json={"type": "noop", "priority": "urgent"})
    assert response.status_code == 422 and response.json()["type"] == "validation"


def test_delay_seconds_schedules_run_at(producer: Api, clock: FakeClock) -> None:
    job = enqueue(producer, delay_seconds=90)
    assert job["run_at"] == rfc3339(clock.now() + timedelta(seconds=90))


def test_run_at_in_the_future_is_kept(producer: Api, clock: FakeClock) -> None:
    at = clock.now() + timedelta(hours=1)
    assert enqueue(producer, run_at=rfc3339(at))["run_at"] == rfc3339(at)


def test_run_at_and_delay_together_are_422(producer: Api, clock: FakeClock) -> None:
    body = {"type": "noop", "run_at": rfc3339(clock.now()), "delay_seconds": 5}
    response = producer.post("/jobs", json=body)
    assert response.status_code == 422 and response.json()["type"] == "validation"


def test_run_at_without_time_zone_is_422(producer: Api) -> None:
    response = producer.post("/jobs", json={"type": "noop", "run_at": "2026-01-01T00:00:00"})
    assert response.status_code == 422


def test_run_at_whose_utc_time_is_past_year_9999_or_before_year_1_is_422(
    producer: Api, admin: Api
) -> None:
    for bad in ("9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+23:59"):
        single = producer.post("/jobs", json={"type": "noop", "run_at": bad})
        assert single.status_code == 422, bad
        assert single.json()["errors"][0]["loc"][-1] == "run_at"
        batch = producer.post(
            "/jobs/batch", json={"jobs": [{"type": "noop"}, {"run_at": bad, "type": "noop"}]}
        )
        assert batch.status_code == 422, bad
    assert admin.get("/jobs").json()["jobs"] == []  # nothing was stored
    assert enqueue(producer, run_at="9999-12-31T23:59:59.999999Z")["run_at"].startswith("9999")


def test_max_retries_outside_0_to_25_is_422(producer: Api) -> None:
    for bad in (-1, 26, "3"):
        response = producer.post("/jobs", json={"type": "noop", "max_retries": bad})
        assert response.status_code == 422, bad
    assert enqueue(producer, max_retries=0)["max_retries"] == 0


def test_payload_must_be_an_object(producer: Api) -> None:
    response = producer.post("/jobs", json={"type": "noop", "payload": [1, 2]})
    assert response.status_code == 422 and response.json()["type"] == "validation"


def test_payload_failing_the_type_schema_is_422_validation(producer: Api) -> None:
    response = producer.post("/jobs", json={"type": "send_email", "payload": {"to": 5}})
    assert response.status_code == 422
    problem = response.json()
    assert problem["type"] == "validation"
    assert problem["errors"][0]["loc"] == ["body", "payload", "to"]


def test_unknown_job_type_is_422_unknown_job_type(producer: Api) -> None:
    response = producer.post("/jobs", json={"type": "shutdown"})
    assert response.status_code == 422 and response.json()["type"] == "unknown-job-type"


def test_unknown_field_is_422(producer: Api) -> None:
    for field, value in [("status", "completed"), ("worker_id", "w"), ("retry_count", 9)]:
        response = producer.post("/jobs", json={"type": "noop", field: value})
        assert response.status_code == 422, field
        assert response.json()["errors"][0]["loc"] == ["body", field]


def test_missing_type_is_422(producer: Api) -> None:
    assert producer.post("/jobs", json={"payload": {}}).status_code == 422


def test_batch_enqueues_all_in_order(producer: Api) -> None:
    enqueue(producer, idempotency_key="dup")
    body = {"jobs": [{"type": "noop"}, {"type": "noop", "idempotency_key": "dup"}]}
    response = producer.post("/jobs/batch", json=body)
    assert response.status_code == 200, response.text
    items = response.json()["jobs"]
    assert [item["created"] for item in items] == [True, False]
    assert items[1]["job"]["idempotency_key"] == "dup"


def test_batch_with_one_bad_item_rejects_all_and_names_its_index(producer: Api) -> None:
    body = {"jobs": [{"type": "noop"}, {"type": "noop"}, {"type": "nope"}]}
    response = producer.post("/jobs/batch", json=body)
    assert response.status_code == 422
    assert response.json()["type"] == "unknown-job-type" and response.json()["index"] == 2
    assert producer.get("/jobs").json()["jobs"] == []


def test_batch_shape_errors_name_the_item(producer: Api) -> None:
    body = {"jobs": [{"type": "noop"}, {"type": "noop", "priority": "urgent"}]}
    response = producer.post("/jobs/batch", json=body)
    assert response.status_code == 422
    assert response.json()["errors"][0]["loc"][:3] == ["body", "jobs", 1]
    assert response.json()["index"] == 1
    # A refusal of the whole batch names no item.
    assert "index" not in producer.post("/jobs/batch", json={"jobs": []}).json()
    assert "index" not in producer.post("/jobs", json={"type": "noop", "x": 1}).json()


def test_a_job_type_the_key_may_not_enqueue_is_403(as_key: Callable[..., Api]) -> None:
    mailer = as_key("mailer", "producer", types=("send_email",))
    response = mailer.post("/jobs", json={"type": "noop"})
    assert response.status_code == 403 and response.json()["type"] == "forbidden"
    assert "index" not in response.json()
    mail = {"type": "send_email", "payload": {"to": "a@b.c"}}
    batch = mailer.post("/jobs/batch", json={"jobs": [mail, {"type": "noop"}]})
    assert batch.status_code == 403 and batch.json()["index"] == 1
    assert mailer.get("/jobs").json()["jobs"] == []  # nothing of the batch was stored
    assert mailer.post("/jobs", json=mail).status_code == 201


def test_batch_of_0_or_501_jobs_is_422(producer: Api) -> None:
    assert producer.post("/jobs/batch", json={"jobs": []}).status_code == 422
    many = {"jobs": [{"type": "noop"}] * 501}
    assert producer.post("/jobs/batch", json=many).status_code == 422
    assert (
        len(producer.post("/jobs/batch", json={"jobs": [{"type": "noop"}] * 500}).json()["jobs"])
        == 500
    )


def test_payload_with_integers_beyond_64_bits_round_trips(producer: Api) -> None:
    payload = {"big": 2**70, "text": "naïve ✓", "nested": {"f": 0.1}}
    job = enqueue(producer, "noop", payload=payload)
    assert job["payload"] == payload
    assert producer.get(f"/jobs/{job['id']}").json()["payload"] == payload
