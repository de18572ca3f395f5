"""The hottest routes answer the same whether the fast lane or the FastAPI route serves them."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

import fastapi.routing
import pytest
from fastapi.testclient import TestClient

from queuelog.api.app import create_app
from queuelog.clock import FakeClock
from queuelog.config import Settings
from queuelog.storage.base import Storage
from tests.conftest import KeyMaker

# Headers an answer may carry that a client relies on.
_HEADERS = ("content-type", "location", "www-authenticate", "retry-after", "preference-applied")
# Fields that differ between two jobs made by the same request.
_PER_JOB = ("id", "run_at", "created_at", "updated_at")
_JSON = {"Content-Type": "application/json"}


@pytest.fixture
def both(
    settings: Settings, storage: Storage, clock: FakeClock
) -> Iterator[tuple[TestClient, TestClient]]:
    """Two apps on one storage: with the fast lane, and with the route alone."""
    fast = create_app(settings, storage=storage, clock=clock, run_maintenance=False)
    plain = create_app(
        settings, storage=storage, clock=clock, run_maintenance=False, fast_lane=False
    )
    # Only one of them may close the shared storage.
    plain.router.lifespan_context = _no_lifespan
    with (
        TestClient(fast, raise_server_exceptions=False) as a,
        TestClient(plain, raise_server_exceptions=False) as b,
    ):
        yield a, b


class _no_lifespan:  # noqa: N801 - used as a context-manager factory
    def __init__(self, _: Any) -> None:
        pass

    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *_: object) -> None:
        return None


def _answer(response: Any) -> tuple[int, dict[str, str], Any]:
    headers = {h: response.headers[h] for h in _HEADERS if h in response.headers}
    body = response.json()
    if response.status_code in (200, 201):
        headers.pop("location")
        body = {k: v for k, v in body.items() if k not in _PER_JOB}
    return response.status_code, headers, body


def _cases(keys: dict[str, str]) -> list[tuple[str, dict[str, str], bytes]]:
    """(name, headers, body) requests that exercise every answer of POST /jobs."""
    producer = {"Authorization": f"Bearer {keys['producer']}"}
    json_type = {"Content-Type": "application/json"}
    p = {**producer, **json_type}
    return [
        ("created", p, b'{"type": "send_email", "payload": {"to": "a@b.c"}}'),
        ("priority", p, b'{"type": "noop", "priority": "HIGH", "delay_seconds": 5}'),
        ("above max priority", p, b'{"type": "noop", "priority": "critical"}'),
        ("no key", json_type, b'{"type": "noop"}'),
        ("other scheme", {**json_type, "Authorization": "Basic abc"}, b'{"type": "noop"}'),
        ("bad key", {**json_type, "Authorization": "Bearer ql_nope"}, b'{"type": "noop"}'),
        ("worker key", {**json_type, "Authorization": f"Bearer {keys['worker']}"}, b"{}"),
        (
            "admin key",
            {**json_type, "Authorization": f"Bearer {keys['admin']}"},
            b'{"type":"noop"}',
        ),
        ("no content type", producer, b'{"type": "noop"}'),
        ("malformed json", p, b'{"type": "noop"'),
        ("not an object", p, b"[1, 2]"),
        ("empty body", p, b""),
        ("missing type", p, b'{"payload": {}}'),
        ("extra field", p, b'{"type": "noop", "colour": "red"}'),
        ("unknown type", p, b'{"type": "nope"}'),
        ("schema", p, b'{"type": "send_email", "payload": {"to": 5}}'),
        ("too deep", p, b'{"type": "noop", "payload": {"a": ' + b"[" * 5000 + b"]" * 5000 + b"}}"),
        ("nan", p, b'{"type": "noop", "payload": {"x": NaN}}'),
        ("lone surrogate", p, b'{"type": "noop", "payload": {"x": "\\ud800"}}'),
        ("huge int", p, b'{"type": "noop", "payload": {"x": 123456789012345678901234567890}}'),
        ("floats", p, b'{"type": "noop", "payload": {"x": [0.1, 1e-7, 2.5e300, -0.0, 1E2]}}'),
        ("repeated name", p, b'{"type": "noop", "payload": {"x": 1, "x": 2}}'),
        ("byte order mark", p, b'\xef\xbb\xbf{"type": "noop"}'),
        (
            "both schedules",
            p,
            b'{"type": "noop", "delay_seconds": 1, "run_at": "2030-01-01T00:00:00Z"}',
        ),
        ("header key", {**p, "Idempotency-Key": "order-1"}, b'{"type": "noop"}'),
        ("header key again", {**p, "Idempotency-Key": "order-1"}, b'{"type": "noop"}'),
        ("header key reused", {**p, "Idempotency-Key": "order-1"}, b'{"type": "resize_image"}'),
        (
            "header and body differ",
            {**p, "Idempotency-Key": "order-2"},
            b'{"type": "noop", "idempotency_key": "order-3"}',
        ),
        ("header key not ascii", {**p, "Idempotency-Key": "caf\xe9"}, b'{"type": "noop"}'),
        ("header key empty", {**p, "Idempotency-Key": ""}, b'{"type": "noop"}'),
        ("body key", p, b'{"type": "noop", "idempotency_key": "order-4"}'),
        ("body key again", p, b'{"type": "noop", "idempotency_key": "order-4"}'),
    ]


def test_every_answer_is_the_same_with_and_without_the_fast_lane(
    both: tuple[TestClient, TestClient], make_key: KeyMaker
) -> None:
    shared = {"worker": make_key("mailer", "worker")[1], "admin": make_key("root", "admin")[1]}
    answers = []
    # Each app has its own producer: idempotency keys are scoped to the principal,
    # so each app's repeated requests meet only its own earlier ones.
    for app, name in zip(both, ("shop-a", "shop-b"), strict=True):
        keys = {**shared, "producer": make_key(name, "producer", max_priority="high")[1]}
        seen = []
        for case, headers, body in _cases(keys):
            encoded = {k: v.encode("latin-1") for k, v in headers.items()}
            response = app.post("/jobs", content=body, headers=encoded)
            seen.append((case, _answer(response)))
        answers.append(seen)
    for (case, got), (_, expected) in zip(*answers, strict=True):
        assert got == expected, case
    statuses = {case: answer[0] for case, answer in answers[0]}
    # The cases reach every answer the route has.
    assert set(statuses.values()) == {200, 201, 401, 403, 415, 422}
    assert statuses["header key again"] == 200 and statuses["header key reused"] == 422


_HELD = (*_PER_JOB, "lease_token", "claimed_at", "lease_expires_at", "worker_id")


def _normalised(value: Any) -> Any:
    """A worker route's answer without what differs between two runs of the same requests."""
    if isinstance(value, list):
        return [_normalised(v) for v in value]
    if isinstance(value, dict):
        return {k: _normalised(v) for k, v in value.items() if k not in _HELD}
    return value


def _worker_run(app: TestClient, make_key: KeyMaker, suffix: str) -> list[tuple[str, Any]]:
    """Enqueue three jobs, then claim and complete them through every answer of the routes."""
    producer = {"Authorization": f"Bearer {make_key('shop-' + suffix, 'producer')[1]}"}
    mailer = make_key("mailer-" + suffix, "worker", types=["noop"])[1]
    worker = {"Authorization": f"Bearer {mailer}", "Content-Type": "application/json"}
    for _ in range(5):
        assert app.post("/jobs", json={"type": "noop"}, headers=producer).status_code == 201
    seen: list[tuple[str, Any]] = []

    def post(case: str, path: str, headers: dict[str, str], body: bytes) -> Any:
        response = app.post(path, content=body, headers=headers)
        kept = {h: response.headers[h] for h in _HEADERS if h in response.headers}
        seen.append((case, (response.status_code, kept, _normalised(response.json()))))
        return response.json()

    claim = "/jobs/claim"
    post("claim, no key", claim, {"Content-Type": "application/json"}, b"{}")
    post("claim, producer key", claim, {**producer, "Content-Type": "application/json"}, b"{}")
    post("claim, no content type", claim, {"Authorization": worker["Authorization"]}, b"{}")
    post("claim, bad json", claim, worker, b"{")
    post("claim, limit 0", claim, worker, b'{"limit": 0}')
    nulled = post("claim, null", claim, worker, b"null")  # the route reads null as {}
    post("claim, unknown type", claim, worker, b'{"types": ["nope"]}')
    post("claim, type not allowed", claim, worker, b'{"types": ["send_email"]}')
    first = post("claim, empty body", claim, {"Authorization": worker["Authorization"]}, b"")
    rest = post("claim, limit 5", claim, worker, b'{"limit": 5, "instance": "i-1"}')
    post("claim, nothing left", claim, worker, b'{"wait_seconds": 0.05}')
    held = nulled["jobs"] + first["jobs"] + rest["jobs"]
    assert len(held) == 5
    done = "/jobs/batch/complete"
    items = [
        {"id": held[0]["id"], "lease_token": held[0]["lease_token"], "result": {"ok": 1}},
        {"id": held[1]["id"], "lease_token": "stale"},
        {"id": 10**12, "lease_token": "t"},
        {"id": held[2]["id"], "lease_token": held[2]["lease_token"]},
    ]
    post("complete, no key", done, {"Content-Type": "application/json"}, b"{}")
    post("complete, producer key", done, {**producer, "Content-Type": "application/json"}, b"{}")
    post("complete, no content type", done, {"Authorization": worker["Authorization"]}, b"{}")
    post("complete, no items", done, worker, b'{"items": []}')
    post("complete, bad json", done, worker, b'{"items": [')
    post("complete, items", done, worker, json.dumps({"items": items}).encode())
    post("complete, again", done, worker, json.dumps({"items": items[:1]}).encode())
    minimal = {**worker, "Prefer": "respond-async, return=minimal"}
    one = [{"id": held[3]["id"], "lease_token": held[3]["lease_token"]}]
    post("complete, minimal one", done, minimal, json.dumps({"items": one}).encode())
    many = [
        {"id": held[4]["id"], "lease_token": held[4]["lease_token"], "result": {"ok": 2}},
        {"id": held[1]["id"], "lease_token": "stale"},
        {"id": held[3]["id"], "lease_token": held[3]["lease_token"]},
    ]
    post("complete, minimal", done, minimal, json.dumps({"items": many}).encode())
    return seen


def test_the_worker_routes_answer_the_same_with_and_without_the_fast_lane(
    both: tuple[TestClient, TestClient], make_key: KeyMaker
) -> None:
    fast = _worker_run(both[0], make_key, "a")
    plain = _worker_run(both[1], make_key, "b")
    for (case, got), (_, expected) in zip(fast, plain, strict=True):
        assert got == expected, case
    statuses = {case: answer[0] for case, answer in fast}
    assert set(statuses.values()) == {200, 401, 403, 415, 422}
    results = dict(fast)["complete, items"][2]["results"]
    assert [r["status"] for r in results] == [200, 409, 404, 200]
    _, headers, body = dict(fast)["complete, minimal"]
    assert headers["preference-applied"] == "return=minimal"
    # Ids are left out of the comparison; no item carries a job.
    assert body["results"] == [
        {"status": 200},
        {"status": 409, "type": "not-lease-holder"},
        {"status": 409, "type": "invalid-state"},
    ]


def test_repeated_content_types_and_streamed_bodies_answer_alike(
    both: tuple[TestClient, TestClient], make_key: KeyMaker
) -> None:
    shared = {"producer": make_key("shop", "producer")[1], "worker": make_key("w", "worker")[1]}

    def chunks() -> Iterator[bytes]:
        yield b'{"type": "noop", "payload": {"x": "'
        for _ in range(20):
            yield b"a" * 65_536
        yield b'"}}'

    answers = []
    for app in both:
        seen = []
        for path, role in (("/jobs", "producer"), ("/jobs/claim", "worker")):
            # The first Content-Type is the one that counts, for the lane as for the route.
            headers = [
                ("authorization", f"Bearer {shared[role]}"),
                ("content-type", "text/plain"),
                ("content-type", "application/json"),
            ]
            response = app.post(path, content=b'{"type": "noop"}', headers=headers)
            seen.append((path, response.status_code, response.content))
        headers = [("authorization", f"Bearer {shared['producer']}")]
        headers.append(("content-type", "application/json"))
        big = app.post("/jobs", content=chunks(), headers=headers)
        seen.append(("streamed", big.status_code, big.content))
        answers.append(seen)
    assert answers[0] == answers[1]
    assert [status for _, status, _ in answers[0]] == [415, 415, 413]


def test_valid_requests_are_served_by_the_lanes_without_the_routes(
    both: tuple[TestClient, TestClient],
    make_key: KeyMaker,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fast, _ = both
    reached: list[str] = []
    real = fastapi.routing.solve_dependencies

    async def counted(*args: Any, **kwargs: Any) -> Any:
        request = kwargs.get("request") or args[0]
        reached.append(request.url.path)
        return await real(*args, **kwargs)

    # Every FastAPI route solves its dependencies; a lane does not.
    monkeypatch.setattr(fastapi.routing, "solve_dependencies", counted)
    producer = {"Authorization": f"Bearer {make_key('shop', 'producer')[1]}"}
    worker = {"Authorization": f"Bearer {make_key('mailer', 'worker')[1]}"}
    assert fast.post("/jobs", json={"type": "noop"}, headers=producer).status_code == 201
    (job,) = fast.post("/jobs/claim", json={}, headers=worker).json()["jobs"]
    items = [{"id": job["id"], "lease_token": job["lease_token"]}]
    done = fast.post("/jobs/batch/complete", json={"items": items}, headers=worker).json()
    assert done["results"][0]["status"] == 200
    assert reached == []
    # A request a lane does not serve reaches its route, with its body intact.
    bad = fast.post("/jobs", json={"type": "noop"}, headers={**producer, "Idempotency-Key": ""})
    assert bad.status_code == 422 and reached == ["/jobs"]
    assert fast.post("/jobs/batch", json={"jobs": [{"type": "noop"}]}, headers=producer).is_success
    assert reached == ["/jobs", "/jobs/batch"]
    # The lane reads every value as the route's parser does, to the bit.
    exact = b'{"type": "noop", "payload": {"n": 123456789012345678901234567890, "f": 0.1}}'
    served = fast.post("/jobs", content=exact, headers={**producer, **_JSON})
    assert served.status_code == 201 and reached == ["/jobs", "/jobs/batch"]
    stored = fast.get(f"/jobs/{served.json()['id']}", headers=producer).json()["payload"]
    assert stored == json.loads(exact)["payload"]
    assert type(stored["n"]) is int and stored["f"] == 0.1


def test_the_lane_counts_its_requests_under_the_route_name(
    both: tuple[TestClient, TestClient], make_key: KeyMaker
) -> None:
    fast, _ = both
    headers = {"Authorization": f"Bearer {make_key('shop', 'producer')[1]}"}
    admin = {"Authorization": f"Bearer {make_key('root', 'admin')[1]}"}
    for _ in range(3):
        assert fast.post("/jobs", json={"type": "noop"}, headers=headers).status_code == 201
    assert fast.post("/jobs", json={"type": "nope"}, headers=headers).status_code == 422
    metrics = fast.get("/metrics", headers=admin).text
    line = 'queuelog_http_requests_total{method="POST",route="/jobs",status="201"} 3.0'
    assert line in metrics
    assert 'route="/jobs",status="422"} 1.0' in metrics


def test_a_rate_limited_key_is_refused_once_per_request(
    tmp_path: Any, clock: FakeClock, make_key: Callable[..., Any], storage: Storage
) -> None:
    from tests.conftest import make_settings

    settings = make_settings(tmp_path, limits={"rate_per_second": 1, "rate_burst": 2})
    app = create_app(settings, storage=storage, clock=clock, run_maintenance=False)
    headers = {"Authorization": f"Bearer {make_key('shop', 'producer')[1]}"}
    with TestClient(app, raise_server_exceptions=False) as client:
        codes = [client.post("/jobs", json={"type": "noop"}, headers=headers) for _ in range(3)]
    assert [r.status_code for r in codes] == [201, 201, 429]
    assert codes[2].json()["type"] == "rate-limited" and "retry-after" in codes[2].headers


def test_an_unexpected_failure_in_a_lane_is_the_app_s_500_and_is_logged(
    both: tuple[TestClient, TestClient],
    make_key: KeyMaker,
    storage: Storage,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def broken(*_: Any, **__: Any) -> None:
        raise RuntimeError("no such column: secret_col in SELECT (/var/lib/queuelog/q.db)")

    monkeypatch.setattr(storage, "job_insert_many_async", broken)
    headers = {"Authorization": f"Bearer {make_key('shop', 'producer')[1]}"}
    admin = {"Authorization": f"Bearer {make_key('root', 'admin')[1]}"}
    fast, plain = both
    with caplog.at_level(logging.ERROR, logger="queuelog.api"):
        served = fast.post("/jobs", json={"type": "noop"}, headers=headers)
    expected = plain.post("/jobs", json={"type": "noop"}, headers=headers)
    assert served.status_code == expected.status_code == 500
    assert served.json() == expected.json() and served.json()["type"] == "internal"
    assert served.headers["content-type"] == expected.headers["content-type"]
    for leak in ("secret_col", "SELECT", "/var/lib", "Traceback"):
        assert leak not in served.text
    assert any("secret_col" in r.getMessage() for r in caplog.records)
    metrics = fast.get("/metrics", headers=admin).text
    assert 'queuelog_http_requests_total{method="POST",route="/jobs",status="500"} 1.0' in metrics


def test_a_lane_hands_a_body_over_the_limit_or_without_a_length_to_the_app(
    both: tuple[TestClient, TestClient], make_key: KeyMaker, settings: Any
) -> None:
    fast, _ = both
    headers = {
        "Authorization": f"Bearer {make_key('shop', 'producer')[1]}",
        "Content-Type": "application/json",
    }
    limit = settings.limits.max_request_bytes
    big = b'{"type": "noop", "payload": {"x": "' + b"a" * limit + b'"}}'
    over = fast.post("/jobs", content=big, headers=headers)
    assert over.status_code == 413 and over.json()["type"] == "body-too-large"

    def streamed() -> Iterator[bytes]:
        yield b'{"type": "noop"}'

    chunked = fast.post("/jobs", content=streamed(), headers=headers)
    assert chunked.status_code == 201  # the app's route served it


@pytest.mark.parametrize(
    "headers",
    [
        [(b"content-length", b"99999999"), (b"content-type", b"application/json")],
        [(b"transfer-encoding", b"chunked"), (b"content-type", b"application/json")],
        [(b"content-length", b"16")],  # a body without a content type: the app's 415
    ],
    ids=["over the limit", "no length", "no content type"],
)
def test_what_a_lane_may_not_serve_reaches_the_app_unread(
    both: tuple[TestClient, TestClient], make_key: KeyMaker, headers: list[tuple[bytes, bytes]]
) -> None:
    fast, _ = both
    first = {"type": "http.request", "body": b'{"type": ', "more_body": True}
    last = {"type": "http.request", "body": b'"noop"}', "more_body": False}
    pending = [first, last]
    reached: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return pending.pop(0)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        reached.append(await receive())
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    lane = fast.app.front(app)  # type: ignore[attr-defined]
    auth = (b"authorization", f"Bearer {make_key('shop', 'producer')[1]}".encode())
    scope = {"type": "http", "method": "POST", "path": "/jobs", "headers": [auth, *headers]}
    asyncio.run(lane(scope, receive, send))
    assert reached == [first] and reached[0] is first  # the app read the body, the lane did not
    assert sent[0]["status"] == 204


def test_an_unexpected_failure_while_a_lane_checks_a_request_is_the_app_s_500(
    both: tuple[TestClient, TestClient],
    make_key: KeyMaker,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fast, _ = both
    state = fast.app.state.queuelog  # type: ignore[attr-defined]

    def broken(token: str) -> None:
        raise RuntimeError("disk I/O error reading /var/lib/queuelog/q.db")

    headers = {"Authorization": f"Bearer {make_key('shop', 'producer')[1]}"}
    admin = {"Authorization": f"Bearer {make_key('root', 'admin')[1]}"}
    with monkeypatch.context() as patch:
        patch.setattr(state.keys, "authenticate", broken)
        response = fast.post("/jobs", json={"type": "noop"}, headers=headers)
    assert response.status_code == 500 and response.json()["type"] == "internal"
    assert response.headers["content-type"] == "application/problem+json"
    assert "/var/lib" not in response.text and "disk" not in response.text
    metrics = fast.get("/metrics", headers=admin).text
    assert 'queuelog_http_requests_total{method="POST",route="/jobs",status="500"} 1.0' in metrics
