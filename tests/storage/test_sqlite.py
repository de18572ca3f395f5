"""SQLite specifics: WAL, durability setting, migrations applied once."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import stat
import threading
from contextlib import closing
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from queuelog.clock import to_micros
from queuelog.errors import IdempotencyKeyReused, StorageUnavailable
from queuelog.models import EventKind, JobStatus, Priority
from queuelog.storage.protocol import JobListParams, NewJob
from queuelog.storage.sqlfile import load_migrations
from queuelog.storage.sqlite.store import Q, SqliteStorage
from queuelog.storage.sqlite.transactions import _statements
from tests.storage.test_conformance import T0, claim, new_job

pytestmark = pytest.mark.anyio


def read(store: SqliteStorage, sql: str, args: Any = ()) -> list[Any]:
    """Rows of ``sql`` read from the store's file by a connection of the test's own."""
    with closing(sqlite3.connect(store.path)) as conn:
        return conn.execute(sql, args).fetchall()


async def test_the_database_is_in_wal_mode(tmp_path: Path) -> None:
    """WAL is the file's own mode: readers never wait for the writer."""
    store = SqliteStorage(tmp_path / "d.db")
    try:
        assert read(store, "PRAGMA journal_mode") == [("wal",)]
    finally:
        store.close()


async def test_migrations_apply_once_and_survive_reopening(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    SqliteStorage(path).close()
    SqliteStorage(path).close()
    with sqlite3.connect(path) as conn:
        versions = [r[0] for r in conn.execute("SELECT version FROM schema_migrations")]
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert versions == [number for number, _ in load_migrations("queuelog.storage.sqlite")]
    assert versions[0] == 1 and len(set(versions)) == len(versions)
    assert {"jobs", "job_events", "api_keys"} <= tables


async def test_claim_walks_the_ready_indexes_without_sorting_the_queue(tmp_path: Path) -> None:
    store = SqliteStorage(tmp_path / "p.db")
    try:
        plan = read(
            store,
            "EXPLAIN QUERY PLAN " + Q["job_claim"],
            {"now": 0, "types": '["a", "b"]', "limit": 1, "worker_id": "w", "worker_name": "w"}
            | {"lease_seconds": None},
        )
        steps = [str(row[-1]) for row in plan]
        # A claim seeks each of its types' ready index. The one sort orders what those
        # seeks took (a claim's limit per type), never the pending jobs.
        assert "SEARCH jobs USING INDEX jobs_ready_type (type=?)" in steps
        assert not [step for step in steps if step.startswith("SCAN jobs")]
        (sort,) = [n for n, step in enumerate(steps) if "TEMP B-TREE" in step]
        assert sort > steps.index("SEARCH jobs USING INDEX jobs_ready_type (type=?)")
    finally:
        store.close()


async def test_scheduled_jobs_stay_out_of_the_ready_index_until_due(tmp_path: Path) -> None:
    store = SqliteStorage(tmp_path / "s.db")
    try:
        promote = read(store, "EXPLAIN QUERY PLAN " + Q["job_promote_due"], {"now": 0})
        assert "USING INDEX jobs_pending_run_at" in " ".join(str(r[-1]) for r in promote)
        later = T0 + timedelta(hours=1)
        await store.job_insert_many([new_job(priority=Priority.HIGH, run_at=later)] * 50, T0)
        await store.job_insert_many([new_job(priority=Priority.LOW)], T0)
        flags = read(store, "SELECT priority, scheduled FROM jobs")
        assert sorted({(r[0], r[1]) for r in flags}) == [(0, 0), (20, 1)]
        (ready,) = await claim(store, T0, limit=10)
        assert ready.priority == Priority.LOW
        assert len(await claim(store, later, limit=100)) == 50
    finally:
        store.close()


async def test_migration_statements_end_where_sqlite_finds_them_complete() -> None:
    """A trigger's body holds ';' of its own: it stays one statement."""
    sql = (
        "-- a comment; with a semicolon\n"
        "CREATE TABLE a (x INTEGER);\n\n"
        "CREATE TRIGGER t AFTER INSERT ON a\n"
        "BEGIN\n"
        "    INSERT INTO a VALUES (1);\n"
        "    DELETE FROM a WHERE x = 2;\n"
        "END;\n"
        "INSERT INTO a VALUES (';');\n"
    )
    statements = _statements(sql)
    assert [s.split()[1] for s in statements] == ["TABLE", "TRIGGER", "INTO"]
    assert statements[1].endswith("END;")
    with pytest.raises(ValueError, match="incomplete"):
        _statements("CREATE TABLE b (x INTEGER)")


async def test_a_database_of_the_previous_schema_records_enqueued_events_once(
    tmp_path: Path,
) -> None:
    """Migration 0004 moves the 'enqueued' event into the insert; a database created
    before it keeps its history and records each new job's event once."""
    path = tmp_path / "old.db"
    with sqlite3.connect(path, isolation_level=None) as conn:
        conn.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY)")
        for version, sql in load_migrations("queuelog.storage.sqlite"):
            if version < 4:
                for statement in _statements(sql):
                    conn.execute(statement)
                conn.execute("INSERT INTO schema_migrations VALUES (?)", (version,))
        # A job enqueued before the upgrade, with the event the code wrote then.
        conn.row_factory = sqlite3.Row
        # Written as that schema's insert was (later migrations add columns).
        old_id = conn.execute(
            "INSERT INTO jobs (type, payload, principal, run_at, created_at, updated_at)"
            " VALUES ('noop', '{}', 'shop', :t, :t, :t) RETURNING id",
            {"t": to_micros(T0)},
        ).fetchone()[0]
        event = {"job_id": old_id, "at": to_micros(T0), "event": "enqueued"}
        conn.execute(
            "INSERT INTO job_events (job_id, at, event, to_status, actor)"
            " VALUES (:job_id, :at, :event, 'pending', 'shop')",
            event,
        )
    conn.close()
    store = SqliteStorage(path)
    try:
        assert [e.event for e in await store.job_events(old_id)] == [EventKind.ENQUEUED]
        ((job, _),) = await store.job_insert_many([new_job()], T0)
        assert job.id == old_id + 1
        assert [e.event for e in await store.job_events(job.id)] == [EventKind.ENQUEUED]
        assert [e.event for e in await store.job_events(old_id)] == [EventKind.ENQUEUED]
    finally:
        store.close()


async def _inserted_together(store: SqliteStorage, jobs: list[NewJob]) -> list[Any]:
    """Each job enqueued alone, all in one group of the writer (one loop turn)."""

    inserts = (store.job_insert_many([new], T0) for new in jobs)
    return await asyncio.gather(*inserts, return_exceptions=True)


async def test_a_failing_single_enqueue_in_a_group_fails_alone(tmp_path: Path) -> None:
    store = SqliteStorage(tmp_path / "f.db")
    try:
        await store.job_insert_many([new_job(key="k1", fingerprint="f1")], T0)
        answers = await _inserted_together(
            store, [new_job(), new_job(key="k1", fingerprint="other"), new_job()]
        )
        refused = answers[1]
        assert isinstance(refused, IdempotencyKeyReused)
        for answer in (answers[0], answers[2]):
            ((job, created),) = answer
            assert created and await store.job_get(job.id) == job
        assert len(read(store, "SELECT id FROM jobs")) == 3
    finally:
        store.close()


def test_hardening_08_the_data_folder_and_files_are_owner_only_under_umask_022(
    tmp_path: Path,
) -> None:
    previous = os.umask(0o022)
    try:
        store = SqliteStorage(tmp_path / "data" / "q.db")  # migrating writes -wal and -shm
        modes = {
            name: stat.S_IMODE((tmp_path / "data" / name).stat().st_mode)
            for name in ("q.db", "q.db-wal", "q.db-shm")
        }
        store.close()
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "data").stat().st_mode) == 0o700
    assert modes == {"q.db": 0o600, "q.db-wal": 0o600, "q.db-shm": 0o600}


async def test_workflows_migration_keeps_every_column_and_row_whenever_it_runs(
    tmp_path: Path,
) -> None:
    """Migration 0009 widens the status CHECK in place: on a database that took the later
    migrations first (0010's trace columns), every row and column stays, 'waiting' is
    admitted, anything else still refused, and the migrations after it see the edit."""
    path = tmp_path / "later-first.db"
    with sqlite3.connect(path, isolation_level=None) as conn:
        conn.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY)")
        for version, sql in load_migrations("queuelog.storage.sqlite"):
            if version != 9:
                for statement in _statements(sql):
                    conn.execute(statement)
                conn.execute("INSERT INTO schema_migrations VALUES (?)", (version,))
        old_id = conn.execute(
            "INSERT INTO jobs (type, payload, principal, run_at, created_at, updated_at,"
            " traceparent) VALUES ('noop', '{}', 'shop', :t, :t, :t, 'tp') RETURNING id",
            {"t": to_micros(T0)},
        ).fetchone()[0]
        conn.execute("DELETE FROM jobs WHERE id = ?", (old_id,))  # ids go on past it
        kept = conn.execute(
            "INSERT INTO jobs (type, payload, principal, run_at, created_at, updated_at,"
            " traceparent) VALUES ('noop', '{}', 'shop', :t, :t, :t, 'tp') RETURNING id",
            {"t": to_micros(T0)},
        ).fetchone()[0]
    conn.close()
    store = SqliteStorage(path)
    try:
        old = await store.job_get(kept)
        assert old is not None and old.trace_context is not None
        assert old.trace_context.traceparent == "tp" and old.depends_on == ()
        waiting = replace(new_job(), depends_on=(kept,))
        ((job, _),) = await store.job_insert_many([waiting], T0)
        assert job.status is JobStatus.WAITING and job.id == kept + 1
        assert store.integrity_check() == "ok"
    finally:
        store.close()
    with sqlite3.connect(path) as conn, pytest.raises(sqlite3.IntegrityError, match="CHECK"):
        conn.execute("UPDATE jobs SET status = 'sleeping' WHERE id = ?", (kept,))
    conn.close()


SCANS = {
    "counts": lambda store: store.job_stats(T0),
    "chart": lambda store: store.job_event_counts(T0 - timedelta(hours=1), T0, 60),
    "listing": lambda store: store.job_list(JobListParams(limit=10, status=JobStatus.FAILED)),
    "own listing": lambda store: store.job_list(JobListParams(limit=10, principal="shop")),
}


@pytest.mark.parametrize("scan", SCANS.values(), ids=SCANS.keys())
async def test_a_read_that_grows_with_the_table_lets_the_loop_serve_meanwhile(
    tmp_path: Path, scan: Any
) -> None:
    """A count or a listing filtered by a rare status reads every job: while it does,
    a job's seek (what claims, enqueues and awaited results read) is answered."""
    store = SqliteStorage(tmp_path / "s.db")
    try:
        ((job, _),) = await store.job_insert_many([new_job()], T0)
        answered: list[str] = []

        async def answer(name: str, read: Any) -> None:
            await read
            answered.append(name)

        await asyncio.gather(answer("scan", scan(store)), answer("seek", store.job_get(job.id)))
        assert answered == ["seek", "scan"]
    finally:
        store.close()


def _many_events(store: SqliteStorage, count: int) -> None:
    """``count`` events of one job, a microsecond apart from T0, written straight in."""
    with closing(sqlite3.connect(store.path)) as conn, conn:
        conn.execute(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)"
            " INSERT INTO job_events (job_id, at, event, from_status, to_status, actor)"
            " SELECT 1, ? + i, 'claimed', 'pending', 'running', 'w' FROM n",
            (count, to_micros(T0)),
        )


async def test_the_loop_goes_on_while_a_long_scan_runs(tmp_path: Path) -> None:
    """The chart's count over a large hour of events: the loop keeps turning (claims,
    enqueues) until it answers, rather than once it has."""
    store = SqliteStorage(tmp_path / "l.db")
    try:
        _many_events(store, 600_000)
        turns = 0

        async def turning() -> None:
            nonlocal turns
            while True:
                await asyncio.sleep(0.001)
                turns += 1

        ticker = asyncio.ensure_future(turning())
        await asyncio.sleep(0.01)
        before = turns
        counts = await store.job_event_counts(T0, T0 + timedelta(hours=1), 3600)
        during = turns - before
        ticker.cancel()
        assert [c.count for c in counts] == [600_000]
        assert during >= 5
    finally:
        store.close()


async def test_closing_the_store_stops_a_scan_under_way(tmp_path: Path) -> None:
    """A scan on its thread when the server shuts down: it stops, and close() waits for
    it (closing its connection under it crashed the process); reads after are refused."""
    store = SqliteStorage(tmp_path / "c.db")
    _many_events(store, 600_000)
    scan = asyncio.ensure_future(store.job_event_counts(T0, T0 + timedelta(hours=1), 3600))
    await asyncio.sleep(0.02)
    store.close()
    with pytest.raises(StorageUnavailable):
        await scan
    with pytest.raises(StorageUnavailable):
        await store.job_stats(T0)
    with pytest.raises(StorageUnavailable):
        await store.job_get(1)


def test_scans_from_ever_new_threads_reuse_the_stores_connections(tmp_path: Path) -> None:
    """The event loop's worker threads come and go; the scans' read connections stay
    the store's, not one more left open with each thread."""
    store = SqliteStorage(tmp_path / "t.db")
    hour = (T0, T0 + timedelta(hours=1), 60)

    def scans_from_a_new_thread(count: int) -> None:
        async def at_once() -> None:
            await asyncio.gather(*(store.job_event_counts(*hour) for _ in range(count)))

        thread = threading.Thread(target=asyncio.run, args=(at_once(),))
        thread.start()
        thread.join()

    try:
        scans_from_a_new_thread(3)
        files = len(os.listdir("/proc/self/fd"))
        for _ in range(4):
            scans_from_a_new_thread(1)
        assert len(os.listdir("/proc/self/fd")) == files
    finally:
        store.close()
