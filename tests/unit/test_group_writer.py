"""The SQLite group-commit writer: many requests, one transaction, failures isolated."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from queuelog.storage.sqlite.writer import _STOP, GroupWriter


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode = WAL")
    return conn


def _hold_writer(writer: GroupWriter) -> tuple[threading.Thread, threading.Event]:
    """Keep the writer busy until the returned event is set, so work piles up behind it."""
    gate, running = threading.Event(), threading.Event()

    def hold(conn: sqlite3.Connection) -> None:
        running.set()
        gate.wait(timeout=10)

    holder = threading.Thread(target=writer.run, args=(hold,))
    holder.start()
    assert running.wait(timeout=10)
    return holder, gate


def _wait_queued(writer: GroupWriter, count: int) -> None:
    for _ in range(500):
        if writer._queue.qsize() >= count:
            return
        threading.Event().wait(0.01)
    raise AssertionError("operations did not queue")


def _insert(writer: GroupWriter, value: int, outcomes: list[object]) -> None:
    try:
        writer.run(lambda c: c.execute("INSERT INTO t VALUES (?)", (value,)))
        outcomes.append(value)
    except sqlite3.IntegrityError as exc:
        outcomes.append(exc)


def test_operations_queued_together_commit_in_one_group(tmp_path: Path) -> None:
    writer = GroupWriter(lambda: _connect(tmp_path / "w.db"))
    writer.run(lambda c: c.execute("CREATE TABLE t (v INTEGER UNIQUE)"))
    holder, gate = _hold_writer(writer)
    before = writer.groups_committed
    outcomes: list[object] = []
    values = [*range(20), 5]  # the second 5 breaks the UNIQUE constraint
    threads = [threading.Thread(target=_insert, args=(writer, v, outcomes)) for v in values]
    for thread in threads:
        thread.start()
    _wait_queued(writer, len(values))
    gate.set()
    for thread in [holder, *threads]:
        thread.join(timeout=10)
    # The holder's group, then one group for all 21 operations.
    assert writer.groups_committed - before == 2
    # The failing operation was rolled back alone; the other 20 were committed.
    assert sum(isinstance(o, sqlite3.IntegrityError) for o in outcomes) == 1
    rows = writer.run(lambda c: [r[0] for r in c.execute("SELECT v FROM t ORDER BY v")])
    assert rows == list(range(20))
    writer.close()


def test_a_connection_that_cannot_open_fails_the_constructor(tmp_path: Path) -> None:
    def broken() -> sqlite3.Connection:
        raise sqlite3.OperationalError("unable to open database file")

    with pytest.raises(sqlite3.OperationalError):
        GroupWriter(broken)


def test_run_after_close_is_refused(tmp_path: Path) -> None:
    writer = GroupWriter(lambda: _connect(tmp_path / "w.db"))
    writer.close()
    with pytest.raises(RuntimeError):
        writer.run(lambda c: None)


def test_close_answers_work_still_queued(tmp_path: Path) -> None:
    writer = GroupWriter(lambda: _connect(tmp_path / "w.db"))
    holder, gate = _hold_writer(writer)
    outcomes: list[object] = []

    def queued() -> None:
        try:
            outcomes.append(writer.run(lambda c: "ran"))
        except RuntimeError as exc:
            outcomes.append(exc)

    thread = threading.Thread(target=queued)
    thread.start()
    _wait_queued(writer, 1)
    closer = threading.Thread(target=writer.close)
    closer.start()
    gate.set()
    for t in (holder, thread, closer):
        t.join(timeout=10)
    assert not thread.is_alive() and len(outcomes) == 1
    assert not writer.alive


def test_work_queued_behind_the_stop_is_refused_not_stranded(tmp_path: Path) -> None:
    writer = GroupWriter(lambda: _connect(tmp_path / "w.db"))
    holder, gate = _hold_writer(writer)
    writer._queue.put(_STOP)  # as if a close had slipped in before the next request
    outcomes: list[object] = []

    def late() -> None:
        try:
            outcomes.append(writer.run(lambda c: "ran"))
        except RuntimeError as exc:
            outcomes.append(exc)

    thread = threading.Thread(target=late)
    thread.start()
    _wait_queued(writer, 2)
    gate.set()
    for t in (holder, thread):
        t.join(timeout=10)
    assert not thread.is_alive() and isinstance(outcomes[0], RuntimeError)


def test_a_failing_operation_alone_is_undone_and_run_once(tmp_path: Path) -> None:
    writer = GroupWriter(lambda: _connect(tmp_path / "w.db"))
    writer.run(lambda c: c.execute("CREATE TABLE t (v INTEGER UNIQUE)"))
    calls = []

    def half_done(conn: sqlite3.Connection) -> None:
        calls.append(1)
        conn.execute("INSERT INTO t VALUES (1)")
        raise ValueError("refused after writing")

    with pytest.raises(ValueError):
        writer.run(half_done)
    assert calls == [1]
    assert writer.run(lambda c: c.execute("SELECT count(*) FROM t").fetchone()[0]) == 0
    writer.close()


def test_a_group_with_a_failure_runs_again_isolated_and_keeps_the_rest_once(
    tmp_path: Path,
) -> None:
    writer = GroupWriter(lambda: _connect(tmp_path / "w.db"))
    writer.run(lambda c: c.execute("CREATE TABLE t (v INTEGER)"))
    holder, gate = _hold_writer(writer)
    outcomes: list[object] = []

    def fail(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO t VALUES (-1)")
        raise ValueError("refused")

    def run_fail() -> None:
        try:
            writer.run(fail)
        except ValueError as exc:
            outcomes.append(exc)

    threads = [threading.Thread(target=_insert, args=(writer, v, outcomes)) for v in range(3)]
    threads.insert(1, threading.Thread(target=run_fail))
    for thread in threads:
        thread.start()
    _wait_queued(writer, len(threads))
    gate.set()
    for thread in [holder, *threads]:
        thread.join(timeout=10)
    assert sum(isinstance(o, ValueError) for o in outcomes) == 1
    # The first pass was rolled back whole: each good row is stored once, the bad one never.
    rows = writer.run(lambda c: [r[0] for r in c.execute("SELECT v FROM t ORDER BY v")])
    assert rows == [0, 1, 2]
    writer.close()


def test_a_request_cancelled_while_it_waits_is_dropped_and_the_writer_lives_on(
    tmp_path: Path,
) -> None:
    writer = GroupWriter(lambda: _connect(tmp_path / "w.db"))
    writer.run(lambda c: c.execute("CREATE TABLE t (v INTEGER)"))
    holder, gate = _hold_writer(writer)

    async def cancelled_then_next() -> None:
        waiting = asyncio.ensure_future(
            writer.wait(lambda c: c.execute("INSERT INTO t VALUES (1)"))
        )
        await asyncio.sleep(0.05)  # queued behind the held group
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        gate.set()
        # The next request is served: the writer did not stop on the cancelled one.
        await writer.wait(lambda c: c.execute("INSERT INTO t VALUES (2)"))

    asyncio.run(asyncio.wait_for(cancelled_then_next(), timeout=10))
    holder.join(timeout=10)
    assert writer.alive
    assert writer.run(lambda c: [r[0] for r in c.execute("SELECT v FROM t")]) == [2]
    writer.close()


def test_work_awaited_on_a_loop_commits_in_one_group_run_by_the_loop(tmp_path: Path) -> None:
    writer = GroupWriter(lambda: _connect(tmp_path / "w.db"))
    writer.run(lambda c: c.execute("CREATE TABLE t (v INTEGER UNIQUE)"))
    before = writer.groups_committed
    threads: set[str] = set()

    def insert(value: int) -> Callable[[sqlite3.Connection], int]:
        def op(conn: sqlite3.Connection) -> int:
            threads.add(threading.current_thread().name)
            conn.execute("INSERT INTO t VALUES (?)", (value,))
            return value

        return op

    async def together() -> list[object]:
        waits = [writer.wait(insert(v)) for v in [*range(20), 5]]
        return await asyncio.gather(*waits, return_exceptions=True)

    outcomes = asyncio.run(together())
    # One group for the 21 requests, run on the loop's own thread: the failing
    # insert was undone alone and every other one committed.
    assert writer.groups_committed - before == 1
    assert threads == {threading.current_thread().name}
    assert sum(isinstance(o, sqlite3.IntegrityError) for o in outcomes) == 1
    rows = writer.run(lambda c: [r[0] for r in c.execute("SELECT v FROM t ORDER BY v")])
    assert rows == list(range(20))
    writer.close()


def test_work_awaited_a_turn_later_joins_the_group(tmp_path: Path) -> None:
    writer = GroupWriter(lambda: _connect(tmp_path / "w.db"))
    writer.run(lambda c: c.execute("CREATE TABLE t (v INTEGER)"))
    before = writer.groups_committed

    async def staggered() -> None:
        first = asyncio.ensure_future(writer.wait(lambda c: c.execute("INSERT INTO t VALUES (1)")))
        await asyncio.sleep(0)  # the first request is gathered; the second comes a turn later
        second = writer.wait(lambda c: c.execute("INSERT INTO t VALUES (2)"))
        await asyncio.gather(first, second)

    asyncio.run(asyncio.wait_for(staggered(), timeout=10))
    assert writer.groups_committed - before == 1
    assert writer.run(lambda c: [r[0] for r in c.execute("SELECT v FROM t ORDER BY v")]) == [1, 2]
    writer.close()


def test_a_loop_s_group_holds_at_most_max_group_requests(tmp_path: Path) -> None:
    writer = GroupWriter(lambda: _connect(tmp_path / "w.db"), max_group=8)
    writer.run(lambda c: c.execute("CREATE TABLE t (v INTEGER)"))
    before = writer.groups_committed
    ran_in: list[int] = []  # for each request, the group it ran in

    def insert(value: int) -> Callable[[sqlite3.Connection], None]:
        def op(conn: sqlite3.Connection) -> None:
            ran_in.append(writer.groups_committed - before)
            conn.execute("INSERT INTO t VALUES (?)", (value,))

        return op

    async def burst() -> None:
        await asyncio.gather(*(writer.wait(insert(v)) for v in range(20)))

    asyncio.run(asyncio.wait_for(burst(), timeout=10))
    # 20 requests awaited at once: groups of 8, 8 and 4, one transaction each.
    assert ran_in == [0] * 8 + [1] * 8 + [2] * 4
    assert writer.groups_committed - before == 3
    assert writer.run(lambda c: c.execute("SELECT count(*) FROM t").fetchone()[0]) == 20
    writer.close()


def test_a_request_cancelled_before_the_loop_runs_its_group_is_dropped(tmp_path: Path) -> None:
    writer = GroupWriter(lambda: _connect(tmp_path / "w.db"))
    writer.run(lambda c: c.execute("CREATE TABLE t (v INTEGER)"))

    async def cancel_one() -> None:
        gone = asyncio.ensure_future(writer.wait(lambda c: c.execute("INSERT INTO t VALUES (1)")))
        kept = asyncio.ensure_future(writer.wait(lambda c: c.execute("INSERT INTO t VALUES (2)")))
        await asyncio.sleep(0)  # both are gathered; the group has not run yet
        gone.cancel()
        await kept
        with pytest.raises(asyncio.CancelledError):
            await gone

    asyncio.run(asyncio.wait_for(cancel_one(), timeout=10))
    assert writer.run(lambda c: [r[0] for r in c.execute("SELECT v FROM t")]) == [2]
    writer.close()


def test_loops_on_several_threads_share_the_one_writer(tmp_path: Path) -> None:
    writer = GroupWriter(lambda: _connect(tmp_path / "w.db"))
    writer.run(lambda c: c.execute("CREATE TABLE t (v INTEGER UNIQUE)"))

    async def inserts(start: int) -> None:
        await asyncio.gather(
            *(
                writer.wait(lambda c, v=v: c.execute("INSERT INTO t VALUES (?)", (v,)))
                for v in range(start, start + 200)
            )
        )

    def on_own_loop(start: int) -> None:
        for offset in range(0, 1000, 200):
            asyncio.run(inserts(start + offset))

    threads = [threading.Thread(target=on_own_loop, args=(n * 1000,)) for n in range(3)]
    for thread in threads:
        thread.start()
    for _ in range(50):  # blocking callers too, through the writer's thread
        writer.run(lambda c: c.execute("INSERT INTO t VALUES (-1) ON CONFLICT DO NOTHING"))
    for thread in threads:
        thread.join(timeout=30)
    count = writer.run(lambda c: c.execute("SELECT count(*) FROM t").fetchone()[0])
    assert count == 3001
    writer.close()


def test_work_awaited_after_close_or_gathered_before_it_is_refused(tmp_path: Path) -> None:
    writer = GroupWriter(lambda: _connect(tmp_path / "w.db"))

    async def closing() -> None:
        gathered = asyncio.ensure_future(writer.wait(lambda c: "ran"))
        await asyncio.sleep(0)  # gathered, its group not run yet
        writer.close()
        with pytest.raises(RuntimeError, match="closed"):
            await gathered
        with pytest.raises(RuntimeError, match="closed"):
            await writer.wait(lambda c: "ran")

    asyncio.run(asyncio.wait_for(closing(), timeout=10))


class _FailingRollback(sqlite3.Connection):
    """A connection whose next ROLLBACK fails once ``failures`` is set (a disk that errs)."""

    failures = 0

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        if sql == "ROLLBACK" and self.failures:
            self.failures -= 1
            raise sqlite3.OperationalError("disk I/O error")
        return super().execute(sql, *args)


def test_a_rollback_that_fails_answers_the_group_and_the_writer_goes_on(tmp_path: Path) -> None:
    def connect() -> sqlite3.Connection:
        return sqlite3.connect(
            tmp_path / "w.db",
            isolation_level=None,
            check_same_thread=False,
            factory=_FailingRollback,
        )

    writer = GroupWriter(connect)
    writer.run(lambda c: c.execute("CREATE TABLE t (v INTEGER)"))

    def fails_and_so_does_its_rollback(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO t VALUES (-1)")
        assert isinstance(conn, _FailingRollback)
        conn.failures = 2  # the group's own rollback, and the one after the group failed
        raise ValueError("refused")

    # On the writer's thread: the caller gets an error instead of waiting forever,
    # and the next group first ends the transaction the rollback left open.
    with pytest.raises((ValueError, sqlite3.OperationalError)):
        writer.run(fails_and_so_does_its_rollback)
    writer.run(lambda c: c.execute("INSERT INTO t VALUES (1)"))

    async def on_a_loop() -> None:
        with pytest.raises((ValueError, sqlite3.OperationalError)):
            await writer.wait(fails_and_so_does_its_rollback)
        await writer.wait(lambda c: c.execute("INSERT INTO t VALUES (2)"))

    asyncio.run(asyncio.wait_for(on_a_loop(), timeout=10))
    assert writer.alive
    rows = writer.run(lambda c: [r[0] for r in c.execute("SELECT v FROM t ORDER BY v")])
    assert rows == [1, 2]
    writer.close()


def test_a_loop_never_waits_for_another_process_s_write_lock(tmp_path: Path) -> None:
    path = tmp_path / "w.db"
    writer = GroupWriter(
        lambda: sqlite3.connect(path, isolation_level=None, timeout=10, check_same_thread=False)
    )
    writer.run(lambda c: c.execute("CREATE TABLE t (v INTEGER)"))
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # as a CLI command on the same file would
    ran_on: list[str] = []

    def insert(conn: sqlite3.Connection) -> None:
        ran_on.append(threading.current_thread().name)
        conn.execute("INSERT INTO t VALUES (1)")

    async def scenario() -> float:
        loop = asyncio.get_running_loop()
        loop.call_later(0.5, other.execute, "COMMIT")
        stalls, last = [], loop.time()
        waiting = asyncio.ensure_future(writer.wait(insert))
        while not waiting.done():
            await asyncio.sleep(0.01)
            stalls.append(loop.time() - last)
            last = loop.time()
        await waiting
        return max(stalls)

    longest_stall = asyncio.run(asyncio.wait_for(scenario(), timeout=10))
    other.close()
    # The loop kept turning while the lock was held; the writer's thread waited for it.
    assert longest_stall < 0.25
    assert ran_on == ["queuelog-writer"]
    assert writer.run(lambda c: c.execute("SELECT count(*) FROM t").fetchone()[0]) == 1
    writer.close()


def test_a_failure_of_the_writer_s_own_code_answers_the_group_and_the_writer_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = GroupWriter(lambda: _connect(tmp_path / "w.db"))
    writer.run(lambda c: c.execute("CREATE TABLE t (v INTEGER)"))
    real = writer._outcomes

    def broken(conn: sqlite3.Connection, group: Any, wait: bool) -> Any:
        if not conn.in_transaction:
            conn.execute("BEGIN IMMEDIATE")  # fails with its transaction left open
        raise RuntimeError("a bug in the writer")

    def insert(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO t VALUES (1)")

    monkeypatch.setattr(writer, "_outcomes", broken)
    with pytest.raises(RuntimeError, match="a bug in the writer"):  # the thread's group
        writer.submit(insert).result(timeout=10)

    async def on_a_loop() -> list[object]:
        return await asyncio.gather(
            writer.wait(insert), writer.wait(insert), return_exceptions=True
        )

    outcomes = asyncio.run(asyncio.wait_for(on_a_loop(), timeout=10))
    assert [str(o) for o in outcomes] == ["a bug in the writer"] * 2
    monkeypatch.setattr(writer, "_outcomes", real)
    assert writer.alive
    writer.run(insert)  # the transaction left open is ended first
    assert writer.run(lambda c: c.execute("SELECT count(*) FROM t").fetchone()[0]) == 1
    writer.close()
