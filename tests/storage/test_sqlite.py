"""SQLite specifics: WAL, durability setting, migrations applied once."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import stat
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from queuelog.errors import IdempotencyKeyReused
from queuelog.models import EventKind, Priority
from queuelog.storage.base import FinishParams, NewJob, new_job_params
from queuelog.storage.sqlfile import load_migrations
from queuelog.storage.sqlite import transactions as tx
from queuelog.storage.sqlite.store import Q, SqliteStorage
from queuelog.storage.sqlite.transactions import (
    _statements,
    held_batch_params,
    uniform_batch_params,
)
from tests.storage.test_conformance import T0, claim, new_job


@pytest.mark.parametrize(("durability", "level"), [("full", 2), ("normal", 1)])
def test_durability_sets_synchronous_and_wal(tmp_path: Path, durability: str, level: int) -> None:
    store = SqliteStorage(tmp_path / "d.db", durability=durability)
    try:
        reader = store._reader()
        assert reader.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert reader.execute("PRAGMA synchronous").fetchone()[0] == level
        assert reader.execute("PRAGMA busy_timeout").fetchone()[0] == 30000
    finally:
        store.close()


def test_migrations_apply_once_and_survive_reopening(tmp_path: Path) -> None:
    path = tmp_path / "m.db"
    SqliteStorage(path).close()
    SqliteStorage(path).close()
    with sqlite3.connect(path) as conn:
        versions = [r[0] for r in conn.execute("SELECT version FROM schema_migrations")]
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert versions == [number for number, _ in load_migrations("queuelog.storage.sqlite")]
    assert versions[0] == 1 and len(set(versions)) == len(versions)
    assert {"jobs", "job_events", "api_keys"} <= tables


@pytest.mark.parametrize("types", [None, '["noop"]'])
def test_claim_walks_the_ready_index_without_sorting(tmp_path: Path, types: str | None) -> None:
    store = SqliteStorage(tmp_path / "p.db")
    try:
        plan = store._reader().execute(
            "EXPLAIN QUERY PLAN " + Q["job_claim_pick"], {"now": 0, "types": types, "limit": 1}
        )
        details = " ".join(str(row[-1]) for row in plan)
        assert "USING INDEX jobs_ready" in details and "TEMP B-TREE" not in details
    finally:
        store.close()


def test_scheduled_jobs_stay_out_of_the_ready_index_until_due(tmp_path: Path) -> None:
    store = SqliteStorage(tmp_path / "s.db")
    try:
        promote = store._reader().execute("EXPLAIN QUERY PLAN " + Q["job_promote_due"], {"now": 0})
        assert "USING INDEX jobs_pending_run_at" in " ".join(str(r[-1]) for r in promote)
        later = T0 + timedelta(hours=1)
        store.job_insert_many([new_job(priority=Priority.HIGH, run_at=later)] * 50, T0)
        store.job_insert_many([new_job(priority=Priority.LOW)], T0)
        flags = store._reader().execute("SELECT priority, scheduled FROM jobs").fetchall()
        assert sorted({(r[0], r[1]) for r in flags}) == [(0, 0), (20, 1)]
        (ready,) = claim(store, T0, limit=10)
        assert ready.priority == Priority.LOW
        assert len(claim(store, later, limit=100)) == 50
    finally:
        store.close()


def test_migration_statements_end_where_sqlite_finds_them_complete() -> None:
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


def test_a_database_of_the_previous_schema_records_enqueued_events_once(tmp_path: Path) -> None:
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
        (((old, _),),) = tx.insert_rows(conn, [tx.SingleInsert(new_job(), T0)])
        old_id = old.id
        event = {"job_id": old_id, "at": new_job_params(new_job(), T0)["now"], "event": "enqueued"}
        conn.execute(
            "INSERT INTO job_events (job_id, at, event, to_status, actor)"
            " VALUES (:job_id, :at, :event, 'pending', 'shop')",
            event,
        )
    conn.close()
    store = SqliteStorage(path)
    try:
        assert [e.event for e in store.job_events(old_id)] == [EventKind.ENQUEUED]
        ((job, _),) = store.job_insert_many([new_job()], T0)
        assert job.id == old_id + 1
        assert [e.event for e in store.job_events(job.id)] == [EventKind.ENQUEUED]
        assert [e.event for e in store.job_events(old_id)] == [EventKind.ENQUEUED]
    finally:
        store.close()


@pytest.mark.parametrize(
    "change",
    [
        {"idempotency_key": "k", "fingerprint": "f"},
        {"principal": "other"},
        {"max_retries": 7},
        {"lease_seconds": 5},
        {"run_at": T0 + timedelta(seconds=1)},
    ],
)
def test_only_a_batch_alike_but_for_type_payload_and_priority_takes_the_uniform_insert(
    change: dict[str, object],
) -> None:
    alike = [new_job(), new_job("send_email", Priority.HIGH), new_job()]
    params = uniform_batch_params(alike, T0)
    assert params is not None and params["principal"] == "shop"
    assert [j["type"] for j in json.loads(params["jobs"])] == ["noop", "send_email", "noop"]
    assert uniform_batch_params([*alike, replace(new_job(), **change)], T0) is None


def test_the_uniform_insert_stores_every_column_as_a_single_insert(tmp_path: Path) -> None:
    """Row for row, all columns (the scheduled flag included), on jobs due now and later."""
    store = SqliteStorage(tmp_path / "u.db")
    try:
        for run_at in (T0, T0 + timedelta(seconds=60)):
            batch = [new_job(run_at=run_at), new_job("send_email", Priority.HIGH, run_at=run_at)]
            assert uniform_batch_params(batch, T0) is not None
            together = [job.id for job, _ in store.job_insert_many(batch, T0)]
            alone = [store.job_insert_many([new], T0)[0][0].id for new in batch]
            for a, b in zip(together, alone, strict=True):
                rows = store._reader().execute("SELECT * FROM jobs WHERE id IN (?, ?)", (a, b))
                first, second = (dict(r) for r in rows)
                assert first.pop("id") != second.pop("id") and first == second
    finally:
        store.close()


@pytest.mark.parametrize(
    "change",
    [
        {"worker_name": "v"},  # another worker's item
        {"now": T0 + timedelta(seconds=1)},
        {"error": "boom"},  # a failure
        {"job_id": 1},  # the same job twice
    ],
)
def test_only_one_worker_s_completions_of_distinct_jobs_take_the_batch_statements(
    change: dict[str, object],
) -> None:
    batch = [FinishParams(n, f"token-{n}", "w", T0) for n in (1, 2, 3)]
    params = held_batch_params(batch)
    assert params is not None and params["worker_name"] == "w"
    assert json.loads(params["tokens"]) == {"1": "token-1", "2": "token-2", "3": "token-3"}
    assert held_batch_params(batch[:1]) is None  # one item: finished alone
    assert held_batch_params([*batch, replace(batch[1], **change)]) is None


def _noting(calls: list[str], name: str, real: Any) -> Any:
    def noted(*args: Any, **kwargs: Any) -> Any:
        calls.append(name)
        return real(*args, **kwargs)

    return noted


def _inserted_together(store: SqliteStorage, jobs: list[NewJob]) -> list[Any]:
    """Each job enqueued alone, all in one group of the writer (one loop turn)."""

    async def together() -> list[Any]:
        inserts = (store.job_insert_many_async([new], T0) for new in jobs)
        return await asyncio.gather(*inserts, return_exceptions=True)

    return asyncio.run(together())


def test_the_single_enqueues_of_one_group_are_one_insert_answered_as_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SqliteStorage(tmp_path / "g.db")
    try:
        ((held, _),) = store.job_insert_many([new_job(key="k1", fingerprint="f1")], T0)
        calls: list[str] = []
        for name in ("insert_rows", "insert_many"):  # together, and alone
            real = getattr(tx, name)
            monkeypatch.setattr(tx, name, _noting(calls, name, real))
        later = T0 + timedelta(seconds=60)
        answers = _inserted_together(
            store,
            [
                new_job(),
                new_job("send_email", Priority.HIGH, run_at=later),
                new_job(key="k2", fingerprint="a"),
                new_job(key="k2", fingerprint="a"),  # the same request again, same group
                new_job(key="k1", fingerprint="f1"),  # a key an earlier job holds
                new_job(principal="other", key="k1", fingerprint="f9"),  # another's key
            ],
        )
        monkeypatch.undo()
        assert calls == ["insert_rows"]
        (
            ((plain, c1),),
            ((scheduled, c2),),
            ((k2, c3),),
            ((again, c4),),
            ((k1, c5),),
            ((theirs, c6),),
        ) = answers
        assert [c1, c2, c3, c4, c5, c6] == [True, True, True, False, False, True]
        assert again == k2 and k1 == held and theirs.principal == "other"
        made = [plain, scheduled, k2, theirs]
        assert len({j.id for j in made}) == 4 and held.id not in {j.id for j in made}
        for job in made:  # each answer is the job as stored, with its one event
            assert store.job_get(job.id) == job
            assert [e.event for e in store.job_events(job.id)] == [EventKind.ENQUEUED]
        assert scheduled.type == "send_email" and scheduled.run_at == later
        # Row for row, a job inserted with others is stored as one inserted alone.
        for job, new in (
            (plain, new_job()),
            (scheduled, new_job("send_email", Priority.HIGH, run_at=later)),
        ):
            ((alone, _),) = store.job_insert_many([new], T0)
            rows = store._reader().execute(
                "SELECT * FROM jobs WHERE id IN (?, ?)", (job.id, alone.id)
            )
            first, second = (dict(r) for r in rows)
            assert first.pop("id") != second.pop("id") and first == second
    finally:
        store.close()


def test_a_failing_single_enqueue_in_a_group_fails_alone(tmp_path: Path) -> None:
    store = SqliteStorage(tmp_path / "f.db")
    try:
        store.job_insert_many([new_job(key="k1", fingerprint="f1")], T0)
        answers = _inserted_together(
            store, [new_job(), new_job(key="k1", fingerprint="other"), new_job()]
        )
        refused = answers[1]
        assert isinstance(refused, IdempotencyKeyReused)
        for answer in (answers[0], answers[2]):
            ((job, created),) = answer
            assert created and store.job_get(job.id) == job
        assert len(list(store._reader().execute("SELECT id FROM jobs"))) == 3
    finally:
        store.close()


def test_a_group_of_more_single_enqueues_than_one_statement_takes_answers_each(
    tmp_path: Path,
) -> None:
    store = SqliteStorage(tmp_path / "m.db")
    try:
        count = tx.ROWS_PER_INSERT + 6  # two statements
        jobs = [
            new_job("send_email" if n % 3 else "noop", list(Priority)[n % 4], max_retries=n)
            for n in range(count)
        ]
        answers = _inserted_together(store, jobs)
        made = [answer[0][0] for answer in answers]
        assert [(j.type, j.priority, j.max_retries) for j in made] == [
            (n.type, n.priority, n.max_retries) for n in jobs
        ]
        assert len({j.id for j in made}) == count
        assert all(store.job_get(job.id) == job for job in made)
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
