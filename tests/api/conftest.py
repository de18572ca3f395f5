"""Fixtures for the API tests that look inside SQLite's group writer."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from queuelog.api.app import create_app
from queuelog.auth import KeyRing
from queuelog.clock import FakeClock
from queuelog.config import Settings
from queuelog.models import Role
from queuelog.storage.sqlite.store import SqliteStorage
from tests.conftest import Api, run_blocking


@pytest.fixture
def sqlite(settings: Settings) -> Iterator[SqliteStorage]:
    assert settings.sqlite_path is not None
    store = SqliteStorage(settings.sqlite_path)
    yield store
    store.close()


@pytest.fixture
def sqlite_app(
    settings: Settings, sqlite: SqliteStorage, clock: FakeClock
) -> Iterator[tuple[Any, Api, Api]]:
    """An app on ``sqlite``, with a producer's and a worker's client:
    ``(app, producer, worker)``."""
    app = create_app(settings, storage=sqlite, clock=clock, run_maintenance=False)
    ring = KeyRing(sqlite, clock)
    _, producer = run_blocking(ring.create("shop", frozenset({Role.PRODUCER})))
    _, worker = run_blocking(ring.create("mailer", frozenset({Role.WORKER})))
    with TestClient(app, raise_server_exceptions=False) as client:
        yield app, Api(client, producer), Api(client, worker)
