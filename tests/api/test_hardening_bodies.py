"""Request bodies built to cost the server: long error texts and deep JSON (issue 19,
findings 1 and 2). Each is refused with a 422 before any work, and nothing is stored."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from queuelog.api.app import create_app
from queuelog.auth import KeyRing
from queuelog.clock import FakeClock
from queuelog.config import Settings
from queuelog.models import Job, Role
from queuelog.plain_json import MAX_JSON_DEPTH
from queuelog.storage.sqlite.store import SqliteStorage
from tests.conftest import Api, claim_one, enqueue, run_blocking

_JSON = {"Content-Type": "application/json"}


def _nested(levels: int) -> Any:
    """An object ``levels`` deep: {"a": {"a": ... {} ...}}."""
    value: Any = {}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


def _post_raw(api: Api, url: str, body: dict[str, Any]) -> Any:
    # The standard encoder refuses nothing this deep; the test client's would recurse.
    return api.post(url, content=json.dumps(body).encode(), headers=_JSON)


def _refused(response: Any, *loc: str | int) -> None:
    assert response.status_code == 422, response.text
    problem = response.json()
    assert problem["type"] == "validation"
    assert [e["loc"] for e in problem["errors"]] == [["body", *loc]]


def test_hardening_01_an_error_text_over_16_kib_is_422(
    producer: Api, worker: Api, admin: Api
) -> None:
    job = enqueue(producer, max_retries=0)
    held = claim_one(worker)
    body = {"lease_token": held["lease_token"], "error": "e" * (16 * 1024 + 1)}
    _refused(worker.post(f"/jobs/{job['id']}/fail", json=body), "error")
    assert admin.get(f"/jobs/{job['id']}").json()["status"] == "running"
    body["error"] = "e " * (8 * 1024)
    assert worker.post(f"/jobs/{job['id']}/fail", json=body).status_code == 200
    stored = admin.get(f"/jobs/{job['id']}").json()["error"]
    assert len(stored) <= 2000 and stored.endswith("e [cut]")


def test_hardening_02_deep_json_is_422(
    producer: Api, worker: Api, admin: Api, caplog: pytest.LogCaptureFixture
) -> None:
    deep = _nested(900)
    assert len(json.dumps(deep)) < 64 * 1024
    caplog.set_level(logging.DEBUG)
    _refused(_post_raw(producer, "/jobs", {"type": "noop", "payload": deep}), "payload")
    keyed = {"type": "noop", "payload": deep, "idempotency_key": "k"}
    _refused(_post_raw(producer, "/jobs", keyed), "payload")
    batch = {"jobs": [{"type": "noop"}, {"type": "noop", "payload": deep}]}
    _refused(_post_raw(producer, "/jobs/batch", batch), "jobs", 1, "payload")
    assert admin.get("/jobs").json()["jobs"] == []

    job = enqueue(producer)
    held = claim_one(worker)
    complete = {"lease_token": held["lease_token"], "result": deep}
    _refused(_post_raw(worker, f"/jobs/{job['id']}/complete", complete), "result")
    items = {"items": [{"id": job["id"], "lease_token": held["lease_token"], "result": deep}]}
    _refused(_post_raw(worker, "/jobs/batch/complete", items), "items", 0, "result")
    after = admin.get(f"/jobs/{job['id']}").json()
    assert after["status"] == "running" and after["result"] is None
    # Refusals are not failures of the server: nothing of them is logged.
    assert sum(len(r.getMessage()) + len(r.exc_text or "") for r in caplog.records) < 4096


def test_hardening_02_json_as_deep_as_the_limit_is_accepted(
    producer: Api, worker: Api, admin: Api
) -> None:
    job = enqueue(producer, payload=_nested(MAX_JSON_DEPTH), idempotency_key="deep")
    assert admin.get(f"/jobs/{job['id']}").json()["payload"] == _nested(MAX_JSON_DEPTH)
    held = claim_one(worker)
    done = {"lease_token": held["lease_token"], "result": {"list": _nested(MAX_JSON_DEPTH - 1)}}
    assert worker.post(f"/jobs/{job['id']}/complete", json=done).status_code == 200
    too_deep = {"type": "noop", "payload": {"list": [_nested(MAX_JSON_DEPTH - 1)]}}
    _refused(_post_raw(producer, "/jobs", too_deep), "payload")


class _RecursingStorage(SqliteStorage):
    """A storage whose job reads fail deep in a recursion, as a bug might."""

    async def job_get(self, job_id: int) -> Job | None:
        return _recurse(sys.getrecursionlimit())


def _recurse(depth: int) -> Job | None:
    return [_recurse(depth - 1)][0] if depth else None


@pytest.fixture
def recursing(settings: Settings, clock: FakeClock) -> Iterator[Api]:
    """An admin's client on an app whose storage fails that way."""
    assert settings.sqlite_path is not None
    storage = _RecursingStorage(settings.sqlite_path)
    _, key = run_blocking(KeyRing(storage, clock).create("root", frozenset({Role.ADMIN})))
    app = create_app(settings, storage=storage, clock=clock, run_maintenance=False)
    with TestClient(app, raise_server_exceptions=False) as client:
        yield Api(client, key)


def test_hardening_02_an_unexpected_failure_logs_one_line_and_a_bounded_traceback(
    recursing: Api, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR)
    response = recursing.get("/jobs/1")
    assert response.status_code == 500 and response.json()["type"] == "internal"
    (record,) = caplog.records
    logged = record.getMessage() + (record.exc_text or "")
    assert logged.startswith("internal error on GET /jobs/1: RecursionError\n")
    assert "Traceback" in logged and len(logged) < 20 * 1024


def test_hardening_14_answers_show_values_as_json_never_as_python_reprs(
    producer: Api, worker: Api
) -> None:
    refused = producer.post(
        "/jobs", json={"type": "send_email", "payload": {"to": {"k": True, "n": None}}}
    )
    assert refused.status_code == 422
    (error,) = refused.json()["errors"]
    assert error["msg"] == '{"k": true, "n": null} is not of type "string"'
    unknown = producer.post("/jobs", json={"type": "oth\u0000er"})
    assert unknown.status_code == 422
    assert unknown.json()["detail"] == 'Job type "oth\\u0000er" is not configured'
    claim = worker.post("/jobs/claim", json={"types": ["n'o"]})
    assert claim.status_code == 422 and claim.json()["detail"].endswith('"n\'o" is not configured')
    for answer in (refused, unknown, claim):
        assert (
            "True" not in answer.text and "None" not in answer.text and "\\x00" not in answer.text
        )


def test_hardening_14_a_long_value_a_schema_refused_is_shown_cut(producer: Api) -> None:
    refused = producer.post("/jobs", json={"type": "send_email", "payload": {"to": ["x" * 900]}})
    (error,) = refused.json()["errors"]
    assert error["msg"].startswith('["xxx') and '..." is not of type' not in error["msg"]
    assert len(error["msg"]) < 300 and error["msg"].endswith('... is not of type "string"')


def test_hardening_15_a_batch_item_refused_by_its_schema_is_named_by_index(
    producer: Api,
) -> None:
    jobs = [{"type": "send_email", "payload": {"to": "a@example.com"}}] * 2
    jobs.append({"type": "send_email", "payload": {}})
    refused = producer.post("/jobs/batch", json={"jobs": jobs})
    assert refused.status_code == 422
    problem = refused.json()
    assert problem["index"] == 2
    assert problem["errors"][0]["loc"] == ["body", "jobs", 2, "payload"]
    assert producer.get("/jobs").json()["jobs"] == []  # all or nothing
