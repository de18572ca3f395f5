"""``POST /jobs`` answers the same whether the fast lane or the FastAPI route serves it."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from queuelog.api.app import create_app
from queuelog.clock import FakeClock
from queuelog.config import Settings
from queuelog.service import JobService
from queuelog.storage.base import Storage
from tests.conftest import KeyMaker

# Headers an answer may carry that a client relies on.
_HEADERS = ("content-type", "location", "www-authenticate", "retry-after")
# Fields that differ between two jobs made by the same request.
_PER_JOB = ("id", "run_at", "created_at", "updated_at")


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
    assert set(statuses.values()) == {200, 201, 401, 403, 422}
    assert statuses["header key again"] == 200 and statuses["header key reused"] == 422


def test_a_valid_enqueue_is_served_by_the_lane_not_the_route(
    both: tuple[TestClient, TestClient],
    make_key: KeyMaker,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fast, _ = both
    calls: list[str] = []
    real = JobService.enqueue_many

    def counted(self: JobService, *args: Any, **kwargs: Any) -> Any:
        calls.append("route")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(JobService, "enqueue_many", counted)
    headers = {"Authorization": f"Bearer {make_key('shop', 'producer')[1]}"}
    assert fast.post("/jobs", json={"type": "noop"}, headers=headers).status_code == 201
    assert calls == []
    # A request the lane does not serve reaches the route, with its body intact.
    response = fast.post("/jobs", json={"type": "noop"}, headers={**headers, "Idempotency-Key": ""})
    assert response.status_code == 422 and calls == []
    assert fast.post("/jobs/batch", json={"jobs": [{"type": "noop"}]}, headers=headers).is_success
    assert calls == ["route"]


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
