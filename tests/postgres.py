"""PostgreSQL for tests: a fresh schema per test on ``QUEUELOG_TEST_POSTGRES_URL``.

Outside CI, tests that need PostgreSQL skip (with the reason) when the URL is
unset or the server cannot be reached; with ``CI=true`` they fail instead.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import psycopg
import pytest

from queuelog.storage.subscribers import ReadySubscriber

URL_VARIABLE = "QUEUELOG_TEST_POSTGRES_URL"


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


@cache
def _unavailable(url: str | None) -> str | None:
    """Why PostgreSQL cannot be used, or None when it can (checked once per run)."""
    if not url:
        return f"{URL_VARIABLE} is not set"
    try:
        with psycopg.connect(url, connect_timeout=5) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return f"PostgreSQL at {URL_VARIABLE} is unreachable: {type(exc).__name__}"
    return None


def postgres_url() -> str:
    """The server's URL; skips the test (fails it under CI=true) when it is unusable."""
    url = os.environ.get(URL_VARIABLE)
    reason = _unavailable(url)
    if reason is not None:
        if _in_ci():
            pytest.fail(f"{reason} (CI=true requires PostgreSQL)", pytrace=False)
        pytest.skip(reason)
    assert url is not None
    return url


def with_schema(url: str, schema: str) -> str:
    """``url`` whose sessions use ``schema`` (libpq ``options=-csearch_path=...``)."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "options"]
    query.append(("options", f"-csearch_path={schema}"))
    return urlunsplit(parts._replace(query=urlencode(query)))


@contextmanager
def fresh_schema() -> Iterator[str]:
    """Create an empty schema; yield a URL that uses it; drop it afterwards."""
    url = postgres_url()
    schema = f"ql_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield with_schema(url, schema)
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


def subscribed(store: ReadySubscriber) -> threading.Event:
    """An event set whenever ``store`` hears that a job may be ready; set once the
    node listens, so a test knows that later notifications reach it."""
    woken = threading.Event()
    store.subscribe(woken.set)
    assert woken.wait(10), "the node did not start listening"
    woken.clear()
    return woken
