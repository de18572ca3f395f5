"""GET /jobs, /jobs/{id}, /jobs/{id}/events, cancel and admin retry; visibility."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from queuelog.api.app import create_app
from queuelog.clock import FakeClock
from queuelog.storage.protocol import Storage
from tests.conftest import TYPES, Api, claim_one, enqueue, make_settings


def test_list_is_newest_first_and_pages_with_a_cursor(producer: Api) -> None:
    ids = [enqueue(producer)["id"] for _ in range(5)]
    first = producer.get("/jobs", params={"limit": 2}).json()
    assert [j["id"] for j in first["jobs"]] == ids[::-1][:2]
    second = producer.get("/jobs", params={"limit": 2, "cursor": first["next_cursor"]}).json()
    assert [j["id"] for j in second["jobs"]] == ids[::-1][2:4]
    third = producer.get("/jobs", params={"limit": 2, "cursor": second["next_cursor"]}).json()
    assert [j["id"] for j in third["jobs"]] == ids[:1] and third["next_cursor"] is None


def test_list_filters_by_status_and_type(producer: Api, worker: Api) -> None:
    enqueue(producer, "noop")
    mail = enqueue(producer, "send_email", payload={"to": "x"})
    claim_one(worker, types=["noop"])
    pending = producer.get("/jobs", params={"status": "pending"}).json()["jobs"]
    assert [j["id"] for j in pending] == [mail["id"]]
    by_type = producer.get("/jobs", params={"type": "noop"}).json()["jobs"]
    assert [j["type"] for j in by_type] == ["noop"]


def test_list_with_bad_status_limit_or_cursor_is_422(producer: Api) -> None:
    for params in [{"status": "done"}, {"limit": 0}, {"limit": 501}, {"cursor": "!!"}]:
        response = producer.get("/jobs", params=params)
        assert response.status_code == 422, params
        assert response.json()["type"] == "validation"


@pytest.mark.parametrize(
    "query",
    [
        "limit=1_0",
        "limit=%2B10",
        "limit=%2010",
        "limit=10.0",
        "depends_on=2_07",
        "depends_on=207.0",
        "job:wait_seconds=0_2",
        "job:wait_seconds=1_0e1",
        "job:wait_seconds=-0",
        "job:wait_seconds=%2B1",
        "job:wait_seconds=1.",
        "job:wait_seconds=.5",
        "events:limit=1_0",
    ],
)
def test_hardening_70_a_number_in_a_query_is_written_in_decimal_digits(
    producer: Api, query: str
) -> None:
    # Python's spellings were read as numbers: 1_0 as 10, " 10" and "+10".
    job_id = enqueue(producer)["id"]
    where, _, query = query.rpartition(":")
    path = {"": "/jobs", "job": f"/jobs/{job_id}", "events": f"/jobs/{job_id}/events"}[where]
    answered = producer.get(f"{path}?{query}")
    assert answered.status_code == 422, answered.text
    assert answered.json()["errors"][0]["loc"] == ["query", query.partition("=")[0]]


def test_a_number_of_more_digits_than_any_id_is_said_so(producer: Api) -> None:
    # It is written in decimal digits: the refusal says what else it asks.
    answered = producer.get("/jobs?depends_on=99999999999999999999")
    assert answered.status_code == 422, answered.text
    (error,) = answered.json()["errors"]
    assert error["msg"] == "must be written in decimal digits, at most 19 of them", error


def test_hardening_70_numbers_written_plainly_still_pass(producer: Api) -> None:
    job_id = enqueue(producer)["id"]
    assert producer.get("/jobs?limit=010").status_code == 200
    assert producer.get(f"/jobs?depends_on={job_id}").status_code == 200
    # A time as JSON, and JavaScript's String(), write it: any decimals, an exponent.
    for wait in ("0", "0.25", "0.30000000000000004", "1e1", "1E-7", "2.225073858507203e-309"):
        assert producer.get(f"/jobs/{job_id}?wait_seconds={wait}").status_code == 200


@pytest.mark.parametrize(
    "query",
    [
        "job:wait_seconds=0&wait_seconds=31",
        "job:wait_seconds=31&wait_seconds=0",
        "status=completed&status=pending",
        "limit=1&type=noop&limit=2",
        "events:cursor=1&cursor=2",
    ],
)
def test_hardening_70_a_query_parameter_given_twice_is_422(producer: Api, query: str) -> None:
    # The last one counted: a filter a proxy or a cache read one way was read another here.
    job_id = enqueue(producer)["id"]
    where, _, query = query.rpartition(":")
    path = {"": "/jobs", "job": f"/jobs/{job_id}", "events": f"/jobs/{job_id}/events"}[where]
    answered = producer.get(f"{path}?{query}")
    assert answered.status_code == 422, answered.text
    name = query.partition("=")[0]
    assert answered.json()["errors"] == [{"loc": ["query", name], "msg": "given more than once"}]


def test_an_unknown_query_parameter_is_ignored_even_twice(producer: Api) -> None:
    assert producer.get("/jobs?page=1&page=2").status_code == 200


def test_hardening_70_the_key_is_checked_before_the_query(anonymous: Api, worker: Api) -> None:
    assert anonymous.get("/jobs?limit=1&limit=2").status_code == 401
    assert anonymous.get("/jobs?limit=1_0").status_code == 401
    assert worker.get("/jobs/1/events?cursor=1&cursor=2").status_code == 422


def test_producer_sees_only_its_own_jobs(producer: Api, as_key: Callable[..., Api]) -> None:
    mine = enqueue(producer)
    other = as_key("rival", "producer")
    theirs = enqueue(other)
    assert [j["id"] for j in producer.get("/jobs").json()["jobs"]] == [mine["id"]]
    assert producer.get(f"/jobs/{theirs['id']}").status_code == 404
    assert producer.get(f"/jobs/{theirs['id']}/events").status_code == 404


def test_worker_sees_only_the_jobs_it_holds_now(producer: Api, worker: Api) -> None:
    waiting = enqueue(producer)
    assert worker.get(f"/jobs/{waiting['id']}").status_code == 404
    held = claim_one(worker)
    assert worker.get(f"/jobs/{held['id']}").json()["status"] == "running"
    assert [j["id"] for j in worker.get("/jobs").json()["jobs"]] == [held["id"]]
    worker.post(f"/jobs/{held['id']}/complete", json={"lease_token": held["lease_token"]})
    assert worker.get(f"/jobs/{held['id']}").status_code == 404
    assert worker.get("/jobs").json()["jobs"] == []


def test_admin_sees_all_jobs(producer: Api, as_key: Callable[..., Api], admin: Api) -> None:
    enqueue(producer)
    enqueue(as_key("rival", "producer"))
    assert len(admin.get("/jobs").json()["jobs"]) == 2


def test_unknown_job_is_404(producer: Api) -> None:
    response = producer.get("/jobs/424242")
    assert response.status_code == 404 and response.json()["type"] == "not-found"
    assert producer.get("/jobs/424242/events").status_code == 404


def test_events_record_the_history_oldest_first(producer: Api, worker: Api) -> None:
    job = enqueue(producer)
    held = claim_one(worker, instance="a")
    worker.post(f"/jobs/{job['id']}/complete", json={"lease_token": held["lease_token"]})
    events = producer.get(f"/jobs/{job['id']}/events").json()["events"]
    assert [(e["event"], e["from_status"], e["to_status"], e["actor"]) for e in events] == [
        ("enqueued", None, "pending", "shop"),
        ("claimed", "pending", "running", "mailer/a"),
        ("completed", "running", "completed", "mailer"),
    ]


def replaced(producer: Api, times: int) -> int:
    """A job whose history is its enqueue and ``times`` replacements (batches of 500)."""
    item = {"type": "noop", "unique_key": "u", "on_duplicate": "replace"}
    items = [{**item, "payload": {"n": n}} for n in range(times + 1)]
    made = set()
    for start in range(0, len(items), 500):
        answered = producer.post("/jobs/batch", json={"jobs": items[start : start + 500]})
        assert answered.status_code == 200, answered.text
        made |= {each["job"]["id"] for each in answered.json()["jobs"]}
    (job_id,) = made
    return int(job_id)


def test_hardening_46_a_job_s_history_is_read_in_pages_of_500_at_most(producer: Api) -> None:
    """A history has no bound (each replace, release or retry adds to it): it is read a
    page at a time, each page's next_cursor leading to the next, none left out or read
    twice; a page holds 500 events unless asked for fewer."""
    job_id = replaced(producer, 501)
    first = producer.get(f"/jobs/{job_id}/events").json()
    assert len(first["events"]) == 500 and first["next_cursor"] is not None
    rest = producer.get(f"/jobs/{job_id}/events", params={"cursor": first["next_cursor"]})
    assert [e["event"] for e in rest.json()["events"]] == ["replaced"] * 2
    assert rest.json()["next_cursor"] is None
    pages, cursor, seen = 0, None, []
    while pages < 200:  # bounded: 502 events in pages of 7 are 72
        params = {"limit": 7, **({"cursor": cursor} if cursor else {})}
        page = producer.get(f"/jobs/{job_id}/events", params=params).json()
        seen += page["events"]
        pages, cursor = pages + 1, page["next_cursor"]
        if cursor is None:
            break
    every = first["events"] + rest.json()["events"]
    assert pages == 72 and seen == every
    ids = [e["id"] for e in every]
    assert (
        ids == sorted(set(ids)) and [e["event"] for e in every] == ["enqueued"] + ["replaced"] * 501
    )
    # Any event's id is a cursor: a client following the history asks after the last it read.
    after = producer.get(f"/jobs/{job_id}/events", params={"cursor": ids[9], "limit": 3}).json()
    assert [e["id"] for e in after["events"]] == ids[10:13]
    assert producer.get(f"/jobs/{job_id}/events", params={"cursor": ids[-1]}).json() == {
        "events": [],
        "next_cursor": None,
    }


def test_events_with_a_bad_limit_or_cursor_are_422_and_of_another_s_job_404(
    producer: Api, as_key: Callable[..., Api]
) -> None:
    job_id = enqueue(producer)["id"]
    for params in ({"limit": 0}, {"limit": 501}, {"cursor": "0"}, {"cursor": "x1"}):
        answered = producer.get(f"/jobs/{job_id}/events", params=params)
        assert answered.status_code == 422, params
        assert answered.json()["type"] == "validation"
    beyond = producer.get(f"/jobs/{job_id}/events", params={"cursor": str(2**63)})
    assert beyond.status_code == 422
    other = as_key("other-shop", "producer")
    assert other.get(f"/jobs/{job_id}/events").status_code == 404
    last = producer.get(f"/jobs/{job_id}/events", params={"cursor": str(2**63 - 1)})
    assert last.json() == {"events": [], "next_cursor": None}


def test_owner_cancels_a_pending_job(producer: Api) -> None:
    job = enqueue(producer)
    response = producer.post(f"/jobs/{job['id']}/cancel")
    assert response.status_code == 200 and response.json()["status"] == "cancelled"
    again = producer.post(f"/jobs/{job['id']}/cancel")
    assert again.status_code == 409 and again.json()["type"] == "invalid-state"


def test_cancel_of_a_running_job_is_409(producer: Api, worker: Api) -> None:
    job = enqueue(producer)
    claim_one(worker)
    assert producer.post(f"/jobs/{job['id']}/cancel").status_code == 409


def test_another_producer_cannot_cancel(producer: Api, as_key: Callable[..., Api]) -> None:
    job = enqueue(producer)
    response = as_key("rival", "producer").post(f"/jobs/{job['id']}/cancel")
    assert response.status_code == 404
    assert producer.get(f"/jobs/{job['id']}").json()["status"] == "pending"


def test_admin_cancels_and_redrives(producer: Api, admin: Api) -> None:
    job = enqueue(producer)
    assert admin.post(f"/jobs/{job['id']}/cancel").json()["status"] == "cancelled"
    redriven = admin.post(f"/jobs/{job['id']}/retry")
    assert redriven.status_code == 200
    assert redriven.json()["status"] == "pending" and redriven.json()["retry_count"] == 0
    again = admin.post(f"/jobs/{job['id']}/retry")
    assert again.status_code == 409 and again.json()["type"] == "invalid-state"
    assert admin.post("/jobs/99999/retry").status_code == 404
    events = [e["event"] for e in admin.get(f"/jobs/{job['id']}/events").json()["events"]]
    assert events == ["enqueued", "cancelled", "requeued"]


def test_redrive_of_a_failed_job_resets_retries(producer: Api, worker: Api, admin: Api) -> None:
    job = enqueue(producer, max_retries=0)
    held = claim_one(worker)
    worker.post(f"/jobs/{job['id']}/fail", json={"lease_token": held["lease_token"], "error": "x"})
    assert admin.get(f"/jobs/{job['id']}").json()["status"] == "failed"
    assert admin.post(f"/jobs/{job['id']}/retry").json()["status"] == "pending"
    assert claim_one(worker)["id"] == job["id"]


def test_a_redrive_of_a_job_whose_type_left_the_config_is_422(
    tmp_path: Path, storage: Storage, clock: FakeClock, producer: Api, worker: Api, admin: Api
) -> None:
    gone = enqueue(producer, "resize_image", max_retries=0)
    kept = enqueue(producer, "noop", max_retries=0)
    for _ in range(2):
        held = claim_one(worker)
        worker.post(
            f"/jobs/{held['id']}/fail", json={"lease_token": held["lease_token"], "error": "x"}
        )
    # The server restarts with a config that no longer has the type.
    types = {name: value for name, value in TYPES.items() if name != "resize_image"}
    app = create_app(make_settings(tmp_path, types=types), storage=storage, clock=clock)
    restarted = Api(TestClient(app), admin.headers["Authorization"].removeprefix("Bearer "))
    refused = restarted.post(f"/jobs/{gone['id']}/retry")
    assert refused.status_code == 422 and refused.json()["type"] == "unknown-job-type"
    assert refused.json()["detail"] == (
        'Job type "resize_image" is not configured: a retried job would never run'
    )
    assert admin.get(f"/jobs/{gone['id']}").json()["status"] == "failed"  # nothing changed
    assert restarted.post(f"/jobs/{kept['id']}/retry").json()["status"] == "pending"
    assert restarted.post(f"/jobs/{10**6}/retry").status_code == 404
    pending = enqueue(producer, "resize_image")  # not failed: the contract's 409 first
    assert restarted.post(f"/jobs/{pending['id']}/retry").status_code == 409


def test_ids_outside_64_bits_or_below_1_are_422(producer: Api, worker: Api) -> None:
    for path in ["/jobs/0", f"/jobs/{2**63}", f"/jobs/{2**64}/events"]:
        response = producer.get(path)
        assert response.status_code == 422 and response.json()["type"] == "validation", path
    assert producer.get("/jobs/-5").status_code == 404  # not a job id at all
    items = [{"id": 2**64, "lease_token": "t"}]
    assert worker.post("/jobs/batch/complete", json={"items": items}).status_code == 422


def test_hardening_35_a_path_id_of_more_digits_than_int_reads_is_422(
    producer: Api, worker: Api, admin: Api
) -> None:
    digits = "9" * 5000  # Python's int() reads at most 4,300 digits
    for response in (
        producer.get(f"/jobs/{digits}"),
        producer.post(f"/jobs/{digits}/cancel"),
        worker.post(f"/jobs/{digits}/complete", json={"lease_token": "t"}),
        admin.delete(f"/keys/{digits}"),
    ):
        assert response.status_code == 422 and response.json()["type"] == "validation"
    job = enqueue(producer)
    for padded in ("0" * 5000 + str(job["id"]), f"0{job['id']}"):  # one spelling per job
        assert producer.get(f"/jobs/{padded}").status_code == 404
    assert producer.get(f"/jobs/{job['id']}").json()["id"] == job["id"]


def test_a_type_filter_with_control_characters_is_422(producer: Api) -> None:
    for type_filter in ["noop\x00", "\x07", ""]:
        response = producer.get("/jobs", params={"type": type_filter})
        assert response.status_code == 422, type_filter
    assert producer.get("/jobs", params={"type": "noop"}).status_code == 200


def test_cursor_outside_the_id_range_is_422(producer: Api) -> None:
    for cursor in ["9" * 19, str(2**63), "9" * 20, "0", "-3", "05", "aWQ6NQ", "5 "]:
        response = producer.get("/jobs", params={"cursor": cursor})
        assert response.status_code == 422, cursor
        assert response.json()["type"] == "validation"


def test_any_id_is_a_cursor_up_to_the_largest(producer: Api) -> None:
    """A page's `next_cursor` is its last job's id, which may have up to 19 digits."""
    job = enqueue(producer)
    for cursor in [str(2**63 - 1), "1" + "0" * 18]:
        response = producer.get("/jobs", params={"cursor": cursor})
        assert response.status_code == 200, cursor
        assert [j["id"] for j in response.json()["jobs"]] == [job["id"]]
