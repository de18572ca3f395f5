"""PostgreSQL backend: several queuelog nodes on one database.

Every write is one transaction on a pooled connection; the claim locks rows with
``FOR UPDATE SKIP LOCKED`` so nodes claiming at once never wait on each other and
never get the same job. Transitions that make a job pending NOTIFY the other
nodes (delivered at commit), which wakes their long-polling claimers.

Time: the service's injected ``now`` is the source of truth for leases and
``run_at``, not the database's clock. It keeps one notion of time for both
backends (tests drive a fake clock through the same protocol), and a node decides
with the same ``now`` it answers the worker with. The price is that the nodes'
clocks must agree: a node whose clock runs ``d`` ahead expires leases (refusing
a late heartbeat or completion) and hands out scheduled jobs up to ``d`` early.
Keep the skew well under the shortest lease (the README's "Scaling out" says how),
with heartbeats at half a lease.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

import anyio.to_thread
import psycopg
from psycopg import errors as pg_errors
from psycopg.rows import DictRow, dict_row
from psycopg_pool import ConnectionPool, PoolTimeout

from queuelog.clock import to_micros
from queuelog.errors import QueueError, StorageUnavailable
from queuelog.models import ApiKey, Finished, Job, JobStatus
from queuelog.schedules import ConfigSync, Schedule
from queuelog.storage import schedule_rows as sr
from queuelog.storage.health import StorageHealth
from queuelog.storage.postgres import transactions as tx
from queuelog.storage.postgres.connections import (
    NO_SCHEMA,
    NO_TABLES,
    LendingPool,
    check_url,
    live_connection,
    open_pool,
)
from queuelog.storage.postgres.faults import storage_fault
from queuelog.storage.postgres.listener import ReadyListener
from queuelog.storage.postgres.transactions import Conn, Q
from queuelog.storage.protocol import (
    ClaimParams,
    FinishParams,
    FireOutcome,
    HeldParams,
    NewJob,
    NewKey,
    NewSchedule,
    ScheduleFire,
    ScheduleSwitch,
)
from queuelog.storage.reads import SqlReads
from queuelog.storage.rows import key_from_row, key_params
from queuelog.storage.statements import held_params, requeue_params

T = TypeVar("T")

# A transaction that lost a deadlock or a serialization race is run again, a few times;
# one that loses every time is refused as contention (503: nothing was done, and sent
# again it may pass), not as a fault of the database (readiness stays green).
_RETRIES = 3
_RETRYABLE = (pg_errors.DeadlockDetected, pg_errors.SerializationFailure)
_FAULTS = (psycopg.Error, PoolTimeout)
_WAITED = (PoolTimeout, pg_errors.LockNotAvailable, pg_errors.QueryCanceled)
_CONTENTION = "The request met others changing the same jobs or keys at once; send it again"
_LOG = logging.getLogger(__name__)


class PostgresStorage(SqlReads):
    def __init__(
        self,
        url: str,
        durability: str = "full",
        pool_size: int = 16,
        connect_timeout: float = 10.0,
        connection_wait: float = 2.0,
        lock_wait: float = 30.0,
        existing: bool = False,
    ) -> None:
        """Args:
        url: a libpq URL; ``?options=-csearch_path%3Dname`` selects a schema.
        durability: ``full`` waits for the WAL flush at each commit; ``normal``
            turns ``synchronous_commit`` off for this node's sessions (a server
            crash may lose the last fraction of a second of acknowledged work).
        pool_size: most connections this node opens (plus one for LISTEN).
        connect_timeout: how long to wait for the database when opening, and how long
            one chain of the pool's tries to replace a lost connection lasts.
        connection_wait: how long a request waits for a connection before it is
            refused (503): a fault, unless this node's operations held them all.
        lock_wait: how long a statement waits for another program's lock, then 503.
        existing: only open a database whose schema holds queuelog's tables already
            (ValueError otherwise), migrating it as ever; nothing is made in another.
        """
        check_url(url)
        self._url = url
        self._synchronous_commit = "on" if durability == "full" else "off"
        self._connection_wait = connection_wait
        self._lock_timeout = f"{max(1, round(lock_wait * 1000))}ms"
        self.health = StorageHealth()
        self._node = uuid.uuid4().hex  # names this node's enqueue notifications
        self._pool = self._new_pool(pool_size, connection_wait, connect_timeout)
        self._listener: ReadyListener | None = None
        self._listener_lock = threading.Lock()
        self._open(connect_timeout, existing)

    def _open(self, connect_timeout: float, existing: bool) -> None:
        """Open the pool and migrate the database (see ``existing``)."""
        try:
            open_pool(self._pool, connect_timeout)
            self._write_now(lambda conn: _migrated(conn, existing))
        except BaseException as exc:  # unreachable or failed to migrate: stop the pool's threads
            self._pool.close()
            if isinstance(exc, pg_errors.InvalidSchemaName):  # libpq's words name no schema
                raise ValueError(NO_SCHEMA) from None
            raise

    # -- connections -------------------------------------------------------

    def _new_pool(self, size: int, wait: float, reconnect: float) -> ConnectionPool[Conn]:
        # The pool tries a lost connection again after a pause that doubles each time:
        # after an outage of a minute its next try came up to half a minute after the
        # database was back. A chain of tries is given up after ``reconnect`` seconds (as
        # long as opening waits for a database that is starting), and the next request
        # starts a new one.
        return LendingPool(
            self._url,
            min_size=1,
            max_size=size,
            connection_class=psycopg.Connection[DictRow],
            kwargs={"autocommit": True, "row_factory": dict_row},
            configure=self._configure,
            timeout=wait,
            reconnect_timeout=reconnect,
            open=False,
            name="queuelog",
        )

    def _configure(self, conn: Conn) -> None:
        args = {
            "durability": self._synchronous_commit,
            "node": self._node,
            "lock_timeout": self._lock_timeout,
        }
        conn.execute(Q["session_settings"], args)

    async def _read(self, name: str, params: Mapping[str, Any]) -> list[DictRow]:
        """Run a named query on a pool thread, so the event loop never waits for it."""
        return await anyio.to_thread.run_sync(self._read_now, name, params)

    def _read_now(self, name: str, params: Mapping[str, Any]) -> list[DictRow]:
        """Run a named query; a read whose connection broke is tried once more on a
        fresh one (not one that waited, for a connection or a lock, or was canceled: that
        would double the wait)."""
        for attempt in range(2):
            try:
                with live_connection(self._pool, self._connection_wait) as conn:
                    return conn.execute(Q[name], params).fetchall()
            except _WAITED as exc:
                raise self._refused(exc) from None
            except psycopg.OperationalError as exc:
                if attempt == 1:
                    raise self._refused(exc) from None
            except _FAULTS as exc:
                if attempt == 1 or not self._dropped_stale_plans(exc):
                    raise self._refused(exc) from None
        raise AssertionError("unreachable")

    async def _write(self, operation: Callable[[Conn], T], alone: bool = False) -> T:
        """Run ``operation`` in one transaction on a pool thread (psycopg's blocking
        connections are kept off the event loop); ``alone``: its one write is a
        statement the database commits by itself (no BEGIN and COMMIT to wait for)."""
        return await anyio.to_thread.run_sync(self._write_now, operation, alone)

    def _write_now(self, operation: Callable[[Conn], T], alone: bool = False) -> T:
        """Run ``operation`` in one transaction; again if it lost a deadlock.

        A lost connection is not retried: the commit may have happened. The caller
        gets 503, which clients resend only where that is safe.
        """
        for attempt in range(_RETRIES):
            try:
                return self._transaction(operation, alone)
            except _RETRYABLE as exc:
                if attempt == _RETRIES - 1:
                    _LOG.warning("a write lost to other transactions %d times: %s", _RETRIES, exc)
                    refused = StorageUnavailable(_CONTENTION, reason="contention")
                    raise self.health.contended(refused) from None
            except _FAULTS as exc:
                if attempt == _RETRIES - 1 or not self._dropped_stale_plans(exc):
                    raise self._refused(exc) from None
        raise AssertionError("unreachable")

    def _dropped_stale_plans(self, exc: Exception) -> bool:
        """If ``exc`` says that a statement the connection prepared reads tables that
        changed since (another node migrated as it started: a column added), replace
        the pool's connections, so that the request, sent again, prepares its statements
        anew (the statement failed: nothing was done); whether it did."""
        stale = isinstance(exc, pg_errors.FeatureNotSupported) and (
            exc.diag.source_function == "RevalidateCachedQuery"
        )
        if stale:
            _LOG.warning("statements prepared before a change of the tables: reconnecting")
            self._pool.drain()
        return stale

    def _transaction(self, operation: Callable[[Conn], T], alone: bool) -> T:
        """Run ``operation`` in one transaction. While writes are refused for a fault,
        its commit ends the fault if it wrote something (which only a transaction of
        its own tells)."""
        faulty = not self.health.writable
        with live_connection(self._pool, self._connection_wait) as conn:
            if alone and not faulty:
                return operation(conn)  # autocommit: the statement is its transaction
            with conn.transaction():
                value = operation(conn)
                wrote = faulty and bool(tx.one(conn, "transaction_wrote", {})["wrote"])
        if wrote:
            self.health.stored()
        return value

    def _refused(self, exc: Exception) -> Exception:
        """What to raise for ``exc``: a storage fault as its domain error (counted by
        ``health``), any other failure as it is."""
        fault = storage_fault(exc, self._connection_wait)
        if fault is None:
            return exc
        return self.health.contended(fault) if fault.reason == "busy" else self.health.refuse(fault)

    async def _probe(self) -> None:
        await self._write(lambda conn: conn.execute(Q["storage_probe"]))

    def close(self) -> None:
        with self._listener_lock:
            if self._listener is not None:
                self._listener.close()
                self._listener = None
        self._pool.close()

    def subscribe(self, on_ready: Callable[[], None]) -> None:
        """Call ``on_ready`` whenever any node may have made a job ready.

        LISTENs on a dedicated connection (reconnecting if it drops); ``on_ready``
        runs on the listener's thread and must be quick and thread-safe.
        """
        self._listening().add(on_ready)

    def subscribe_finished(self, on_finished: Callable[[Iterable[int] | None], None]) -> None:
        """Call ``on_finished`` with the ids of the jobs any node finished (None: any may
        have, while this node was not listening); from the listener's thread."""
        self._listening().add_finished(on_finished)

    def _listening(self) -> ReadyListener:
        with self._listener_lock:
            if self._listener is None:
                self._listener = ReadyListener(self._url, self._node)
                self._listener.start()
            return self._listener

    # -- jobs --------------------------------------------------------------

    async def job_insert_many(
        self, jobs: Sequence[NewJob], now: datetime
    ) -> list[tuple[Job, bool]]:
        return await self._write(
            lambda conn: tx.insert_many(conn, jobs, now), alone=tx.one_statement(jobs)
        )

    async def job_claim(self, params: ClaimParams) -> list[Job]:
        return await self._write(lambda conn: tx.claim(conn, params))

    def _ids_param(self, ids: Sequence[int]) -> list[int]:
        return list(ids)

    def _types_param(self, types: Sequence[str]) -> list[str]:
        return list(types)

    async def job_release(self, held: HeldParams) -> Job:
        args = held_params(held)
        return await self._write(lambda conn: tx.release(conn, args, held.now))

    async def job_heartbeat(self, held: HeldParams) -> Job:
        args = held_params(held)
        return await self._write(lambda conn: tx.held(conn, "job_heartbeat", args))

    async def job_finish_many(
        self, items: Sequence[FinishParams], with_jobs: bool = True
    ) -> list[Job | Finished | QueueError]:
        return await self._write(lambda conn: tx.finish_many(conn, items, with_jobs))

    async def job_rescue_expired(
        self, now: datetime, retry_at: Callable[[Job], datetime], limit: int = 500
    ) -> list[Job]:
        return await self._write(lambda conn: tx.rescue(conn, now, retry_at, limit))

    async def job_cancel(self, job_id: int, actor: str, now: datetime) -> Job:
        return await self._write(lambda conn: tx.cancel(conn, job_id, actor, now))

    async def job_requeue(self, job_id: int, actor: str, now: datetime) -> Job:
        return await self._write(lambda conn: tx.requeue(conn, job_id, actor, now))

    async def job_prune(self, cutoffs: Mapping[JobStatus, datetime], limit: int = 1000) -> int:
        return await self._write(lambda conn: tx.prune(conn, cutoffs, limit))

    async def job_requeue_failed(
        self, job_type: str, actor: str, now: datetime, after_id: int = 0, limit: int = 500
    ) -> list[int]:
        args = requeue_params(job_type, now, after_id, limit)
        return await self._write(lambda conn: tx.requeue_failed(conn, args, actor, now))

    # -- schedules ---------------------------------------------------------

    async def schedule_sync_config(
        self, schedules: Sequence[NewSchedule], now: datetime
    ) -> ConfigSync:
        return await self._write(lambda conn: sr.sync_config(conn, Q, schedules, now))

    async def schedule_insert(self, new: NewSchedule, now: datetime) -> Schedule | None:
        return await self._write(lambda conn: sr.insert(conn, Q, new, now))

    async def schedule_delete(self, name: str) -> None:
        await self._write(lambda conn: sr.delete(conn, Q, name))

    async def schedule_set_paused(self, switch: ScheduleSwitch) -> Schedule | None:
        return await self._write(lambda conn: sr.set_paused(conn, Q, switch))

    async def schedule_fire(self, fire: ScheduleFire) -> tuple[FireOutcome, Job | None]:
        return await self._write(lambda conn: sr.fire(conn, Q, tx.insert_many, fire))

    async def schedule_trigger(self, name: str, job: NewJob) -> Job:
        return await self._write(
            lambda conn: sr.trigger(conn, Q, tx.insert_many, name, job, job.run_at)
        )

    async def type_set_paused(self, job_type: str, paused: bool, actor: str, now: datetime) -> None:
        await self._write(lambda conn: tx.set_paused(conn, job_type, paused, actor, now))

    async def statistics_refresh(self) -> bool:
        return await self._write(tx.refresh_statistics, alone=True)

    # -- keys --------------------------------------------------------------

    async def key_insert(self, key: NewKey, now: datetime) -> ApiKey:
        args = key_params(key, now)
        return await self._write(lambda conn: key_from_row(tx.one(conn, "key_insert", args)))

    async def key_revoke(self, key_id: int, now: datetime) -> bool:
        args = {"id": key_id, "now": to_micros(now)}
        return await self._write(lambda conn: conn.execute(Q["key_revoke"], args).rowcount == 1)

    async def key_insert_first_admin(self, key: NewKey, now: datetime) -> ApiKey | None:
        args = key_params(key, now)

        def insert_first(conn: Conn) -> ApiKey | None:
            # Nodes starting together on an empty database: one admin key, not one each.
            conn.execute(Q["admin_bootstrap_lock"])
            if conn.execute(Q["key_active_admin"]).fetchone() is not None:
                return None
            return key_from_row(tx.one(conn, "key_insert", args))

        return await self._write(insert_first)


def _migrated(conn: Conn, existing: bool) -> None:
    """Migrate; with ``existing``, only a schema queuelog made its tables in: a command
    that lists or revokes keys, given the wrong database or schema, would make every
    table there and answer from them (as it would make a SQLite file)."""
    if existing:
        found = tx.one(conn, "migrations_table_found", {})
        if not found["found"]:
            raise ValueError(NO_TABLES if found["schema"] else NO_SCHEMA)
    tx.apply_migrations(conn)
