"""PostgreSQL for the bench: a fresh schema per run on ``BENCH_POSTGRES_URL``.

queuelog and pgqueuer each get their own empty schema on the same server, so
several runs (and the test suite's schemas) can share one database.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"
URL_VARIABLE = "BENCH_POSTGRES_URL"


def postgres_url() -> str:
    """The server the PostgreSQL modes use; only addresses on this machine are loaded."""
    url = os.environ.get(URL_VARIABLE) or DEFAULT_URL
    host = urlsplit(url).hostname or ""
    if host not in {"127.0.0.1", "localhost", "::1"}:
        raise RuntimeError(f"{URL_VARIABLE} must name a server on 127.0.0.1, not {host!r}")
    return url


def unavailable(url: str) -> str | None:
    """Why PostgreSQL cannot be used, or None when it can."""
    try:
        import psycopg  # the postgres extra
    except ImportError:
        return "psycopg is not installed (the postgres extra)"
    try:
        with psycopg.connect(url, connect_timeout=5) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        return f"{type(exc).__name__}: {exc}".strip()
    return None


def with_schema(url: str, schema: str) -> str:
    """``url`` whose sessions use ``schema`` (libpq ``options=-csearch_path=...``)."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k != "options"]
    query.append(("options", f"-csearch_path={schema}"))
    return urlunsplit(parts._replace(query=urlencode(query)))


@contextmanager
def fresh_schema(url: str, prefix: str) -> Iterator[str]:
    """An empty schema named ``<prefix>_<random>``; its name, dropped afterwards."""
    import psycopg

    schema = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield schema
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
