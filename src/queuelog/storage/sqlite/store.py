"""SQLite backend: WAL, one group-commit writer, a read connection per thread."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from queuelog.clock import to_micros
from queuelog.errors import QueueError
from queuelog.models import ApiKey, EventKind, Finished, Job, JobStatus
from queuelog.storage.base import (
    ClaimParams,
    FinishParams,
    NewJob,
    NewKey,
    finished,
    held_params,
    job_from_row,
    key_from_row,
    key_params,
)
from queuelog.storage.reads import SqlReads
from queuelog.storage.sqlite import transactions as tx
from queuelog.storage.sqlite.transactions import Q
from queuelog.storage.sqlite.writer import GroupWriter

__all__ = ["Q", "SqliteStorage"]


class SqliteStorage(SqlReads):
    loop_groups = True  # see storage.base.LoopGroups and writer.py

    def __init__(self, path: str | Path, durability: str = "full") -> None:
        self.path = Path(path)
        # Owner-only: the files hold payloads, results, errors and key hashes. SQLite
        # gives the -wal and -shm files the database file's own mode.
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):
            os.close(os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
        self._synchronous = "FULL" if durability == "full" else "NORMAL"
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self._writer = GroupWriter(self._connect)
        self.migrate()

    # -- connections -------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path,
            isolation_level=None,
            check_same_thread=False,
            timeout=30.0,
            # The named queries, and job_insert_rows once per row count (up to 64).
            cached_statements=256,
        )
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {self._synchronous}")
        conn.execute("PRAGMA busy_timeout = 30000")
        return conn

    def _reader(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            self._local.conn = conn
            with self._readers_lock:
                self._readers.append(conn)
        return conn

    def _read(self, name: str, params: Mapping[str, Any]) -> list[sqlite3.Row]:
        return self._reader().execute(Q[name], params).fetchall()

    def migrate(self) -> None:
        self._writer.run(tx.apply_migrations)

    def close(self) -> None:
        self._writer.close()
        with self._readers_lock:
            for conn in self._readers:
                conn.close()
            self._readers.clear()

    def ping(self) -> bool:
        if not self._writer.alive:
            return False
        try:
            self._reader().execute("SELECT 1").fetchone()
        except sqlite3.Error:
            return False
        return True

    def integrity_check(self) -> str:
        row = self._reader().execute("PRAGMA integrity_check").fetchone()
        return str(row[0])

    # -- jobs --------------------------------------------------------------

    # The hottest writes come in two forms: blocking (queued for the writer's
    # thread) and awaited on an event loop (gathered there and run by the loop, one
    # group per turn). Rows become Jobs after the group, outside the transaction.

    def job_insert_many(self, jobs: Sequence[NewJob], now: datetime) -> list[tuple[Job, bool]]:
        return self._writer.run(_insert(jobs, now))

    async def job_insert_many_async(
        self, jobs: Sequence[NewJob], now: datetime
    ) -> list[tuple[Job, bool]]:
        return await self._writer.wait(_insert(jobs, now))

    def job_claim(self, params: ClaimParams) -> list[Job]:
        return [job_from_row(r) for r in self._writer.run(lambda conn: tx.claim(conn, params))]

    async def job_claim_async(self, params: ClaimParams) -> list[Job]:
        rows = await self._writer.wait(lambda conn: tx.claim(conn, params))
        return [job_from_row(r) for r in rows]

    def _types_param(self, types: Sequence[str] | None) -> str | None:
        return tx.types_json(types)

    def job_heartbeat(
        self,
        job_id: int,
        lease_token: str,
        worker_name: str,
        lease_seconds: int | None,
        now: datetime,
    ) -> Job:
        args = held_params(job_id, lease_token, worker_name, now, lease_seconds)
        return self._writer.run(lambda conn: tx.held(conn, "job_heartbeat", args))

    async def job_heartbeat_async(
        self,
        job_id: int,
        lease_token: str,
        worker_name: str,
        lease_seconds: int | None,
        now: datetime,
    ) -> Job:
        args = held_params(job_id, lease_token, worker_name, now, lease_seconds)
        return await self._writer.wait(lambda conn: tx.held(conn, "job_heartbeat", args))

    def job_release(self, job_id: int, lease_token: str, worker_name: str, now: datetime) -> Job:
        args = held_params(job_id, lease_token, worker_name, now)
        return self._writer.run(lambda conn: tx.release(conn, args, now))

    async def job_release_async(
        self, job_id: int, lease_token: str, worker_name: str, now: datetime
    ) -> Job:
        args = held_params(job_id, lease_token, worker_name, now)
        return await self._writer.wait(lambda conn: tx.release(conn, args, now))

    def job_finish_many(self, items: Sequence[FinishParams]) -> list[Job | QueueError]:
        outcomes = self._writer.run(lambda conn: tx.finish_many(conn, items))
        return [o if isinstance(o, QueueError) else job_from_row(o) for o in outcomes]

    async def job_finish_many_async(
        self, items: Sequence[FinishParams], with_jobs: bool = True
    ) -> list[Job | Finished | QueueError]:
        outcomes = await self._writer.wait(lambda conn: tx.finish_many(conn, items, with_jobs))
        made = job_from_row if with_jobs else finished
        return [o if isinstance(o, QueueError) else made(o) for o in outcomes]

    def job_rescue_expired(
        self, now: datetime, retry_at: Callable[[Job], datetime], limit: int = 500
    ) -> list[Job]:
        rows = self._writer.run(lambda conn: tx.rescue(conn, now, retry_at, limit))
        return [job_from_row(r) for r in rows]

    def job_cancel(self, job_id: int, actor: str, now: datetime) -> Job:
        return self._writer.run(
            lambda conn: tx.transition(conn, "job_cancel", job_id, actor, now, EventKind.CANCELLED)
        )

    def job_requeue(self, job_id: int, actor: str, now: datetime) -> Job:
        return self._writer.run(
            lambda conn: tx.transition(conn, "job_requeue", job_id, actor, now, EventKind.REQUEUED)
        )

    def job_prune(self, cutoffs: Mapping[JobStatus, datetime], limit: int = 1000) -> int:
        def prune(conn: sqlite3.Connection) -> int:
            ids: list[dict[str, int]] = []
            for status, cutoff in cutoffs.items():
                args = {"status": status.value, "cutoff": to_micros(cutoff), "limit": limit}
                ids += [{"id": r["id"]} for r in conn.execute(Q["job_prunable"], args)]
            conn.executemany(Q["job_events_delete"], ids)
            conn.executemany(Q["job_delete"], ids)
            return len(ids)

        return self._writer.run(prune)

    def job_requeue_failed(self, job_type: str, actor: str, now: datetime) -> int:
        return self._writer.run(lambda conn: tx.requeue_failed(conn, job_type, actor, now))

    # -- keys --------------------------------------------------------------

    def key_insert(self, key: NewKey, now: datetime) -> ApiKey:
        args = key_params(key, now)
        return self._writer.run(
            lambda conn: key_from_row(conn.execute(Q["key_insert"], args).fetchone())
        )

    def key_revoke(self, key_id: int, now: datetime) -> bool:
        args = {"id": key_id, "now": to_micros(now)}
        return self._writer.run(lambda conn: conn.execute(Q["key_revoke"], args).rowcount == 1)

    def key_insert_first_admin(self, key: NewKey, now: datetime) -> ApiKey | None:
        args = key_params(key, now)

        def insert_first(conn: sqlite3.Connection) -> ApiKey | None:
            # The writer's BEGIN IMMEDIATE serialises this check with every other writer.
            if conn.execute(Q["key_active_admin"]).fetchone() is not None:
                return None
            return key_from_row(conn.execute(Q["key_insert"], args).fetchone())

        return self._writer.run(insert_first)


def _insert(
    jobs: Sequence[NewJob], now: datetime
) -> Callable[[sqlite3.Connection], list[tuple[Job, bool]]]:
    """The writer's operation for an insert: a single job's joins the group's others."""
    if len(jobs) == 1:
        return tx.SingleInsert(jobs[0], now)
    return lambda conn: tx.insert_many(conn, jobs, now)
