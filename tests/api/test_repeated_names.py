"""A JSON body whose object names a member twice: RFC 8259 leaves its meaning to each
reader (Python's keeps the last value, many others the first), so it is refused, as a
query parameter or an ``Idempotency-Key`` header given twice is."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import Api, claim_one, enqueue

_JSON = {"Content-Type": "application/json"}


def _refused(response: Any, name: str) -> None:
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    problem = response.json()
    assert problem["type"] == "validation"
    assert [e["loc"] for e in problem["errors"]] == [["body"]]
    assert f'"{name}" more than once' in problem["errors"][0]["msg"]


@pytest.mark.parametrize(
    ("url", "raw", "name"),
    [
        ("/jobs", '{"type": "no_such_type", "type": "noop"}', "type"),
        ("/jobs", '{"type": "noop", "payload": {"to": "a", "to": "b"}}', "to"),
        ("/jobs/batch", '{"jobs": [{"type": "noop", "priority": "low", "priority": "high"}]}',
         "priority"),
    ],
)  # fmt: skip
def test_hardening_86_an_enqueue_naming_a_member_twice_is_422_and_stores_nothing(
    producer: Api, admin: Api, url: str, raw: str, name: str
) -> None:
    _refused(producer.post(url, content=raw.encode(), headers=_JSON), name)
    assert admin.get("/jobs").json()["jobs"] == []


def test_hardening_86_a_worker_s_body_naming_a_member_twice_changes_nothing(
    producer: Api, worker: Api, admin: Api
) -> None:
    job = enqueue(producer)
    token = claim_one(worker)["lease_token"]
    raw = f'{{"lease_token": "{token}", "delay_seconds": 0, "delay_seconds": 86400}}'
    release = f"/jobs/{job['id']}/release"
    _refused(worker.post(release, content=raw.encode(), headers=_JSON), "delay_seconds")
    raw = f'{{"lease_token": "{token}", "result": {{}}, "result": {{"ok": true}}}}'
    complete = f"/jobs/{job['id']}/complete"
    _refused(worker.post(complete, content=raw.encode(), headers=_JSON), "result")
    assert admin.get(f"/jobs/{job['id']}").json()["status"] == "running"


def test_hardening_86_an_admin_s_body_naming_a_member_twice_makes_nothing(admin: Api) -> None:
    raw = '{"name": "twice", "type": "noop", "every_seconds": 60, "every_seconds": 1}'
    _refused(admin.post("/schedules", content=raw.encode(), headers=_JSON), "every_seconds")
    _refused(admin.post("/types/noop/pause", content=b'{"a": 1, "a": 1}', headers=_JSON), "a")
    assert admin.get("/schedules").json()["schedules"] == []
    assert not any(t["paused"] for t in admin.get("/types").json()["types"])


def test_members_named_once_still_pass(producer: Api) -> None:
    raw = '{"type": "noop", "payload": {"a": {"x": 1}, "b": {"x": 2}}}'
    response = producer.post("/jobs", content=raw.encode(), headers=_JSON)
    assert response.status_code == 201, response.text
    assert response.json()["payload"] == {"a": {"x": 1}, "b": {"x": 2}}
