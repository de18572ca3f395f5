"""The SQLite group-commit writer: many requests, one transaction, failures isolated."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from queuelog.errors import StorageUnavailable
from queuelog.storage.sqlite.writer import GroupWriter

pytestmark = pytest.mark.anyio


class Traced:
    """A connection factory that records the statements the writer's connection runs."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.statements: list[str] = []

    def __call__(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.set_trace_callback(self.statements.append)
        return conn

    def commits(self) -> int:
        return self.statements.count("COMMIT")


@pytest.fixture
def traced(tmp_path: Path) -> Traced:
    return Traced(tmp_path / "w.db")


@pytest.fixture
def writer(traced: Traced) -> Iterator[GroupWriter]:
    writer = GroupWriter(traced, busy_timeout=2.0)
    writer.run_now(lambda c: c.execute("CREATE TABLE t (v INTEGER UNIQUE)"))
    yield writer
    writer.close()


def _insert(value: int) -> Any:
    return lambda c: c.execute("INSERT INTO t VALUES (?)", (value,)).rowcount


def _stored(traced: Traced) -> list[int]:
    with sqlite3.connect(traced.path) as conn:
        return [r[0] for r in conn.execute("SELECT v FROM t ORDER BY v")]


async def test_work_awaited_together_commits_in_one_group(
    writer: GroupWriter, traced: Traced
) -> None:
    before = traced.commits()
    answers = await asyncio.gather(*(writer.run(_insert(v)) for v in range(20)))
    assert answers == [1] * 20
    assert traced.commits() - before == 1
    assert _stored(traced) == list(range(20))


async def test_a_failing_operation_alone_is_undone_and_run_once(
    writer: GroupWriter, traced: Traced
) -> None:
    await writer.run(_insert(1))
    with pytest.raises(sqlite3.IntegrityError):
        await writer.run(_insert(1))
    inserts = [s for s in traced.statements if s.startswith("INSERT")]
    assert len(inserts) == 2 and _stored(traced) == [1]


async def test_a_group_with_a_failure_runs_again_isolated_and_keeps_the_rest_once(
    writer: GroupWriter, traced: Traced
) -> None:
    values = [*range(10), 5]  # the second 5 breaks the UNIQUE constraint
    answers = await asyncio.gather(
        *(writer.run(_insert(v)) for v in values), return_exceptions=True
    )
    assert answers[:10] == [1] * 10 and isinstance(answers[10], sqlite3.IntegrityError)
    assert _stored(traced) == list(range(10))
    assert "ROLLBACK TO op" in traced.statements


async def test_work_awaited_a_turn_later_joins_the_group(
    writer: GroupWriter, traced: Traced
) -> None:
    async def later() -> int:
        await asyncio.sleep(0)  # one turn after the first request
        value: int = await writer.run(_insert(2))
        return value

    before = traced.commits()
    assert await asyncio.gather(writer.run(_insert(1)), later()) == [1, 1]
    assert traced.commits() - before == 1


async def test_a_group_holds_at_most_max_group_requests(traced: Traced) -> None:
    writer = GroupWriter(traced, max_group=8)
    try:
        writer.run_now(lambda c: c.execute("CREATE TABLE t (v INTEGER UNIQUE)"))
        before = traced.commits()
        await asyncio.gather(*(writer.run(_insert(v)) for v in range(20)))
        assert traced.commits() - before == 3  # 8, 8 and 4
    finally:
        writer.close()


async def test_a_request_cancelled_before_its_group_runs_is_dropped(
    writer: GroupWriter, traced: Traced
) -> None:
    dropped = asyncio.ensure_future(writer.run(_insert(1)))
    await asyncio.sleep(0)
    dropped.cancel()
    assert await writer.run(_insert(2)) == 1
    assert _stored(traced) == [2]


def test_loops_on_several_threads_share_the_one_writer(writer: GroupWriter, traced: Traced) -> None:
    def insert_range(start: int) -> None:
        async def inserts() -> None:
            for v in range(start, start + 25):
                await writer.run(_insert(v))

        asyncio.run(inserts())

    threads = [threading.Thread(target=insert_range, args=(n * 100,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(_stored(traced)) == 100


async def test_work_awaited_after_close_is_refused(writer: GroupWriter) -> None:
    writer.close()
    assert not writer.alive
    with pytest.raises(RuntimeError, match="closed"):
        await writer.run(_insert(1))


async def test_another_process_s_lock_is_awaited_without_blocking_the_loop(
    writer: GroupWriter, traced: Traced
) -> None:
    other = sqlite3.connect(traced.path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process takes the write lock
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while not write.done():
            ticks += 1
            await asyncio.sleep(0.005)

    write = asyncio.ensure_future(writer.run(_insert(7)))
    ticker = asyncio.ensure_future(tick())
    await asyncio.sleep(0.2)
    assert not write.done() and ticks > 5  # waiting, and the loop goes on meanwhile
    other.execute("COMMIT")
    assert await asyncio.wait_for(write, 5) == 1
    await ticker
    other.close()
    assert _stored(traced) == [7]


async def test_a_lock_held_past_the_busy_timeout_refuses_the_group(traced: Traced) -> None:
    writer = GroupWriter(traced, busy_timeout=0.2)
    writer.run_now(lambda c: c.execute("CREATE TABLE t (v INTEGER UNIQUE)"))
    other = sqlite3.connect(traced.path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        started = time.monotonic()
        group = [writer.run(_insert(v)) for v in (1, 3, 4)]
        refused = await asyncio.gather(*group, return_exceptions=True)
        assert time.monotonic() - started < 10
    finally:
        other.execute("ROLLBACK")
        other.close()
    # Every request of the group is answered with its own domain error, not sqlite3's.
    assert all(isinstance(e, StorageUnavailable) and e.reason == "locked" for e in refused)
    assert len({id(e) for e in refused}) == 3
    assert writer.health.refused() == {"locked": 3} and not writer.health.writable
    assert await writer.run(_insert(2)) == 1  # the writer goes on once the lock is free
    assert writer.health.writable  # a stored write ended the fault
    writer.close()


async def test_a_failed_rollback_answers_the_group_and_the_writer_goes_on(
    writer: GroupWriter, traced: Traced
) -> None:
    def commits_itself(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO t VALUES (1)")
        conn.execute("COMMIT")  # ends the writer's transaction: its own COMMIT then fails

    with pytest.raises(sqlite3.OperationalError):
        await writer.run(commits_itself)
    assert await writer.run(_insert(2)) == 1


async def test_a_backlog_over_max_group_waits_for_a_locked_database_without_spinning(
    traced: Traced,
) -> None:
    writer = GroupWriter(traced, max_group=8, busy_timeout=5.0)
    writer.run_now(lambda c: c.execute("CREATE TABLE t (v INTEGER UNIQUE)"))
    other = sqlite3.connect(traced.path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        backlog = asyncio.gather(*(writer.run(_insert(v)) for v in range(60)))
        await asyncio.sleep(0.3)
        tries = traced.statements.count("BEGIN IMMEDIATE")
        # A retry every few milliseconds at most: not one per loop turn.
        assert tries < 100, tries
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert await asyncio.wait_for(backlog, 10) == [1] * 60
    assert _stored(traced) == list(range(60))
    writer.close()
