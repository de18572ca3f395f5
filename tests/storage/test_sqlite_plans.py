"""The SQLite claim path must not cost O(pending jobs): checked on its query plans."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

import pytest

from queuelog.models import FlowLimits
from queuelog.storage.protocol import ClaimParams
from queuelog.storage.sqlite.store import Q, SqliteStorage
from queuelog.storage.sqlite.transactions import claim

T = TypeVar("T")
NOW = datetime(2026, 1, 1, tzinfo=UTC)  # after every job's run_at and created_at
ARGS = {
    "worker_id": "w",
    "worker_name": "w",
    "now": 1,
    "lease_seconds": None,
    "types": '["noop"]',
    "limit": 1,
    "ids": "[1]",
    "items": "[]",
    "tokens": "{}",
    "results": "{}",
}


@pytest.fixture
def conn(tmp_path: Path) -> sqlite3.Connection:
    SqliteStorage(tmp_path / "plans.db").close()
    return sqlite3.connect(tmp_path / "plans.db")


def plan(conn: sqlite3.Connection, name: str) -> str:
    rows = conn.execute("EXPLAIN QUERY PLAN " + Q[name], ARGS).fetchall()
    return "\n".join(row[3] for row in rows)


def test_claimed_rows_are_found_by_id_not_by_scanning_pending(conn: sqlite3.Connection) -> None:
    steps = plan(conn, "job_claim")
    assert "SEARCH jobs USING INTEGER PRIMARY KEY (rowid=?)" in steps
    # The pick seeks each type's ready index in claim order (LIMIT ends it): no walk.
    assert "SEARCH jobs USING INDEX jobs_ready_type (type=?)" in steps
    assert "SCAN jobs" not in steps and "jobs_status_type" not in steps


def test_jobs_a_flow_claim_picked_are_found_by_id_not_by_scanning_pending(
    conn: sqlite3.Connection,
) -> None:
    steps = plan(conn, "job_claim_ids")
    assert "SEARCH jobs USING INTEGER PRIMARY KEY (rowid=?)" in steps
    assert "SCAN jobs" not in steps and "jobs_status_type" not in steps


def test_expired_lease_search_is_a_range_scan(conn: sqlite3.Connection) -> None:
    steps = plan(conn, "job_expired_leases")
    assert "USING INDEX jobs_leases (lease_expires_at<?)" in steps
    assert "TEMP B-TREE" not in steps


def test_batch_completion_finds_each_job_by_id(conn: sqlite3.Connection) -> None:
    steps = plan(conn, "job_complete_batch")
    # The items are walked and each job found by its id; scanning the running jobs
    # through a status index would cost O(jobs held) per batch.
    walked = "SCAN i VIRTUAL TABLE"
    assert steps.index(walked) < steps.index("SEARCH jobs USING INTEGER PRIMARY KEY")
    assert "jobs_status_type" not in steps and "jobs_leases" not in steps


def _counted(conn: sqlite3.Connection, work: Callable[[], T]) -> tuple[T, int]:
    """What ``work`` gave, and how many hundreds of VM instructions it took."""
    steps = 0

    def count() -> int:
        nonlocal steps
        steps += 1
        return 0

    conn.set_progress_handler(count, 100)
    try:
        return work(), steps
    finally:
        conn.set_progress_handler(None, 100)


def _steps(conn: sqlite3.Connection, name: str, args: dict[str, object]) -> int:
    """How many hundreds of VM instructions the named query took."""
    return _counted(conn, lambda: conn.execute(Q[name], args).fetchall())[1]


def test_a_saturated_group_of_many_pending_jobs_is_not_walked(conn: sqlite3.Connection) -> None:
    conn.execute(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100000)"
        " INSERT INTO jobs (type, principal, run_at, created_at, updated_at, job_group)"
        " SELECT 'grouped', 'shop', 1, i, 1, 'a' FROM n"
    )
    conn.execute(
        "INSERT INTO jobs (type, principal, run_at, created_at, updated_at, job_group, status)"
        " VALUES ('grouped', 'shop', 1, 0, 1, 'a', 'running'),"
        " ('grouped', 'shop', 1, 200000, 1, 'b', 'pending')"
    )
    conn.execute("ANALYZE")
    args = {"type": "grouped", "now": 10, "limit": 10, "group": "b"}
    for name in (
        "ready_group_heads",
        "ready_ungrouped",
        "ready_of_group",
        "type_running_groups",
        "type_running",
    ):
        # Walking the held-back group would take thousands of hundreds of instructions.
        assert _steps(conn, name, args) < 100, name
    conn.row_factory = sqlite3.Row
    heads = conn.execute(Q["ready_group_heads"], args).fetchall()
    assert [(r["job_group"], r["created_at"]) for r in heads] == [("a", 1), ("b", 200000)]


WORKFLOW_STATEMENTS = (
    "job_dependency_hold",
    "job_settle",
    "job_cancel_cascade",
    "job_cancel_dependents",
    "job_release_dependents",
    "job_reinstate_dependents",
    "job_cancel_moved",
    "job_waiting_dependents",
    "job_recount",
    "job_ready_counted",
    "job_list_dependents",
)


@pytest.mark.parametrize("name", WORKFLOW_STATEMENTS)
def test_workflow_statements_find_jobs_by_id_or_by_dependency(
    conn: sqlite3.Connection, name: str
) -> None:
    # Waiting and cancelled jobs may be many: no statement walks them by status.
    args = {"ids": "[1]", "jobs": '[{"id": 1}]', "now": 1, "depends_on": 1, "limit": 1}
    args |= dict.fromkeys(("principal", "holder", "before_id", "status", "type"))
    args |= {"idempotency_key": None, "max_bytes": 1}
    rows = conn.execute("EXPLAIN QUERY PLAN " + Q[name], args).fetchall()
    steps = "\n".join(row[3] for row in rows)
    assert "jobs_status_type" not in steps, steps
    assert "SCAN jobs" not in steps and "SCAN d" not in steps, steps


def test_a_job_s_end_finds_its_dependents_through_the_dependency_index(
    conn: sqlite3.Connection,
) -> None:
    rows = conn.execute("EXPLAIN QUERY PLAN " + Q["job_release_dependents"], ARGS).fetchall()
    steps = "\n".join(row[3] for row in rows)
    assert "USING COVERING INDEX job_dependencies_dependency (depends_on_id=?)" in steps


def test_a_claim_of_a_group_limited_type_reads_its_room_not_every_group(
    conn: sqlite3.Connection,
) -> None:
    """20,000 groups with a ready job each (a tenant per group): a claim of 10 reads a
    short run of the type's ready jobs, not the first job of every group (which held
    the server's loop for a tenth of a second and more)."""
    conn.execute(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 20000)"
        " INSERT INTO jobs (type, principal, run_at, created_at, updated_at, job_group)"
        " SELECT 'grouped', 'shop', 1, i, 1, 'g' || i FROM n"
    )
    conn.execute("ANALYZE")
    conn.row_factory = sqlite3.Row
    limits = {"grouped": FlowLimits(group_concurrency=1)}
    params = ClaimParams("w", "w/1", limit=10, now=NOW, types=["grouped"], limits=limits)
    (claimed, _, _), steps = _counted(conn, lambda: claim(conn, params))
    assert [job.group for job in claimed] == [f"g{i}" for i in range(1, 11)]
    assert steps < 200


def test_a_claim_naming_a_type_reads_none_of_the_jobs_of_others_ahead(
    conn: sqlite3.Connection,
) -> None:
    """100,000 ready jobs of one type ahead of 10 of another: a claim naming the second
    reads its jobs, not the others (a filter on the ready index walked all 100,000,
    holding the write lock for a tenth of a second a claim)."""
    conn.execute(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100010)"
        " INSERT INTO jobs (type, principal, run_at, created_at, updated_at)"
        " SELECT CASE WHEN i > 100000 THEN 'rare' ELSE 'bulk' END, 'shop', 1, i, 1 FROM n"
    )
    conn.execute("ANALYZE")
    conn.row_factory = sqlite3.Row
    params = ClaimParams(worker_name="w", worker_id="w/1", limit=5, now=NOW, types=["rare"])
    (claimed, _, _), steps = _counted(conn, lambda: claim(conn, params))
    assert [job.created_at for job in claimed] == [
        datetime.fromtimestamp(i / 1_000_000, UTC) for i in range(100001, 100006)
    ]
    assert steps < 100


def test_when_a_type_s_next_job_is_due_is_one_seek_whatever_others_scheduled(
    conn: sqlite3.Connection,
) -> None:
    """100,000 jobs of one type scheduled for later: a claim naming another type that
    finds nothing ready asks when its next job is due without reading them (a filter on
    the scheduled jobs walked them all, at each look of a long poll)."""
    conn.execute(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100000)"
        " INSERT INTO jobs (type, principal, run_at, created_at, updated_at, scheduled)"
        " SELECT 'bulk', 'shop', 1000 + i, 1, 1, 1 FROM n"
    )
    conn.execute(
        "INSERT INTO jobs (type, principal, run_at, created_at, updated_at, scheduled)"
        " VALUES ('rare', 'shop', 500000, 1, 1, 1)"
    )
    conn.execute("ANALYZE")
    for types, due in (('["other"]', None), ('["other", "rare"]', 500000)):
        args = {"types": types}
        (row,), steps = _counted(conn, lambda a=args: conn.execute(Q["job_next_due"], a).fetchall())
        assert row[0] == due and steps < 10, (types, steps)


def test_the_running_jobs_are_listed_without_reading_the_others(
    conn: sqlite3.Connection,
) -> None:
    """100,000 completed jobs and 2 running: the running ones (the dashboard's overview
    asks for them every few seconds) are found through the leases' index; walking
    every job newest first read the whole table on the server's loop."""
    conn.execute(
        "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 100002)"
        " INSERT INTO jobs (type, principal, run_at, created_at, updated_at, status,"
        " lease_expires_at, claimed_by)"
        " SELECT 'noop', 'shop', 1, i, 1, CASE WHEN i <= 2 THEN 'running' ELSE 'completed'"
        " END, CASE WHEN i <= 2 THEN 100 END, 'w' FROM n"
    )
    conn.execute("ANALYZE")
    args = {"before_id": None, "status": "running", "type": None, "idempotency_key": None}
    args["max_bytes"] = 1 << 20
    for holder in (None, "w"):
        query = {**args, "holder": holder, "limit": 100}
        rows, steps = _counted(
            conn, lambda q=query: conn.execute(Q["job_list_running"], q).fetchall()
        )
        assert [row[0] for row in rows] == [2, 1] and steps < 10, (holder, steps)
