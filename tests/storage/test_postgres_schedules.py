"""PostgreSQL only: schedules changed by several nodes (stores) on one database at once."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import psycopg
import pytest

from queuelog.errors import InvalidState, NotFound
from queuelog.storage.postgres.store import PostgresStorage
from tests.conftest import run_blocking
from tests.postgres import fresh_schema
from tests.storage.test_conformance import T0
from tests.storage.test_schedules import schedule


@pytest.fixture
def schema() -> Iterator[str]:
    with fresh_schema() as url:
        yield url


@pytest.fixture
def nodes(schema: str) -> Iterator[list[PostgresStorage]]:
    """Three stores on one fresh schema, as three queuelog nodes would be."""
    stores = [PostgresStorage(schema, pool_size=2) for _ in range(3)]
    yield stores
    for store in stores:
        store.close()


def test_a_delete_that_lost_its_schedule_to_another_is_404_beside_one_made_since(
    nodes: list[PostgresStorage], schema: str
) -> None:
    """Another request deletes the API schedule and one of its name is made again while
    this delete waits for the row: the schedule it meant is gone (404). It answered 409,
    "a schedule from the config file", for a schedule of the API."""
    run_blocking(nodes[0].schedule_insert(schedule("tick"), T0))
    with psycopg.connect(schema) as other:
        other.execute("CREATE TEMP TABLE made_again AS SELECT * FROM schedules")
        other.execute("DELETE FROM schedules WHERE name = 'tick'")
        other.execute("INSERT INTO schedules SELECT * FROM made_again")
        answers: list[BaseException | None] = []

        def delete() -> None:
            try:
                run_blocking(nodes[1].schedule_delete("tick"))
                answers.append(None)
            except (NotFound, InvalidState) as exc:
                answers.append(exc)

        thread = threading.Thread(target=delete, daemon=True)
        thread.start()
        _wait_for_a_session_blocked_by(schema, other.info.backend_pid)
        other.commit()
        thread.join(10)
    assert len(answers) == 1 and isinstance(answers[0], NotFound), answers
    made = run_blocking(nodes[2].schedule_get("tick"))
    assert made is not None and made.source == "api"


def _wait_for_a_session_blocked_by(url: str, holder: int) -> None:
    blocked = "SELECT 1 FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))"
    with psycopg.connect(url, autocommit=True) as conn:
        for _ in range(200):
            if conn.execute(blocked, (holder,)).fetchone():
                return
            time.sleep(0.05)
    raise AssertionError("the delete never waited for the row")
