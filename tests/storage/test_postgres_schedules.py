"""PostgreSQL only: schedules changed by several nodes (stores) on one database at once."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg

from queuelog.errors import InvalidState, NotFound
from queuelog.storage.postgres.store import PostgresStorage
from tests.conftest import run_blocking
from tests.postgres import fresh_schema
from tests.storage.test_conformance import T0
from tests.storage.test_schedules import job_of, schedule


@contextmanager
def two_nodes() -> Iterator[tuple[str, list[PostgresStorage]]]:
    """A fresh schema's URL and two stores on it, as two queuelog nodes would be."""
    with fresh_schema() as url:
        stores = [PostgresStorage(url, pool_size=2) for _ in range(2)]
        try:
            yield url, stores
        finally:
            for store in stores:
                store.close()


def test_a_delete_that_lost_its_schedule_to_another_is_404_beside_one_made_since() -> None:
    """Another request deletes the API schedule and one of its name is made again while
    this delete waits for the row: the schedule it meant is gone (404). It answered 409,
    "a schedule from the config file", for a schedule of the API."""
    with two_nodes() as (url, (first, second)):
        run_blocking(first.schedule_insert(schedule("tick"), T0))
        answers = _delete_while_made_again(url, second, "tick")
        assert len(answers) == 1 and isinstance(answers[0], NotFound), answers
        made = run_blocking(first.schedule_get("tick"))
        assert made is not None and made.source == "api"


def _delete_while_made_again(url: str, node: PostgresStorage, name: str) -> list[object]:
    """What ``node``'s delete of ``name`` answers while another transaction deletes the
    schedule and makes one of the name again (None: deleted)."""
    answers: list[object] = []

    def delete() -> None:
        try:
            run_blocking(node.schedule_delete(name))
            answers.append(None)
        except (NotFound, InvalidState) as exc:
            answers.append(exc)

    with psycopg.connect(url) as other:
        other.execute("CREATE TEMP TABLE made_again AS SELECT * FROM schedules")
        other.execute("DELETE FROM schedules WHERE name = %s", (name,))
        other.execute("INSERT INTO schedules SELECT * FROM made_again")
        thread = threading.Thread(target=delete, daemon=True)
        thread.start()
        _wait_for_a_session_blocked_by(url, other.info.backend_pid)
        other.commit()
        thread.join(10)
    return answers


def _wait_for_a_session_blocked_by(url: str, holder: int) -> None:
    blocked = "SELECT 1 FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))"
    with psycopg.connect(url, autocommit=True) as conn:
        for _ in range(200):
            if conn.execute(blocked, (holder,)).fetchone():
                return
            time.sleep(0.05)
    raise AssertionError("the delete never waited for the row")


def test_hardening_51_triggers_at_once_on_two_nodes_leave_the_newest_job_as_the_last() -> None:
    """Triggers of one schedule at once, on two nodes: its last job is the newest one,
    which a fire without overlap reads. A trigger made its job before it locked the
    schedule, so one whose job was older could record it last."""
    with two_nodes() as (_, nodes):
        run_blocking(nodes[0].schedule_insert(schedule("busy", overlap=False), T0))
        for _ in range(20):  # bounded rounds: each may interleave the triggers anew
            made = _triggered_at_once(nodes, "busy", 12)
            found = run_blocking(nodes[1].schedule_get("busy"))
            assert found is not None and found.last_job_id == max(made), (made, found)


def _triggered_at_once(nodes: list[PostgresStorage], name: str, count: int) -> list[int]:
    """The ids of the jobs ``count`` triggers of ``name`` made, sent at once over ``nodes``."""
    made: list[int] = []
    lock = threading.Lock()

    def trigger(node: PostgresStorage) -> None:
        job = run_blocking(node.schedule_trigger(name, job_of(name, T0)))
        with lock:
            made.append(job.id)

    threads = [
        threading.Thread(target=trigger, args=(nodes[i % len(nodes)],)) for i in range(count)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(made) == count
    return made
