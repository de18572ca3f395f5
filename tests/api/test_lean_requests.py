"""The hottest routes read their own requests (api/lean.py) and answer as every route
does: these pin what a FastAPI route would have said."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import Api


@pytest.mark.parametrize("path", ["/jobs", "/jobs/claim", "/jobs/batch/complete"])
def test_no_body_is_a_missing_body(producer: Api, worker: Api, path: str) -> None:
    caller = producer if path == "/jobs" else worker
    answer = caller.post(path, headers={"Content-Type": "application/json"})
    assert answer.status_code == 422
    assert answer.json()["errors"] == [{"loc": ["body"], "msg": "Field required"}]


@pytest.mark.parametrize("body", ["null", "[]", "5"])
def test_a_body_that_is_not_an_object_names_the_body(producer: Api, body: str) -> None:
    answer = producer.post("/jobs", content=body, headers={"Content-Type": "application/json"})
    assert answer.status_code == 422
    (error,) = answer.json()["errors"]
    assert error["loc"] == ["body"]
    assert "EnqueueRequest" not in error["msg"]


def test_an_empty_claim_object_claims_with_the_defaults(producer: Api, worker: Api) -> None:
    assert producer.post("/jobs", json={"type": "noop"}).status_code == 201
    answer = worker.post("/jobs/claim", json={})
    assert answer.status_code == 200
    jobs: list[dict[str, Any]] = answer.json()["jobs"]
    assert len(jobs) == 1


@pytest.mark.parametrize("body", ["null", "[]"])
def test_a_claim_body_that_is_not_an_object_is_refused_as_on_every_route(
    worker: Api, body: str
) -> None:
    json_type = {"Content-Type": "application/json"}
    answer = worker.post("/jobs/claim", content=body, headers=json_type)
    assert answer.status_code == 422
    assert answer.json()["errors"][0]["loc"] == ["body"]


def test_the_checks_run_in_the_contract_s_order(anonymous: Api, producer: Api) -> None:
    json_type = {"Content-Type": "application/json"}
    # JSON syntax before the key; the key before the fields.
    assert anonymous.post("/jobs", content="{", headers=json_type).status_code == 422
    assert anonymous.post("/jobs", json={"nope": 1}).status_code == 401
    assert producer.post("/jobs/claim", json={"limit": 0}).status_code == 403
