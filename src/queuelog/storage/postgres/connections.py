"""The PostgreSQL store's connections: the URL checked before any attempt, the pool
opened with one error that says why it could not be, and a live connection for each
operation."""

from __future__ import annotations

import logging
import select
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg_pool import ConnectionPool, PoolTimeout

from queuelog.storage.postgres.transactions import Conn

_POOL_LOG = logging.getLogger("psycopg.pool")
NO_SCHEMA = (
    "no schema to make the tables in: the search_path (the URL's options, else the "
    "server's default) names none that exists (CREATE SCHEMA it first)"
)
NO_TABLES = (
    "no queuelog tables in the schema the search_path (the URL's options, else the "
    "server's default) names first (migrate or serve makes them)"
)


class AllLent(PoolTimeout):
    """No connection came within the wait while every one the pool may open was lent to
    an operation: this node's own load, not the database's fault."""


class LendingPool(ConnectionPool[Conn]):
    """psycopg's pool, counting the connections it has lent, from the moment ``getconn``
    hands one over until ``putconn`` has it back: a wait that times out while all are
    lent raises ``AllLent``. (The pool's own count of its connections cannot tell: it
    counts those it is trying to replace too, as while the database is away.)"""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._lent = 0
        self._lent_lock = threading.Lock()

    def getconn(self, timeout: float | None = None) -> Conn:
        try:
            conn = super().getconn(timeout)
        except PoolTimeout as exc:
            if self._lent >= self.max_size:
                raise AllLent(str(exc)) from exc
            raise
        with self._lent_lock:
            self._lent += 1
        return conn

    def putconn(self, conn: Conn) -> None:
        try:
            super().putconn(conn)
        finally:
            with self._lent_lock:
                self._lent -= 1


@contextmanager
def live_connection(pool: ConnectionPool[Conn], wait: float) -> Iterator[Conn]:
    """A connection of ``pool`` that its server has not closed, within ``wait`` seconds.

    One the server dropped (a restart, ``pg_terminate_backend``) is closed and left for
    the pool to replace, and the next one is looked at at once. The pool's own ``check``
    would wait a second before the next look, then two: after a restart of the database
    every request waited that long, and past ``connection_wait_seconds`` was refused.
    """
    deadline = time.monotonic() + wait
    while True:
        with pool.connection(timeout=max(0.0, deadline - time.monotonic())) as conn:
            if not _closed_by_server(conn):
                yield conn
                return


def _closed_by_server(conn: Conn) -> bool:
    """Whether the server dropped ``conn`` (it is then closed, so that the pool discards
    it). An idle connection has nothing to read unless its server said goodbye or
    closed it: a look at its socket tells, without the round trip of a query. (poll,
    not select: a server holding many long polls has descriptors past select's 1024.)"""
    if conn.broken or _readable(conn.fileno()):
        conn.close()
        return True
    return False


def _readable(fd: int) -> bool:
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(0))


class _ConnectFailures(logging.Filter):
    """Keeps the last of the pool's failures to connect, and drops them from the log."""

    last = ""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.getMessage().startswith("error connecting"):
            # libpq's text runs over lines (a hint follows the error): one line here.
            self.last = " ".join(record.getMessage().partition(": ")[2].split())
            return False
        return True


class _Replaced(logging.Filter):
    """Drops the pool's warning for each connection ``live_connection`` found dropped by
    the server and closed, and for each chain of tries to replace one given up (a
    request starts another): a fault that lasts is logged by the store's health, once
    when it begins and once when it ends."""

    def filter(self, record: logging.LogRecord) -> bool:
        said = record.getMessage()
        return not said.startswith(("discarding closed connection", "reconnection attempt"))


_SAID_AGAIN_SECONDS = 60.0


class _Retries(logging.Filter):
    """Lets the pool's line for a failed try to connect through when its reason (in
    libpq's words: a refused password, say) is new, else once in ``_SAID_AGAIN_SECONDS``:
    the pool tries again every few seconds for as long as a fault lasts, and the store's
    health logs the fault once when it begins and once when it ends."""

    def __init__(self) -> None:
        super().__init__()
        self._last = ("", 0.0)

    def filter(self, record: logging.LogRecord) -> bool:
        said = record.getMessage()
        if not said.startswith("error connecting"):
            return True
        reason, now = said.partition(": ")[2], time.monotonic()
        if reason == self._last[0] and now - self._last[1] < _SAID_AGAIN_SECONDS:
            return False
        self._last = (reason, now)
        return True


_POOL_LOG.addFilter(_Replaced())
_POOL_LOG.addFilter(_Retries())


def open_pool(pool: ConnectionPool[Conn], timeout: float) -> None:
    """Open ``pool``, waiting up to ``timeout`` for the database (it may be starting).
    If it never answers, the one error raised says why, in libpq's words (the database
    does not exist, a password was refused), not each attempt's log line."""
    failures = _ConnectFailures()
    _POOL_LOG.filters.insert(0, failures)  # before _Retries, which may drop a line it needs
    try:
        pool.open(wait=True, timeout=timeout)
    except PoolTimeout as exc:
        if not failures.last:
            raise
        raise PoolTimeout(f"{failures.last} (for {timeout:g} s)") from exc
    finally:
        _POOL_LOG.removeFilter(failures)


def check_url(url: str) -> None:
    """Refuse a URL libpq cannot read, before a pool retries it (and logs its text,
    which may hold the password) until its timeout. The message quotes none of it."""
    try:
        parts = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        parts = None
    # libpq reads an unencoded @ or / in a password as part of the host or the port,
    # and its errors would then quote that piece of the password.
    host, port = str((parts or {}).get("host", "")), str((parts or {}).get("port", ""))
    if parts is None or "@" in host or not all(p.isdigit() for p in port.split(",") if p):
        raise ValueError(
            "not a valid PostgreSQL URL: percent-encode its user, password and database "
            "name (a space is %20, % is %25, @ is %40, / is %2F)"
        )
