"""The storage conformance suite runs against every backend through one fixture."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from queuelog.storage.postgres.store import PostgresStorage
from queuelog.storage.protocol import Storage
from queuelog.storage.sqlite.store import SqliteStorage
from tests.postgres import fresh_schema

BACKENDS = ["sqlite", "postgres"]


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Storage]:
    """A fresh, migrated, empty store of each backend."""
    if request.param == "sqlite":
        backend: Storage = SqliteStorage(tmp_path / "conformance.db")
        yield backend
        backend.close()
    elif request.param == "postgres":
        with fresh_schema() as url:
            backend = PostgresStorage(url)
            yield backend
            backend.close()
    else:  # pragma: no cover - each backend adds its branch
        raise AssertionError(request.param)
