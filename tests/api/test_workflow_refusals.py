"""Workflows over HTTP, on both backends: who may read a job's dependencies, and every
refusal of a dependency (nothing is stored on any of them)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.api.test_workflows import claim, finish, run
from tests.conftest import Api, enqueue


def _count(admin: Api) -> int:
    return len(admin.get("/jobs?limit=500").json()["jobs"])


def _refused(api: Api, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = api.post(path, json=body)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    problem: dict[str, Any] = response.json()
    assert problem["type"] == "validation"
    return problem


def test_another_producer_s_job_is_refused_as_a_missing_one(
    producer: Api, as_key: Callable[..., Api], admin: Api
) -> None:
    theirs = enqueue(as_key("other-shop", "producer"))
    before = _count(admin)
    other = _refused(producer, "/jobs", {"type": "noop", "depends_on": [theirs["id"]]})
    missing = _refused(producer, "/jobs", {"type": "noop", "depends_on": [theirs["id"] + 100]})
    assert (
        other["errors"]
        == missing["errors"]
        == [{"loc": ["body", "depends_on", 0], "msg": "no such job"}]
    )
    assert "index" not in other
    assert _count(admin) == before, "nothing stored"


def test_hardening_68_a_job_held_only_as_a_worker_is_refused_as_a_missing_one(
    producer: Api, as_key: Callable[..., Api], admin: Api
) -> None:
    # A key with both roles held another producer's job, named it in depends_on, and
    # read its final status and result through /dependencies for good, long after
    # the lease (and kept it from retention while the dependent was active).
    both = as_key("relay", "producer", "worker")
    theirs = enqueue(producer)
    (held,) = claim(both)
    assert held["id"] == theirs["id"]
    before = _count(admin)
    refused = _refused(both, "/jobs", {"type": "noop", "depends_on": [held["id"]]})
    missing = _refused(both, "/jobs", {"type": "noop", "depends_on": [held["id"] + 100]})
    assert refused["errors"] == missing["errors"]
    batch_item = {"jobs": [{"type": "noop"}, {"type": "noop", "depends_on": [held["id"]]}]}
    assert _refused(both, "/jobs/batch", batch_item)["index"] == 1
    assert _count(admin) == before, "nothing stored"
    # Its own jobs it may still wait for, held or not.
    mine = enqueue(both)
    assert enqueue(both, depends_on=[mine["id"]])["status"] == "waiting"


def test_a_batch_with_one_unseen_dependency_stores_nothing(
    producer: Api, as_key: Callable[..., Api], admin: Api
) -> None:
    mine, theirs = enqueue(producer), enqueue(as_key("other-shop", "producer"))
    before = _count(admin)
    jobs = [
        {"type": "noop", "depends_on": [mine["id"]]},
        {"type": "noop", "depends_on_items": [0]},
        {"type": "noop", "depends_on": [mine["id"], theirs["id"]]},
    ]
    problem = _refused(producer, "/jobs/batch", {"jobs": jobs})
    assert problem["index"] == 2
    where = ["body", "jobs", 2, "depends_on", 1]
    assert problem["errors"] == [{"loc": where, "msg": "no such job"}]
    assert _count(admin) == before


def test_an_admin_producer_may_name_any_job(producer: Api, as_key: Callable[..., Api]) -> None:
    theirs = enqueue(producer)
    job = enqueue(as_key("ops", "producer", "admin"), depends_on=[theirs["id"]])
    assert job["status"] == "waiting"


@pytest.mark.parametrize(
    "body",
    [
        {"depends_on": [1, 1]},
        {"depends_on": list(range(1, 102))},
        {"depends_on": [0]},
        {"depends_on": ["1"]},
        {"depends_on": [2**63]},
        {"depends_on": 1},
        {"on_dependency_failure": "ignore"},
        {"depends_on_items": [0]},  # a single enqueue has no items
    ],
    ids=["twice", "101", "zero", "string", "too-big", "not-a-list", "mode", "items"],
)
def test_a_bad_dependency_field_is_422(producer: Api, admin: Api, body: dict[str, Any]) -> None:
    enqueue(producer)
    before = _count(admin)
    _refused(producer, "/jobs", {"type": "noop", **body})
    assert _count(admin) == before


@pytest.mark.parametrize("items", [[1], [2], [0, 0], [499], [-1]])
def test_a_batch_item_naming_itself_a_later_item_or_out_of_range_is_422(
    producer: Api, admin: Api, items: list[int]
) -> None:
    jobs = [{"type": "noop"}, {"type": "noop", "depends_on_items": items}]
    problem = _refused(producer, "/jobs/batch", {"jobs": jobs})
    assert problem["errors"][0]["loc"][:4] == ["body", "jobs", 1, "depends_on_items"]
    assert _count(admin) == 0


def test_a_later_item_is_refused_naming_the_item(producer: Api) -> None:
    jobs = [{"type": "noop", "depends_on_items": []}, {"type": "noop", "depends_on_items": [1]}]
    problem = _refused(producer, "/jobs/batch", {"jobs": jobs})
    assert problem["index"] == 1 and "item 1" in problem["detail"]
    (error,) = problem["errors"]
    assert error == {
        "loc": ["body", "jobs", 1, "depends_on_items"],
        "msg": "Only items before this one may be named (below 1)",
    }


@pytest.mark.parametrize("value", ["0", "-3", "abc", str(2**63)])
def test_a_bad_dependents_filter_is_422(producer: Api, value: str) -> None:
    response = producer.get(f"/jobs?depends_on={value}")
    assert response.status_code == 422 and response.json()["type"] == "validation"


def test_the_owner_an_admin_and_the_holding_worker_read_the_dependencies(
    producer: Api, worker: Api, admin: Api, as_key: Callable[..., Api]
) -> None:
    a = enqueue(producer)
    run(worker, a, result={"rows": 3})
    b = enqueue(producer, depends_on=[a["id"]])
    path = f"/jobs/{b['id']}/dependencies"
    dependency = {"id": a["id"], "type": "noop", "status": "completed", "result": {"rows": 3}}
    expected = {"dependencies": [dependency]}
    assert producer.get(path).json() == expected
    assert admin.get(path).json() == expected
    other_worker = as_key("resizer", "worker")
    assert worker.get(path).status_code == 404, "not held yet"
    (held,) = claim(worker)
    assert worker.get(path).json() == expected
    assert other_worker.get(path).status_code == 404
    assert as_key("other-shop", "producer").get(path).status_code == 404
    finish(worker, held)
    assert worker.get(path).status_code == 404, "no longer held"
    assert producer.get(f"/jobs/{a['id']}/dependencies").json() == {"dependencies": []}
    assert producer.get(f"/jobs/{b['id'] + 100}/dependencies").status_code == 404


def test_a_waiting_job_is_not_retried_and_a_finished_one_not_cancelled(
    producer: Api, worker: Api, admin: Api
) -> None:
    a = enqueue(producer)
    b = enqueue(producer, depends_on=[a["id"]])
    assert admin.post(f"/jobs/{b['id']}/retry").status_code == 409
    run(worker, a)
    assert producer.post(f"/jobs/{a['id']}/cancel").status_code == 409


def test_hardening_16_one_item_may_wait_for_all_the_others(producer: Api) -> None:
    jobs: list[dict[str, Any]] = [{"type": "noop"} for _ in range(499)]
    jobs.append({"type": "noop", "depends_on_items": list(range(499))})  # when all are done
    response = producer.post("/jobs/batch", json={"jobs": jobs})
    assert response.status_code == 200, response.text
    assert response.json()["jobs"][-1]["job"]["status"] == "waiting"


def test_hardening_16_a_batch_names_at_most_10000_dependencies(producer: Api, admin: Api) -> None:
    # 500 jobs, each after up to the 100 before it: 44,950 dependencies would cost the
    # server's loop about a third of a second to insert, for one request (124,750, each
    # after every one before it, about a second).
    jobs: list[dict[str, Any]] = [
        {"type": "noop", "depends_on_items": list(range(max(0, i - 100), i))} for i in range(500)
    ]
    problem = _refused(producer, "/jobs/batch", {"jobs": jobs})
    assert problem["errors"][0]["loc"] == ["body", "jobs"]
    assert "at most 10,000 dependencies" in problem["errors"][0]["msg"]
    assert _count(admin) == 0
    allowed = [dict(job, depends_on_items=job["depends_on_items"][:20]) for job in jobs]
    response = producer.post("/jobs/batch", json={"jobs": allowed})
    assert response.status_code == 200, response.text
