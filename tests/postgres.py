"""PostgreSQL for tests: a fresh schema per test on ``QUEUELOG_TEST_POSTGRES_URL``.

Outside CI, tests that need PostgreSQL skip (with the reason) when the URL is
unset or the server cannot be reached; with ``CI=true`` they fail instead.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any

import pytest
from bench.pg import fresh_schema as schema_named
from bench.pg import unavailable, with_schema

from queuelog.storage.subscribers import ReadySubscriber

URL_VARIABLE = "QUEUELOG_TEST_POSTGRES_URL"
NODES = 3  # the storage tests' nodes on one schema


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


@cache
def _unavailable(url: str | None) -> str | None:
    """Why PostgreSQL cannot be used, or None when it can (checked once per run)."""
    if not url:
        return f"{URL_VARIABLE} is not set"
    reason = unavailable(url)
    return None if reason is None else f"PostgreSQL at {URL_VARIABLE} is unusable: {reason}"


def postgres_url() -> str:
    """The server's URL; skips the test (fails it under CI=true) when it is unusable."""
    url = os.environ.get(URL_VARIABLE)
    reason = _unavailable(url)
    if reason is not None:
        if in_ci():
            pytest.fail(f"{reason} (CI=true requires PostgreSQL)", pytrace=False)
        pytest.skip(reason)
    assert url is not None
    return url


@contextmanager
def fresh_schema() -> Iterator[str]:
    """Create an empty schema; yield a URL that uses it; drop it afterwards."""
    url = postgres_url()
    with schema_named(url, "ql_test") as schema:
        yield with_schema(url, schema)


def subscribed(store: ReadySubscriber) -> threading.Event:
    """An event set whenever ``store`` hears that a job may be ready; set once the
    node listens, so a test knows that later notifications reach it."""
    woken = threading.Event()
    store.subscribe(woken.set)
    assert woken.wait(10), "the node did not start listening"
    woken.clear()
    return woken


def rows_read(plan: dict[str, Any]) -> int:
    """Every row an EXPLAIN ANALYZE plan's nodes read, over all their loops."""
    rows = int(plan.get("Actual Rows", 0)) + int(plan.get("Rows Removed by Filter", 0))
    own = rows * int(plan.get("Actual Loops", 1))
    return own + sum(rows_read(child) for child in plan.get("Plans", []))
