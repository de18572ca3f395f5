"""SQLite backend: WAL, one group-commit writer on the event loop, a read connection
per thread."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio.to_thread

from queuelog.clock import to_micros
from queuelog.errors import QueueError, StorageUnavailable
from queuelog.models import TERMINAL, ApiKey, Finished, Job, JobStatus
from queuelog.schedules import ConfigSync, Schedule
from queuelog.storage import schedule_rows as sr
from queuelog.storage.health import StorageHealth
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
from queuelog.storage.rows import finished, job_from_row, key_from_row, key_params
from queuelog.storage.sqlite import transactions as tx
from queuelog.storage.sqlite.faults import storage_fault
from queuelog.storage.sqlite.transactions import Q
from queuelog.storage.sqlite.writer import GroupWriter
from queuelog.storage.statements import held_params, requeue_params
from queuelog.storage.workflows import Released

__all__ = ["Q", "SqliteStorage"]

_BUSY_TIMEOUT_SECONDS = 30.0
# The reads whose cost grows with the table, not with what they answer: the counts by
# status and type, the chart's finished jobs per minute, and the listings (a filter
# without an index of its own, a status few jobs have say, reads every job newest
# first). On the loop, each refresh of a dashboard open on a large queue held every
# claim and enqueue until it was done.
_SCANS = frozenset(
    {"job_counts", "job_ready_count", "job_event_counts", "job_list", "job_list_by_principal"}
)
# How many steps of SQLite's virtual machine a scan takes between two looks at whether
# the store is closing: a few milliseconds' work, and few takings of the GIL.
_SCAN_CHECK_STEPS = 100_000
# Free bytes a filesystem must have again before a fault for lack of space ends: room
# for a few of the largest requests and the WAL's growth between checkpoints.
_SPACE_HEADROOM_BYTES = 16 * 1024 * 1024
_BESIDE = "SQLite makes the database's -wal and -shm files beside it, for readers too"


class SqliteStorage(SqlReads):
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
        self._idle_scanners: list[sqlite3.Connection] = []
        self._scanning = 0
        self._closed = False
        self._readers_changed = threading.Condition()
        self.health = StorageHealth(
            space_left=lambda: shutil.disk_usage(self.path.parent).free,
            headroom=_SPACE_HEADROOM_BYTES,
        )
        self._on_finished: list[Callable[[Iterable[int] | None], None]] = []
        self._on_ready: list[Callable[[], None]] = []
        try:
            self._writer = GroupWriter(
                self._connect, busy_timeout=_BUSY_TIMEOUT_SECONDS, health=self.health
            )
        except sqlite3.OperationalError:
            if os.access(self.path.parent, os.W_OK):
                raise
            # SQLite says it cannot open the file, which is there and readable: it is
            # the -wal and -shm files, made beside it, that cannot be.
            folder = str(self.path.parent.resolve())
            raise ValueError(f"the folder {folder!r} cannot be written: {_BESIDE}") from None
        self._writer.run_now(tx.apply_migrations)

    # -- connections -------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path,
            isolation_level=None,
            check_same_thread=False,
            timeout=_BUSY_TIMEOUT_SECONDS,
        )
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {self._synchronous}")
        conn.execute(f"PRAGMA busy_timeout = {int(_BUSY_TIMEOUT_SECONDS * 1000)}")
        return conn

    def _reader(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            self._local.conn = conn
            with self._readers_changed:
                self._readers.append(conn)
        return conn

    async def _read(self, name: str, params: Mapping[str, Any]) -> list[sqlite3.Row]:
        # A read in WAL mode never waits for the writer: a seek runs on the loop at once.
        # A scan runs on a thread with a read connection of its own: sqlite3 lets go of
        # the GIL while SQLite steps, so the loop goes on serving meanwhile.
        if self._closed:
            raise _closed_error()
        if name in _SCANS:
            return await anyio.to_thread.run_sync(self._scan, name, params)
        return self._run_read(self._reader(), name, params)

    def _scan(self, name: str, params: Mapping[str, Any]) -> list[sqlite3.Row]:
        """A scan on a worker thread, on one of the store's scan connections (anyio
        replaces idle threads: a connection per thread would stay open after each)."""
        with self._readers_changed:
            if self._closed:
                raise _closed_error()
            conn = self._idle_scanners.pop() if self._idle_scanners else None
            self._scanning += 1
        try:
            if conn is None:
                conn = self._connect()
                # Looked at every so many steps: a scan stops soon after close() began.
                conn.set_progress_handler(lambda: self._closed, _SCAN_CHECK_STEPS)
                with self._readers_changed:
                    self._readers.append(conn)
            return self._run_read(conn, name, params)
        finally:
            with self._readers_changed:
                self._scanning -= 1
                if conn is not None:
                    self._idle_scanners.append(conn)
                self._readers_changed.notify_all()

    def _run_read(
        self, conn: sqlite3.Connection, name: str, params: Mapping[str, Any]
    ) -> list[sqlite3.Row]:
        try:
            return conn.execute(Q[name], params).fetchall()
        except sqlite3.Error as exc:
            if self._closed:  # stopped by close()
                raise _closed_error() from None
            fault = storage_fault(exc)
            if fault is None:
                raise
            raise self.health.refuse(fault) from None

    async def _probe(self) -> None:
        await self._writer.run(lambda conn: conn.execute(Q["storage_probe"]))

    def _ids_param(self, ids: Sequence[int]) -> str:
        return json.dumps(list(ids))

    def _types_param(self, types: Sequence[str]) -> str:
        return tx.types_json(types)

    def close(self) -> None:
        """Close every connection once the scans under way on threads have stopped
        (closing a connection that a statement runs on crashes the process)."""
        self._writer.close()
        with self._readers_changed:
            self._closed = True
            self._readers_changed.wait_for(lambda: self._scanning == 0, _BUSY_TIMEOUT_SECONDS)
            for conn in self._readers:
                conn.close()
            self._readers.clear()

    def integrity_check(self) -> str:
        if self._closed:
            raise _closed_error()
        row = self._reader().execute("PRAGMA integrity_check").fetchone()
        return str(row[0])

    # -- jobs --------------------------------------------------------------

    async def job_insert_many(
        self, jobs: Sequence[NewJob], now: datetime
    ) -> list[tuple[Job, bool]]:
        return await self._writer.run(lambda conn: tx.insert_many(conn, jobs, now))

    async def job_claim(self, params: ClaimParams) -> list[Job]:
        jobs, rescued, released = await self._writer.run(lambda conn: tx.claim(conn, params))
        # Committed now: a lease the claim's rescue failed for good ends that job. Each
        # job it rescued is pending again or frees a slot of its type's limits: claims
        # waiting for its type look again, as after the sweeper's rescue.
        ended = [job.id for job in rescued if job.status in TERMINAL]
        self._tell(Released(released.ready, ended + released.cancelled), woken=bool(rescued))
        return jobs

    def subscribe_finished(self, on_finished: Callable[[Iterable[int] | None], None]) -> None:
        """Call ``on_finished`` with the ids of jobs that finished where the service did
        not see it: a lease a claim rescued for good on its way, a dependent that a
        dependency's failure cancelled."""
        self._on_finished.append(on_finished)

    def subscribe(self, on_ready: Callable[[], None]) -> None:
        """Call ``on_ready`` when a write made waiting jobs pending (their last dependency
        ended), which the service that asked for the write does not see."""
        self._on_ready.append(on_ready)

    def _tell(self, released: Released, woken: bool = False) -> None:
        """Tell the subscribers what a committed write did to jobs beside its own
        (``woken``: jobs it made ready, or slots it freed, that ``released`` does not
        hold)."""
        if released.ready or woken:
            for on_ready in self._on_ready:
                on_ready()
        if released.cancelled:
            for on_finished in self._on_finished:
                on_finished(released.cancelled)

    async def job_heartbeat(self, held: HeldParams) -> Job:
        args = held_params(held)
        return await self._writer.run(lambda conn: tx.held(conn, "job_heartbeat", args))

    async def job_release(self, held: HeldParams) -> Job:
        args = held_params(held)
        return await self._writer.run(lambda conn: tx.release(conn, args, held.now))

    async def job_finish_many(
        self, items: Sequence[FinishParams], with_jobs: bool = True
    ) -> list[Job | Finished | QueueError]:
        outcomes, released = await self._writer.run(lambda conn: tx.finish_many(conn, items))
        self._tell(released)
        made = job_from_row if with_jobs else finished
        return [o if isinstance(o, QueueError) else made(o) for o in outcomes]

    async def job_rescue_expired(
        self, now: datetime, retry_at: Callable[[Job], datetime], limit: int = 500
    ) -> list[Job]:
        rescued, released = await self._writer.run(
            lambda conn: tx.rescue(conn, now, retry_at, limit)
        )
        self._tell(released)
        return rescued

    async def job_cancel(self, job_id: int, actor: str, now: datetime) -> Job:
        job, released = await self._writer.run(lambda conn: tx.cancel(conn, job_id, actor, now))
        self._tell(released)
        return job

    async def job_requeue(self, job_id: int, actor: str, now: datetime) -> Job:
        return await self._writer.run(lambda conn: tx.requeue(conn, job_id, actor, now))

    async def job_prune(self, cutoffs: Mapping[JobStatus, datetime], limit: int = 1000) -> int:
        return await self._writer.run(lambda conn: tx.prune(conn, cutoffs, limit))

    async def job_requeue_failed(
        self, job_type: str, actor: str, now: datetime, after_id: int = 0, limit: int = 500
    ) -> list[int]:
        args = requeue_params(job_type, now, after_id, limit)
        return await self._writer.run(lambda conn: tx.requeue_failed(conn, args, actor, now))

    # -- schedules ---------------------------------------------------------

    async def schedule_sync_config(
        self, schedules: Sequence[NewSchedule], now: datetime
    ) -> ConfigSync:
        return await self._writer.run(lambda conn: sr.sync_config(conn, Q, schedules, now))

    async def schedule_insert(self, new: NewSchedule, now: datetime) -> Schedule | None:
        return await self._writer.run(lambda conn: sr.insert(conn, Q, new, now))

    async def schedule_delete(self, name: str) -> None:
        await self._writer.run(lambda conn: sr.delete(conn, Q, name))

    async def schedule_set_paused(self, switch: ScheduleSwitch) -> Schedule | None:
        return await self._writer.run(lambda conn: sr.set_paused(conn, Q, switch))

    async def schedule_fire(self, fire: ScheduleFire) -> tuple[FireOutcome, Job | None]:
        return await self._writer.run(lambda conn: sr.fire(conn, Q, tx.insert_many, fire))

    async def schedule_trigger(self, name: str, job: NewJob) -> Job:
        return await self._writer.run(
            lambda conn: sr.trigger(conn, Q, tx.insert_many, name, job, job.run_at)
        )

    async def type_set_paused(self, job_type: str, paused: bool, actor: str, now: datetime) -> None:
        await self._writer.run(lambda conn: tx.set_paused(conn, job_type, paused, actor, now))

    async def statistics_refresh(self) -> bool:
        return False  # the hot statements name their indexes: no plan follows statistics

    # -- keys --------------------------------------------------------------

    async def key_insert(self, key: NewKey, now: datetime) -> ApiKey:
        args = key_params(key, now)
        return await self._writer.run(
            lambda conn: key_from_row(conn.execute(Q["key_insert"], args).fetchone())
        )

    async def key_revoke(self, key_id: int, now: datetime) -> bool:
        args = {"id": key_id, "now": to_micros(now)}
        return await self._writer.run(
            lambda conn: conn.execute(Q["key_revoke"], args).rowcount == 1
        )

    async def key_insert_first_admin(self, key: NewKey, now: datetime) -> ApiKey | None:
        args = key_params(key, now)

        def insert_first(conn: sqlite3.Connection) -> ApiKey | None:
            # The writer's BEGIN IMMEDIATE serialises this check with every other writer.
            if conn.execute(Q["key_active_admin"]).fetchone() is not None:
                return None
            return key_from_row(conn.execute(Q["key_insert"], args).fetchone())

        return await self._writer.run(insert_first)


def _closed_error() -> StorageUnavailable:
    return StorageUnavailable("The database is closed")
