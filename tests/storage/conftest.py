"""The storage conformance suite runs against every backend through one fixture."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from queuelog.storage.postgres.store import PostgresStorage
from queuelog.storage.protocol import Storage
from tests.postgres import NODES, fresh_schema
from tests.storage.backends import BACKENDS, opened


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Storage]:
    """A fresh, migrated, empty store of each backend."""
    with opened(request.param, tmp_path) as backend:
        yield backend


@pytest.fixture
def schema() -> Iterator[str]:
    """A fresh PostgreSQL schema's URL: what the nodes use, and what a test reads the
    tables by."""
    with fresh_schema() as url:
        yield url


@pytest.fixture
def nodes(schema: str) -> Iterator[list[PostgresStorage]]:
    """Stores on one fresh schema, as queuelog nodes would be."""
    stores = [PostgresStorage(schema, pool_size=4) for _ in range(NODES)]
    yield stores
    for store in stores:
        store.close()
