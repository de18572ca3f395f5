"""Group commit: one write connection commits many requests' work at once.

Each request awaits the writer with a function of the connection. Work awaited
on an event loop is gathered there, and the loop runs the group on its next
turn: every function in one transaction, then one commit (one fsync) for the
lot. When one of them fails, the group runs again with each inside its own
SAVEPOINT, so the failing one is rolled back alone. A request is answered only
after the commit that holds its work.

The group runs on the loop itself, not on a thread: sqlite3 lets go of the GIL
around every step of a statement, and taking it back from a loop busy with HTTP
would cost a thread hand-off each time. A write lock held by another process
(another program writing the same file) is not waited for with the loop
blocked: the group is tried again on a later turn until the busy timeout passes.

A group refused for a storage fault (no space, an I/O error, the lock held past
the busy timeout) answers every one of its requests with that fault as a domain
error (``faults.storage_fault``), reported to the store's ``StorageHealth``; a
group that stored something reports that the node writes again.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from queuelog.storage.health import StorageHealth
from queuelog.storage.sqlite.faults import locked, storage_fault

T = TypeVar("T")
Operation = Callable[[sqlite3.Connection], Any]
Group = Sequence[tuple[Operation, "asyncio.Future[Any]"]]
# A request's future, with its operation's value or its error.
Outcome = tuple["asyncio.Future[Any]", Any, BaseException | None]

# How long a group waits between tries while another process holds the write lock.
_LOCKED_RETRY_SECONDS = (0.001, 0.005, 0.02, 0.05)


class GroupWriter:
    def __init__(
        self,
        connect: Callable[[], sqlite3.Connection],
        max_group: int = 512,
        busy_timeout: float = 30.0,
        health: StorageHealth | None = None,
    ) -> None:
        self.health = health or StorageHealth()
        self._conn: sqlite3.Connection | None = connect()
        # The loop never blocks on another process's lock: a busy BEGIN fails at once
        # and the group is tried again later (see _retry_locked).
        self._conn.execute("PRAGMA busy_timeout = 0")
        self._max_group = max_group
        self._busy_timeout = busy_timeout
        # Held while a group runs: loops on several threads (tests, the CLI) share it.
        self._using = threading.Lock()
        self._gathered: dict[asyncio.AbstractEventLoop, list[tuple[Operation, Any]]] = {}

    @property
    def alive(self) -> bool:
        """True until the writer is closed."""
        return self._conn is not None

    def run_now(self, operation: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``operation`` alone in a transaction of its own, before any loop serves
        requests (migrations at start); blocks for another process's lock."""
        conn = self._connection()
        conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout * 1000)}")
        try:
            with self._using:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    value = operation(conn)
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
                conn.execute("COMMIT")
                return value
        finally:
            conn.execute("PRAGMA busy_timeout = 0")

    async def run(self, operation: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``operation`` in the loop's next group; its value once it is durable."""
        self._connection()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        gathered = self._gathered.get(loop)
        if gathered is None:
            gathered = self._gathered[loop] = []
            loop.call_soon(self._one_more_turn, loop)
        gathered.append((operation, future))
        return await future

    def close(self) -> None:
        with self._using:  # a group running on a loop ends first
            conn, self._conn = self._conn, None
            if conn is not None:
                conn.close()

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise RuntimeError("storage is closed")
        return self._conn

    def _one_more_turn(self, loop: asyncio.AbstractEventLoop) -> None:
        """Run the group a turn later, so requests read in the loop's next poll join it:
        clients answered by one group send their next requests at about the same time,
        but not all within one poll."""
        loop.call_soon(self._run_gathered, loop, time.monotonic())

    def _run_gathered(self, loop: asyncio.AbstractEventLoop, since: float, tries: int = 0) -> None:
        """Run, on ``loop``, the group of work awaited there since its last turn.

        A group holds at most ``max_group`` requests: the rest runs on the loop's
        next turn, so a burst does not hold every other connection for one long
        transaction. While the write lock is another's, the whole backlog waits
        for the retry (``_retry_locked``), not for the next turn.
        """
        gathered = self._gathered.pop(loop, [])
        group = [(op, future) for op, future in gathered if not future.cancelled()]
        if not group:
            return
        if not self._using.acquire(blocking=False):
            self._retry_locked(loop, group, since, tries)  # another loop's group runs now
            return
        now, rest = group[: self._max_group], group[self._max_group :]
        try:
            outcomes = self._guarded(now)
        finally:
            self._using.release()
        if outcomes is None:
            self._retry_locked(loop, group, since, tries)
            return
        for future, value, error in outcomes:
            self._answer(future, value, error)
        if rest:
            self._gathered[loop] = [*rest, *self._gathered.get(loop, [])]
            loop.call_soon(self._run_gathered, loop, time.monotonic())

    def _retry_locked(
        self, loop: asyncio.AbstractEventLoop, group: Group, since: float, tries: int
    ) -> None:
        """Try ``group`` again on a later turn, or refuse it once the busy timeout passed."""
        if time.monotonic() - since > self._busy_timeout:
            for _, future in group:
                self._answer(future, None, locked())
            return
        # Put the group back in front of whatever was awaited since.
        self._gathered[loop] = [*group, *self._gathered.get(loop, [])]
        delay = _LOCKED_RETRY_SECONDS[min(tries, len(_LOCKED_RETRY_SECONDS) - 1)]
        loop.call_later(delay, self._run_gathered, loop, since, tries + 1)

    def _answer(self, future: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
        """Settle a request's future; a storage fault as its domain error, one per request
        (an exception raised by many awaiting tasks would gather all their frames)."""
        fault = storage_fault(error) if error is not None else None
        _settle(future, value, self.health.refuse(fault) if fault is not None else error)

    def _guarded(self, group: Group) -> list[Outcome] | None:
        """Run and commit ``group``: each future with its value or its error; None when
        another process holds the write lock. Every request is answered even if the
        writer's own code fails: a request whose group was taken is never left waiting."""
        conn = self._conn
        if conn is None:
            return [(future, None, RuntimeError("storage is closed")) for _, future in group]
        changes = conn.total_changes
        try:
            if not _begin(conn):
                return None
            outcomes = self._run_group(conn, group)
        except Exception as exc:  # the transaction itself failed: nothing was stored
            try:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass  # the next group's _begin ends what is left; these are answered
            return [(future, None, exc) for _, future in group]
        if outcomes is not None and conn.total_changes != changes:
            self.health.stored()
        return outcomes

    @staticmethod
    def _run_group(conn: sqlite3.Connection, group: Group) -> list[Outcome] | None:
        """Run and commit the group, its transaction begun.

        Operations rarely fail, so the group first runs without savepoints. If one
        fails, the whole transaction is rolled back and the group runs again with
        a SAVEPOINT per operation, so the failing one is undone alone. Operations
        are functions of the connection only, so running one again is safe.
        """
        try:
            outcomes: list[Outcome] = [
                (future, operation(conn), None) for operation, future in group
            ]
        except Exception as exc:
            conn.execute("ROLLBACK")
            if len(group) == 1:
                return [(group[0][1], None, exc)]
            if not _begin(conn):
                return None
            outcomes = _run_isolated(conn, group)
        conn.execute("COMMIT")
        return outcomes


def _begin(conn: sqlite3.Connection) -> bool:
    """Begin a group's transaction; False while another process holds the write lock."""
    if conn.in_transaction:  # left open by a rollback that failed: end it first
        conn.execute("ROLLBACK")
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        # Any busy code (SQLITE_BUSY_RECOVERY while another connection recovers the WAL,
        # say) is the primary code with extended bits.
        if exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY:
            return False
        raise
    return True


def _run_isolated(conn: sqlite3.Connection, group: Group) -> list[Outcome]:
    outcomes: list[Outcome] = []
    for operation, future in group:
        conn.execute("SAVEPOINT op")
        try:
            value = operation(conn)
        except Exception as exc:  # the operation's own failure: undo it alone
            conn.execute("ROLLBACK TO op")
            outcomes.append((future, None, exc))
        else:
            outcomes.append((future, value, None))
        conn.execute("RELEASE op")
    return outcomes


def _settle(future: asyncio.Future[Any], value: Any, error: BaseException | None) -> None:
    if future.done():  # an awaiting request that was cancelled meanwhile
        return
    if error is None:
        future.set_result(value)
    else:
        future.set_exception(error)
