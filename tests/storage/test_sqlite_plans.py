"""The SQLite claim path must not cost O(pending jobs): checked on its query plans."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from queuelog.storage.sqlite.store import Q, SqliteStorage

ARGS = {
    "worker_id": "w",
    "worker_name": "w",
    "now": 1,
    "lease_seconds": None,
    "types": None,
    "limit": 1,
}


@pytest.fixture
def conn(tmp_path: Path) -> sqlite3.Connection:
    SqliteStorage(tmp_path / "plans.db").close()
    return sqlite3.connect(tmp_path / "plans.db")


def plan(conn: sqlite3.Connection, name: str) -> str:
    rows = conn.execute("EXPLAIN QUERY PLAN " + Q[name], ARGS).fetchall()
    return "\n".join(row[3] for row in rows)


def test_claim_guard_finds_rows_by_id_not_by_scanning_pending(conn: sqlite3.Connection) -> None:
    steps = plan(conn, "job_claim")
    assert "SEARCH jobs USING INTEGER PRIMARY KEY (rowid=?)" in steps
    assert "jobs_status_type" not in steps


def test_expired_lease_search_is_a_range_scan(conn: sqlite3.Connection) -> None:
    steps = plan(conn, "job_expired_leases")
    assert "USING INDEX jobs_leases (lease_expires_at<?)" in steps
    assert "TEMP B-TREE" not in steps
