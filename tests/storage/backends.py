"""Stores of every backend, for the storage tests: each fresh, migrated and empty."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from queuelog.storage.postgres.store import PostgresStorage
from queuelog.storage.protocol import Storage
from queuelog.storage.sqlite.store import SqliteStorage
from tests.postgres import fresh_schema

BACKENDS = ["sqlite", "postgres"]


@contextmanager
def opened(backend: str, directory: Path, durability: str = "full") -> Iterator[Storage]:
    """A fresh, migrated, empty store of ``backend``, closed afterwards."""
    if backend == "sqlite":
        store: Storage = SqliteStorage(directory / "conformance.db", durability=durability)
        try:
            yield store
        finally:
            store.close()
    elif backend == "postgres":
        with fresh_schema() as url:
            store = PostgresStorage(url, durability=durability)
            try:
                yield store
            finally:
                store.close()
    else:  # pragma: no cover - each backend adds its branch
        raise AssertionError(backend)
