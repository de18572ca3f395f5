"""Property-based fuzzing from the OpenAPI description: no input makes the server fail."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import schemathesis
from fastapi import FastAPI
from hypothesis import HealthCheck, given, settings

from queuelog.api.app import create_app
from queuelog.auth import KeyRing
from queuelog.clock import FakeClock
from queuelog.models import Priority, Role
from queuelog.storage.sqlite.store import SqliteStorage
from tests.conftest import make_settings, run_blocking


@pytest.fixture
def fuzz_app(tmp_path: Path) -> Iterator[FastAPI]:
    config = make_settings(tmp_path)
    path = config.sqlite_path
    assert path is not None
    storage = SqliteStorage(path)
    clock = FakeClock()
    app = create_app(config, storage=storage, clock=clock, run_maintenance=False)
    _, key = run_blocking(
        KeyRing(storage, clock).create("everyone", frozenset(Role), Priority.CRITICAL)
    )
    app.state.fuzz_key = key
    yield app
    storage.close()


def test_no_request_makes_the_server_fail(fuzz_app: FastAPI) -> None:
    schema = schemathesis.openapi.from_asgi("/openapi.json", fuzz_app)
    headers = {"Authorization": f"Bearer {fuzz_app.state.fuzz_key}"}
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 18

    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
        def no_failure(case: schemathesis.Case) -> None:
            _short_waits(case)
            response = case.call(headers=headers, timeout=60)
            assert response.status_code < 500, (case.method, case.path, response.text)
            if response.status_code >= 400:
                assert response.headers["content-type"] == ["application/problem+json"]

        no_failure()


def _short_waits(case: schemathesis.Case) -> None:
    """A long poll or result wait shortened to a second: what is fuzzed is the input,
    and thirty seconds of waiting per example would only make the run long."""
    for fields in (case.body, case.query):
        wait = fields.get("wait_seconds") if isinstance(fields, dict) else None
        if isinstance(wait, int | float) and not isinstance(wait, bool) and wait > 1:
            fields["wait_seconds"] = 1
