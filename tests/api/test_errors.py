"""Every failure is problem+json; limits are enforced before work is done."""

from __future__ import annotations

import asyncio
import gzip
import logging
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from queuelog.api.app import create_app
from queuelog.api.middleware import BodyLimitMiddleware
from queuelog.auth import KeyRing
from queuelog.clock import FakeClock
from queuelog.config import Settings
from queuelog.errors import StorageUnavailable
from queuelog.models import Role
from queuelog.storage.sqlite.store import SqliteStorage
from tests.conftest import Api, enqueue, make_settings, run_blocking


def test_non_json_body_is_415(producer: Api) -> None:
    response = producer.post("/jobs", content=b"type=noop", headers={"Content-Type": "text/plain"})
    assert response.status_code == 415
    assert response.json()["type"] == "unsupported-media-type"
    form = producer.post("/jobs", data={"type": "noop"})
    assert form.status_code == 415


_CODED = ("Content-Encoding", "gzip")


@pytest.mark.parametrize(
    "encodings",
    [
        [_CODED],
        [("Content-Encoding", "br")],
        [("Content-Encoding", "identity, gzip")],
        [("Content-Encoding", "identity"), _CODED],  # a second header names one
    ],
)
def test_hardening_76_a_content_encoded_body_is_415_and_stores_nothing(
    producer: Api, encodings: list[tuple[str, str]]
) -> None:
    """A body labelled with a content coding was read as plain JSON (a gzip body was 422
    "not valid JSON", a plain one labelled `br` was stored): a proxy that decodes it would
    see another request than the server. RFC 9110 gives such a body 415, saying which
    codings are taken."""
    body = b'{"type": "noop"}'
    if "gzip" in encodings[-1][1]:
        body = gzip.compress(body)
    headers = [*producer.headers.items(), ("Content-Type", "application/json"), *encodings]
    response = producer.client.post("/jobs", content=body, headers=headers)
    assert response.status_code == 415, response.text
    assert response.json()["type"] == "unsupported-media-type"
    assert response.headers["accept-encoding"] == "identity"
    assert producer.get("/jobs").json()["jobs"] == []


def test_a_body_labelled_identity_is_read_as_it_is(producer: Api) -> None:
    headers = {"Content-Type": "application/json", "Content-Encoding": "identity"}
    assert producer.post("/jobs", content=b'{"type": "noop"}', headers=headers).status_code == 201


def test_hardening_25_a_route_that_takes_no_fields_refuses_any_body_but_none_or_empty(
    producer: Api, admin: Api
) -> None:
    job = enqueue(producer)
    cancel = f"/jobs/{job['id']}/cancel"
    text = producer.post(cancel, content=b"hello", headers={"Content-Type": "text/plain"})
    assert text.status_code == 415 and text.json()["type"] == "unsupported-media-type"
    big = producer.post(cancel, content=b"[" + b"0," * 600_000 + b"0]")
    assert big.status_code == 413 and big.json()["type"] == "body-too-large"
    parts = iter([b"[", b"0," * 600_000, b"0]"])
    chunked = producer.post(cancel, content=parts, headers={"Content-Type": "application/json"})
    assert chunked.status_code == 413 and chunked.json()["type"] == "body-too-large"
    assert producer.get(f"/jobs/{job['id']}").json()["status"] == "pending"
    json_type = {"Content-Type": "application/json"}
    for body in [b"{not json", b'{"reason": "late"}', b"[]", b'"x"']:
        refused = producer.post(cancel, content=body, headers=json_type)
        assert refused.status_code == 422 and refused.json()["type"] == "validation", body
    assert producer.get(f"/jobs/{job['id']}").json()["status"] == "pending"  # nothing done
    # Checked as fields are, after the key and the role; malformed JSON before the key.
    assert producer.client.post(cancel, json={"reason": "late"}).status_code == 401
    assert producer.client.post(cancel, content=b"{not json", headers=json_type).status_code == 422
    assert producer.post("/types/noop/pause", json={"paused": False}).status_code == 403
    paused = admin.post("/types/noop/pause", json={"paused": False})
    assert paused.status_code == 422 and paused.json()["errors"][0]["loc"] == ["body"]
    (noop,) = [t for t in admin.get("/types").json()["types"] if t["name"] == "noop"]
    assert noop["paused"] is False
    assert admin.post("/types/noop/pause", json={}).status_code == 200
    done = producer.post(cancel, content=b"{}", headers=json_type)
    assert done.status_code == 200 and done.json()["status"] == "cancelled"


def test_json_with_charset_is_accepted(producer: Api) -> None:
    response = producer.post(
        "/jobs",
        content=b'{"type": "noop"}',
        headers={"Content-Type": "application/json; charset=utf-8"},
    )
    assert response.status_code == 201
    for media in ("application/vnd.shop+json", "Application/JSON"):
        body = b'{"type": "noop"}'
        answer = producer.post("/jobs", content=body, headers={"Content-Type": media})
        assert answer.status_code == 201, media
    for media in ("text/json", "application/jsonx", "application/x-www-form-urlencoded"):
        answer = producer.post("/jobs", content=b"{}", headers={"Content-Type": media})
        assert answer.status_code == 415, media


def test_malformed_json_is_422_validation(producer: Api) -> None:
    response = producer.post(
        "/jobs", content=b'{"type": "noop",', headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 422
    assert response.json()["type"] == "validation"
    assert response.headers["content-type"] == "application/problem+json"


def test_body_over_the_limit_is_413_before_parsing(producer: Api) -> None:
    big = b'{"type": "noop", "payload": {"x": "' + b"a" * 1_100_000 + b'"}}'
    response = producer.post("/jobs", content=big, headers={"Content-Type": "application/json"})
    assert response.status_code == 413 and response.json()["type"] == "body-too-large"


def test_streamed_body_over_the_limit_is_413(producer: Api) -> None:
    def chunks() -> object:
        yield b'{"type": "noop", "payload": {"x": "'
        for _ in range(20):
            yield b"a" * 65_536
        yield b'"}}'

    response = producer.post(
        "/jobs", content=chunks(), headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 413 and response.json()["type"] == "body-too-large"


def test_a_declared_length_with_chunked_encoding_is_still_counted() -> None:
    # Some HTTP parsers frame such a body by its chunks, whatever Content-Length says.
    read: list[bytes] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            read.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    chunks = [b"x" * 60, b"x" * 60, b"x" * 60]

    async def receive() -> dict[str, Any]:
        body = chunks.pop(0)
        return {"type": "http.request", "body": body, "more_body": bool(chunks)}

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    headers = [
        (b"content-length", b"10"),
        (b"transfer-encoding", b"chunked"),
        (b"content-type", b"application/json"),
    ]
    scope = {"type": "http", "method": "POST", "path": "/jobs", "headers": headers}
    asyncio.run(BodyLimitMiddleware(app, max_bytes=100)(scope, receive, send))
    assert sent[0]["status"] == 413 and sum(map(len, read)) <= 120


def test_unknown_route_and_method_are_problems(producer: Api) -> None:
    missing = producer.get("/nowhere")
    assert missing.status_code == 404 and missing.json()["type"] == "not-found"
    wrong = producer.request("PUT", "/jobs")
    assert wrong.status_code == 405 and wrong.json()["type"] == "method-not-allowed"


def test_internal_error_reveals_no_trace_sql_or_path(
    producer: Api, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = enqueue(producer)
    service = client.app.state.queuelog.service  # type: ignore[attr-defined]

    def broken(job_id: int) -> None:
        raise sqlite3.OperationalError(
            "no such column: secret_col in SELECT * FROM jobs WHERE id = ? "
            "(/var/lib/queuelog/data/queuelog.db)"
        )

    monkeypatch.setattr(service.storage, "job_get", broken)
    response = producer.get(f"/jobs/{job['id']}")
    assert response.status_code == 500
    body = response.json()
    assert body == {
        "type": "internal",
        "title": "Internal server error",
        "status": 500,
        "detail": "The server could not do this",
    }
    for leak in ["SELECT", "secret_col", "/var/lib", "Traceback", "sqlite3"]:
        assert leak not in response.text


def test_rate_limit_is_429_with_retry_after(tmp_path: Path, clock: FakeClock) -> None:
    settings = make_settings(tmp_path, limits={"rate_per_second": 1, "rate_burst": 3})
    path = settings.sqlite_path
    assert path is not None
    storage = SqliteStorage(path)
    app = create_app(settings, storage=storage, clock=clock, run_maintenance=False)
    with TestClient(app) as client:
        _, key = run_blocking(KeyRing(storage, clock).create("busy", frozenset({Role.PRODUCER})))
        _, other = run_blocking(KeyRing(storage, clock).create("calm", frozenset({Role.PRODUCER})))
        busy = Api(client, key)
        statuses = [busy.get("/jobs").status_code for _ in range(4)]
        assert statuses == [200, 200, 200, 429]
        limited = busy.get("/jobs")
        assert limited.json()["type"] == "rate-limited"
        assert int(limited.headers["retry-after"]) >= 1
        assert Api(client, other).get("/jobs").status_code == 200


@contextmanager
def producer_under(tmp_path: Path, clock: FakeClock, limits: dict[str, int]) -> Iterator[Api]:
    """A producer's client of an app with these ``[limits]`` (and no rate limit)."""
    settings = make_settings(tmp_path, limits={**limits, "rate_per_second": 0})
    path = settings.sqlite_path
    assert path is not None
    app = create_app(settings, storage=SqliteStorage(path), clock=clock, run_maintenance=False)
    with TestClient(app) as client:
        storage = app.state.queuelog.service.storage
        _, key = run_blocking(KeyRing(storage, clock).create("p", frozenset({Role.PRODUCER})))
        yield Api(client, key)


def test_hardening_108_a_payload_at_its_limit_fits_in_a_request_beside_the_rest(
    tmp_path: Path, clock: FakeClock
) -> None:
    # The tightest limits the config takes: a payload at its limit, with the longest key
    # and group, is a request the server reads (201), not 413 body-too-large.
    limits = {"max_request_bytes": 8192, "max_payload_bytes": 4096, "max_result_bytes": 4096}
    with producer_under(tmp_path, clock, limits) as api:
        long = {"idempotency_key": "k" * 255, "group": "g" * 128, "unique_key": "u" * 255}
        at_limit = {"type": "noop", "payload": {"x": "a" * (4096 - 8)}, **long}
        assert api.post("/jobs", json=at_limit).status_code == 201
        over = api.post("/jobs", json={**at_limit, "payload": {"x": "a" * 4096}})
        assert over.status_code == 422 and over.json()["type"] == "payload-too-large"


def test_payload_limit_is_configurable(tmp_path: Path, clock: FakeClock) -> None:
    with producer_under(tmp_path, clock, {"max_payload_bytes": 100}) as api:
        fits = api.post("/jobs", json={"type": "noop", "payload": {"x": "a" * 80}})
        assert fits.status_code == 201
        over = api.post("/jobs", json={"type": "noop", "payload": {"x": "a" * 100}})
        assert over.status_code == 422 and over.json()["type"] == "payload-too-large"
        # The limit counts the compact JSON's UTF-8 bytes: {"x":"..."} is 8 bytes plus
        # 2 per "é". The payload is stored as that text and read back unchanged.
        edge = {"x": "é" * 46}
        at_limit = api.post("/jobs", json={"type": "noop", "payload": edge})
        assert at_limit.status_code == 201, at_limit.text
        assert api.get(f"/jobs/{at_limit.json()['id']}").json()["payload"] == edge
        batch = api.post("/jobs/batch", json={"jobs": [{"type": "noop", "payload": edge}] * 2})
        assert batch.status_code == 200, batch.text
        one_more = api.post("/jobs", json={"type": "noop", "payload": {"x": "é" * 47}})
        assert one_more.json()["type"] == "payload-too-large"


@pytest.mark.parametrize(
    "raw",
    [
        b'{"type": "noop", "payload": {"x": NaN}}',
        b'{"type": "noop", "payload": {"x": Infinity}}',
        b'{"type": "noop", "payload": {"x": 1e999}}',
        b'{"type": "noop", "payload": {"x": "\\ud800"}}',
        b'{"type": "noop", "payload": {"\\udfff": 1}}',
    ],
)
def test_payloads_json_cannot_carry_back_are_422(producer: Api, admin: Api, raw: bytes) -> None:
    response = producer.post("/jobs", content=raw, headers={"Content-Type": "application/json"})
    assert response.status_code == 422 and response.json()["type"] == "validation"
    assert admin.get("/jobs").json()["jobs"] == []


@pytest.mark.parametrize("literal", [b"NaN", b"Infinity", b"-Infinity"])
def test_a_number_field_that_is_not_finite_is_said_so(producer: Api, literal: bytes) -> None:
    raw = b'{"type": "noop", "payload": {}, "delay_seconds": %s}' % literal
    response = producer.post("/jobs", content=raw, headers={"Content-Type": "application/json"})
    assert response.status_code == 422 and response.json()["type"] == "validation"
    (error,) = response.json()["errors"]
    assert error["loc"] == ["body", "delay_seconds"] and "finite" in error["msg"]


def test_non_finite_result_is_422_and_the_job_stays_running(
    producer: Api, worker: Api, admin: Api
) -> None:
    job = enqueue(producer)
    held = worker.post("/jobs/claim", json={}).json()["jobs"][0]
    raw = b'{"lease_token": "%s", "result": {"v": NaN}}' % held["lease_token"].encode()
    response = worker.post(
        f"/jobs/{job['id']}/complete", content=raw, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 422
    assert admin.get(f"/jobs/{job['id']}").json()["status"] == "running"


@pytest.mark.parametrize(
    "raw",
    [
        b'{"type": "noop", "payload": ' + b"[" * 5000 + b"]" * 5000 + b"}",
        b'{"n": 1' + b"1" * 5000 + b"}",
    ],
)
def test_json_too_deep_or_numbers_too_long_are_422(producer: Api, raw: bytes) -> None:
    response = producer.post("/jobs", content=raw, headers={"Content-Type": "application/json"})
    assert response.status_code == 422 and response.json()["type"] == "validation"


def test_405_names_the_allowed_methods(producer: Api) -> None:
    response = producer.request("PUT", "/jobs/claim")
    assert response.status_code == 405 and response.headers["allow"] == "POST"
    literal = producer.get("/jobs/claim")  # never taken for a job id
    assert literal.status_code == 405 and literal.json()["type"] == "method-not-allowed"


def test_an_unreachable_database_is_503_unavailable(
    producer: Api, client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = client.app.state.queuelog.service  # type: ignore[attr-defined]

    def unreachable(job_id: int) -> None:
        raise StorageUnavailable("The database cannot be reached")

    monkeypatch.setattr(service.storage, "job_get", unreachable)
    response = producer.get("/jobs/1")
    assert response.status_code == 503
    assert response.json()["type"] == "unavailable"


def test_an_internal_error_is_answered_and_logged_once_not_raised_to_the_server(
    settings: Settings, clock: FakeClock, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    path = settings.sqlite_path
    assert path is not None
    storage = SqliteStorage(path)
    app = create_app(settings, storage=storage, clock=clock, run_maintenance=False)
    _, key = run_blocking(KeyRing(storage, clock).create("shop", frozenset({Role.PRODUCER})))

    def broken(job_id: int) -> None:
        raise RuntimeError("deep inside")

    # Raised past the app, an exception makes the server log its whole traceback and
    # drop the connection; TestClient would raise it here.
    with TestClient(app, raise_server_exceptions=True) as client:
        created = client.post("/jobs", json={"type": "noop"}, headers=_bearer(key))
        storage.job_get = broken  # type: ignore[method-assign]
        with caplog.at_level(logging.ERROR):
            answer = client.get(f"/jobs/{created.json()['id']}", headers=_bearer(key))
        assert answer.status_code == 500 and answer.json()["type"] == "internal"
        assert client.get("/healthz").status_code == 200
    records = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(records) == 1 and "RuntimeError" in records[0].getMessage()


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.mark.parametrize(
    ("who", "path", "body", "says"),
    [
        ("admin", "/schedules", {"name": "Nightly"}, "1-64 of a-z 0-9 _ . -, not . or .."),
        ("admin", "/schedules", {"cron": "0 3 * *"}, "five fields of ASCII (minute hour day"),
        ("worker", "/jobs/claim", {"instance": "a b"}, "1-64 of A-Z a-z 0-9 . _ -"),
        ("producer", "/jobs", {"group": ""}, "1-128 printable ASCII characters"),
        ("producer", "/jobs", {"idempotency_key": "é"}, "1-255 printable ASCII characters"),
        ("admin", "/keys", {"name": "a b"}, "1-64 of A-Z a-z 0-9 . _ : @ -"),
    ],
)
def test_a_field_off_its_pattern_is_422_saying_it_in_words(
    producer: Api, worker: Api, admin: Api, who: str, path: str, body: dict[str, Any], says: str
) -> None:
    api = {"producer": producer, "worker": worker, "admin": admin}[who]
    defaults = {
        "/schedules": {"name": "tick", "cron": "0 3 * * *", "type": "noop"},
        "/jobs/claim": {"types": ["noop"]},
        "/jobs": {"type": "noop", "payload": {}},
        "/keys": {"name": "k", "roles": ["producer"]},
    }[path]
    response = api.post(path, json={**defaults, **body})
    assert response.status_code == 422, response.text
    (error,) = response.json()["errors"]
    assert error["loc"][-1] == next(iter(body))
    assert error["msg"].startswith("String should be ") and says in error["msg"]
    assert "[" not in error["msg"]  # no regular expression


def test_a_check_of_a_request_says_its_words_without_pydantics_prefix(producer: Api) -> None:
    body = {"type": "noop", "payload": {}, "run_at": "2030-01-01T00:00:00Z", "delay_seconds": 5}
    response = producer.post("/jobs", json=body)
    assert response.status_code == 422, response.text
    messages = [e["msg"] for e in response.json()["errors"]]
    assert messages and not [m for m in messages if m.startswith("Value error")], messages
    assert any("run_at or delay_seconds" in m for m in messages), messages
