"""``[server] otel``: OpenTelemetry's ASGI instrumentation makes a SERVER span per request,
the child of the caller's ``traceparent``, named by its route; off by default."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from opentelemetry.trace import SpanKind

from queuelog.api.app import create_app
from queuelog.clock import FakeClock
from queuelog.config import load_settings
from queuelog.models import Role
from queuelog.storage.sqlite.store import SqliteStorage
from tests.conftest import Api, make_settings, run_blocking
from tests.realserver import RealServer, closing
from tests.spans import InMemorySpanExporter

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def _client(tmp_path: Path, otel: bool) -> Iterator[tuple[Api, Api]]:
    from queuelog.auth import KeyRing

    settings = make_settings(tmp_path, server={"otel": otel})
    assert settings.sqlite_path is not None
    storage = SqliteStorage(settings.sqlite_path)
    clock = FakeClock()
    app = create_app(settings, storage=storage, clock=clock, run_maintenance=False)
    ring = KeyRing(storage, clock)
    _, producer = run_blocking(ring.create("shop", frozenset({Role.PRODUCER})))
    _, worker = run_blocking(ring.create("mailer", frozenset({Role.WORKER})))
    with TestClient(app, raise_server_exceptions=False) as client:
        yield Api(client, producer), Api(client, worker)


@pytest.fixture
def traced(tmp_path: Path) -> Iterator[tuple[Api, Api]]:
    yield from _client(tmp_path, otel=True)


@pytest.fixture
def untraced(tmp_path: Path) -> Iterator[tuple[Api, Api]]:
    yield from _client(tmp_path, otel=False)


def test_each_request_is_a_server_span_named_by_its_route(
    traced: tuple[Api, Api], spans: InMemorySpanExporter
) -> None:
    producer, worker = traced
    answer = producer.post("/jobs", json={"type": "noop"}, headers={"traceparent": PARENT})
    assert answer.status_code == 201
    (job,) = worker.post("/jobs/claim", json={}).json()["jobs"]
    assert job["trace_context"]["traceparent"] == PARENT  # the caller's, not the server's
    done = {"lease_token": job["lease_token"]}
    assert worker.post(f"/jobs/{job['id']}/complete", json=done).status_code == 200
    assert producer.get("/healthz").status_code == 200  # probes make no span
    found = {s.name: s for s in spans.get_finished_spans()}
    assert set(found) == {"POST /jobs", "POST /jobs/claim", "POST /jobs/{job_id}/complete"}
    enqueue = found["POST /jobs"]
    assert enqueue.kind is SpanKind.SERVER
    assert enqueue.parent is not None and enqueue.parent.span_id == int(PARENT[36:52], 16)
    assert enqueue.context.trace_id == int(PARENT[3:35], 16)
    assert dict(enqueue.attributes or {})["http.route"] == "/jobs"
    assert found["POST /jobs/claim"].parent is None  # no traceparent: a trace of its own


def test_without_the_setting_no_request_is_traced(
    untraced: tuple[Api, Api], spans: InMemorySpanExporter
) -> None:
    producer, _ = untraced
    answer = producer.post("/jobs", json={"type": "noop"}, headers={"traceparent": PARENT})
    assert answer.status_code == 201
    assert spans.get_finished_spans() == ()


def test_the_setting_comes_from_the_file_then_the_environment(tmp_path: Path) -> None:
    path = tmp_path / "q.toml"
    path.write_text("[server]\notel = true\n")
    assert load_settings(environ={}).server.otel is False
    assert load_settings(path, environ={}).server.otel is True
    assert load_settings(path, environ={"QUEUELOG_OTEL": "false"}).server.otel is False


@pytest.mark.slow
def test_serve_otel_serves_traced_requests(tmp_path: Path) -> None:
    with closing(RealServer(tmp_path, serve_args=["--otel"])) as real:
        key = real.create_key("shop", "producer")
        real.start()
        with real.client(key) as client:
            sent = client.post("/jobs", json={"type": "noop"}, headers={"traceparent": PARENT})
        assert sent.status_code == 201
