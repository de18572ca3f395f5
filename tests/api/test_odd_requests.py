"""The hottest routes (``POST /jobs``, ``/jobs/claim``, ``/jobs/batch/complete``) answer
odd requests with their documented problem, through the app's one middleware stack."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from queuelog.api.app import create_app
from queuelog.clock import FakeClock
from queuelog.config import Settings
from queuelog.storage.protocol import Storage
from tests.conftest import Api, KeyMaker, make_settings

_JSON = {"Content-Type": "application/json"}
_NOOP = b'{"type": "noop"}'
_DEEP = b'{"type": "noop", "payload": {"a": ' + b"[" * 5000 + b"]" * 5000 + b"}}"
_HUGE = b'{"type": "noop", "payload": {"x": 123456789012345678901234567890}}'
_BOTH = b'{"type": "noop", "delay_seconds": 1, "run_at": "2030-01-01T00:00:00Z"}'
_KEYED = b'{"type": "noop", "idempotency_key": "order-3"}'

# (case, whose key, headers, body, answer): every answer of POST /jobs.
_P = "producer"
_ENQUEUE_CASES: list[tuple[str, str | None, dict[str, str], bytes, str]] = [
    ("created", _P, _JSON, b'{"type": "send_email", "payload": {"to": "a@b.c"}}', "201"),
    ("priority", _P, _JSON, b'{"type": "noop", "priority": "HIGH"}', "201"),
    ("above max priority", _P, _JSON, b'{"type": "noop", "priority": "critical"}', "403 forbidden"),
    ("no key", None, _JSON, b'{"type": "noop"}', "401 unauthenticated"),
    ("other scheme", "basic", _JSON, b'{"type": "noop"}', "401 unauthenticated"),
    ("bad key", "unknown", _JSON, b'{"type": "noop"}', "401 unauthenticated"),
    ("worker key", "worker", _JSON, b"{}", "403 forbidden"),
    ("admin key", "admin", _JSON, b'{"type": "noop"}', "403 forbidden"),
    ("no content type", _P, {}, b'{"type": "noop"}', "415 unsupported-media-type"),
    ("malformed json", _P, _JSON, b'{"type": "noop"', "422 validation"),
    ("not an object", _P, _JSON, b"[1, 2]", "422 validation"),
    ("empty body", _P, _JSON, b"", "422 validation"),
    ("missing type", _P, _JSON, b'{"payload": {}}', "422 validation"),
    ("extra field", _P, _JSON, b'{"type": "noop", "colour": "red"}', "422 validation"),
    ("unknown type", _P, _JSON, b'{"type": "nope"}', "422 unknown-job-type"),
    ("schema", _P, _JSON, b'{"type": "send_email", "payload": {"to": 5}}', "422 validation"),
    ("too deep", _P, _JSON, _DEEP, "422 validation"),
    ("nan", _P, _JSON, b'{"type": "noop", "payload": {"x": NaN}}', "422 validation"),
    (
        "lone surrogate",
        _P,
        _JSON,
        b'{"type": "noop", "payload": {"x": "\\ud800"}}',
        "422 validation",
    ),
    ("huge int", _P, _JSON, _HUGE, "201"),
    (
        "repeated name",
        _P,
        _JSON,
        b'{"type": "noop", "payload": {"x": 1, "x": 2}}',
        "422 validation",
    ),
    ("byte order mark", _P, _JSON, b'\xef\xbb\xbf{"type": "noop"}', "201"),
    ("both schedules", _P, _JSON, _BOTH, "422 validation"),
    (
        "header and body keys differ",
        _P,
        {**_JSON, "Idempotency-Key": "order-2"},
        _KEYED,
        "422 validation",
    ),
    ("header key not ascii", _P, {**_JSON, "Idempotency-Key": "caf\xe9"}, _NOOP, "422 validation"),
    (
        "header key empty",
        _P,
        {**_JSON, "Idempotency-Key": ""},
        b'{"type": "noop"}',
        "422 validation",
    ),
]


def _authorization(keys: dict[str, str], who: str | None) -> dict[str, str]:
    if who is None:
        return {}
    if who == "basic":
        return {"Authorization": "Basic abc"}
    return {"Authorization": f"Bearer {keys.get(who, 'ql_nope')}"}


@pytest.fixture
def keys(make_key: KeyMaker) -> dict[str, str]:
    return {
        "producer": make_key("shop", "producer", max_priority="high")[1],
        "worker": make_key("mailer", "worker", types=("noop",))[1],
        "admin": make_key("root", "admin")[1],
    }


@pytest.mark.parametrize(
    ("who", "headers", "body", "answer"),
    [case[1:] for case in _ENQUEUE_CASES],
    ids=[case[0] for case in _ENQUEUE_CASES],
)
def test_every_odd_enqueue_gets_its_documented_answer(
    client: TestClient,
    keys: dict[str, str],
    who: str | None,
    headers: dict[str, str],
    body: bytes,
    answer: str,
) -> None:
    sent = {k: v.encode("latin-1") for k, v in {**headers, **_authorization(keys, who)}.items()}
    response = client.post("/jobs", content=body, headers=sent)
    status, _, slug = answer.partition(" ")
    assert response.status_code == int(status), response.text
    if slug:
        assert response.headers["content-type"] == "application/problem+json"
        assert response.json()["type"] == slug


def test_an_enqueue_reads_every_value_to_the_bit(producer: Api) -> None:
    exact = b'{"type": "noop", "payload": {"n": 123456789012345678901234567890, "f": 0.1}}'
    served = producer.post("/jobs", content=exact, headers=_JSON)
    assert served.status_code == 201
    stored = producer.get(f"/jobs/{served.json()['id']}").json()["payload"]
    assert stored == json.loads(exact)["payload"]
    assert type(stored["n"]) is int and stored["f"] == 0.1


def test_an_idempotency_header_answers_the_same_job_again_and_refuses_another(
    producer: Api,
) -> None:
    keyed = {**_JSON, "Idempotency-Key": "order-1"}
    first = producer.post("/jobs", content=b'{"type": "noop"}', headers=keyed)
    again = producer.post("/jobs", content=b'{"type": "noop"}', headers=keyed)
    other = producer.post("/jobs", content=b'{"type": "resize_image"}', headers=keyed)
    assert (first.status_code, again.status_code, other.status_code) == (201, 200, 422)
    assert again.json()["id"] == first.json()["id"]
    assert other.json()["type"] == "idempotency-key-reused"


# (case, which key, content type?, body, status, problem type)
_CLAIM_CASES: list[tuple[str, str | None, bool, bytes, int, str | None]] = [
    ("no key", None, True, b"{}", 401, "unauthenticated"),
    ("producer key", "producer", True, b"{}", 403, "forbidden"),
    ("no content type", "worker", False, b"{}", 415, "unsupported-media-type"),
    ("bad json", "worker", True, b"{", 422, "validation"),
    ("limit 0", "worker", True, b'{"limit": 0}', 422, "validation"),
    ("unknown type", "worker", True, b'{"types": ["nope"]}', 422, "unknown-job-type"),
    ("type not allowed", "worker", True, b'{"types": ["send_email"]}', 403, "forbidden"),
    ("null", "worker", True, b"null", 422, "validation"),
    ("empty body", "worker", False, b"", 422, "validation"),
]
_COMPLETE_CASES: list[tuple[str, str | None, bool, bytes, int, str | None]] = [
    ("no key", None, True, b"{}", 401, "unauthenticated"),
    ("producer key", "producer", True, b"{}", 403, "forbidden"),
    ("no content type", "worker", False, b"{}", 415, "unsupported-media-type"),
    ("no items", "worker", True, b'{"items": []}', 422, "validation"),
    ("bad json", "worker", True, b'{"items": [', 422, "validation"),
]


@pytest.mark.parametrize(
    ("path", "who", "typed", "body", "status", "slug"),
    [("/jobs/claim", *case[1:]) for case in _CLAIM_CASES]
    + [("/jobs/batch/complete", *case[1:]) for case in _COMPLETE_CASES],
    ids=[f"claim, {case[0]}" for case in _CLAIM_CASES]
    + [f"complete, {case[0]}" for case in _COMPLETE_CASES],
)
def test_every_odd_worker_request_gets_its_documented_answer(
    client: TestClient,
    keys: dict[str, str],
    path: str,
    who: str | None,
    typed: bool,
    body: bytes,
    status: int,
    slug: str | None,
) -> None:
    enqueued = client.post("/jobs", json={"type": "noop"}, headers=_authorization(keys, "producer"))
    assert enqueued.status_code == 201
    headers = {**(_JSON if typed else {}), **_authorization(keys, who)}
    response = client.post(path, content=body, headers=headers)
    assert response.status_code == status, response.text
    if slug is None:
        assert len(response.json()["jobs"]) == 1
        return
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["type"] == slug


def test_a_batch_completion_answers_each_item_and_minimal_leaves_the_jobs_out(
    producer: Api, worker: Api
) -> None:
    for _ in range(4):
        producer.post("/jobs", json={"type": "noop"})
    held = worker.post("/jobs/claim", json={"limit": 4}).json()["jobs"]
    items = [
        {"id": held[0]["id"], "lease_token": held[0]["lease_token"], "result": {"ok": 1}},
        {"id": held[1]["id"], "lease_token": "stale"},
        {"id": 10**12, "lease_token": "t"},
    ]
    done = worker.post("/jobs/batch/complete", json={"items": items})
    assert [r["status"] for r in done.json()["results"]] == [200, 409, 404]
    assert "preference-applied" not in done.headers
    minimal = {"Prefer": "respond-async, return=minimal"}
    many = [
        {"id": held[2]["id"], "lease_token": held[2]["lease_token"]},
        {"id": held[1]["id"], "lease_token": "stale"},
        {"id": held[0]["id"], "lease_token": held[0]["lease_token"]},
    ]
    short = worker.post("/jobs/batch/complete", json={"items": many}, headers=minimal)
    assert short.headers["preference-applied"] == "return=minimal"
    assert short.json()["results"] == [
        {"id": held[2]["id"], "status": 200},
        {"id": held[1]["id"], "status": 409, "type": "not-lease-holder"},
        {"id": held[0]["id"], "status": 409, "type": "invalid-state"},
    ]


def test_the_first_of_repeated_content_types_is_the_one_that_counts(
    client: TestClient, keys: dict[str, str]
) -> None:
    for path, role in (("/jobs", "producer"), ("/jobs/claim", "worker")):
        headers = [
            ("authorization", f"Bearer {keys[role]}"),
            ("content-type", "text/plain"),
            ("content-type", "application/json"),
        ]
        response = client.post(path, content=b'{"type": "noop"}', headers=headers)
        assert response.status_code == 415, path
        assert response.json()["type"] == "unsupported-media-type"


def test_a_streamed_body_is_served_within_the_limit_and_refused_over_it(
    producer: Api, settings: Settings
) -> None:
    def small() -> Iterator[bytes]:
        yield b'{"type": "noop"}'

    def large() -> Iterator[bytes]:
        yield b'{"type": "noop", "payload": {"x": "'
        for _ in range(settings.limits.max_request_bytes // 65_536 + 1):
            yield b"a" * 65_536
        yield b'"}}'

    assert producer.post("/jobs", content=small(), headers=_JSON).status_code == 201
    over = producer.post("/jobs", content=large(), headers=_JSON)
    assert over.status_code == 413 and over.json()["type"] == "body-too-large"


def test_a_declared_length_over_the_limit_is_413_before_the_body_is_read(
    producer: Api, settings: Settings
) -> None:
    limit = settings.limits.max_request_bytes
    big = b'{"type": "noop", "payload": {"x": "' + b"a" * limit + b'"}}'
    over = producer.post("/jobs", content=big, headers=_JSON)
    assert over.status_code == 413 and over.json()["type"] == "body-too-large"


def test_a_rate_limited_key_is_refused_once_per_request(
    tmp_path: Any, clock: FakeClock, make_key: KeyMaker, storage: Storage
) -> None:
    settings = make_settings(tmp_path, limits={"rate_per_second": 1, "rate_burst": 2})
    app = create_app(settings, storage=storage, clock=clock, run_maintenance=False)
    headers = {"Authorization": f"Bearer {make_key('shop', 'producer')[1]}"}
    with TestClient(app, raise_server_exceptions=False) as client:
        codes = [client.post("/jobs", json={"type": "noop"}, headers=headers) for _ in range(3)]
    assert [r.status_code for r in codes] == [201, 201, 429]
    assert codes[2].json()["type"] == "rate-limited" and "retry-after" in codes[2].headers


def test_requests_are_counted_under_their_route_name(producer: Api, admin: Api) -> None:
    for _ in range(3):
        assert producer.post("/jobs", json={"type": "noop"}).status_code == 201
    assert producer.post("/jobs", json={"type": "nope"}).status_code == 422
    metrics = admin.get("/metrics").text
    line = 'queuelog_http_requests_total{method="POST",route="/jobs",status="201"} 3.0'
    assert line in metrics
    assert 'route="/jobs",status="422"} 1.0' in metrics


def test_an_unexpected_failure_is_a_bare_500_problem_logged_for_operators(
    client: TestClient,
    producer: Api,
    admin: Api,
    storage: Storage,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def broken(*_: Any, **__: Any) -> None:
        raise RuntimeError("no such column: secret_col in SELECT (/var/lib/queuelog/q.db)")

    monkeypatch.setattr(storage, "job_insert_many", broken)
    with caplog.at_level(logging.ERROR, logger="queuelog.api"):
        served = producer.post("/jobs", json={"type": "noop"})
    assert served.status_code == 500 and served.json()["type"] == "internal"
    assert served.headers["content-type"] == "application/problem+json"
    for leak in ("secret_col", "SELECT", "/var/lib", "Traceback"):
        assert leak not in served.text
    assert any("secret_col" in r.getMessage() for r in caplog.records)
    metrics = admin.get("/metrics").text
    assert 'queuelog_http_requests_total{method="POST",route="/jobs",status="500"} 1.0' in metrics
