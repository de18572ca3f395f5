"""Group commit: one thread owns the write connection and commits many requests' work at once.

Each request hands the writer a function of the connection and waits for its
answer. The writer takes every function that is waiting, runs them in one
transaction and commits the lot: one fsync for the group. When one of them
fails, the group runs again with each inside its own SAVEPOINT, so the failing
one is rolled back alone. A request is answered only after
the commit that holds its work.
"""

from __future__ import annotations

import asyncio
import queue
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

T = TypeVar("T")
Operation = Callable[[sqlite3.Connection], Any]

_STOP = object()


class GroupWriter:
    def __init__(self, connect: Callable[[], sqlite3.Connection], max_group: int = 512) -> None:
        self._connect = connect
        self._max_group = max_group
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="queuelog-writer", daemon=True)
        self._closed = False
        # Guards the closed flag together with queueing, so nothing is queued behind _STOP.
        self._lock = threading.Lock()
        self._startup_error: Exception | None = None
        self.groups_committed = 0
        self._thread.start()
        self._ready.wait()
        if self._startup_error is not None:
            self._closed = True
            raise self._startup_error

    def run(self, operation: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``operation`` in the next group; return its result once it is durable."""
        return self.submit(operation).result()

    async def wait(self, operation: Callable[[sqlite3.Connection], T]) -> T:
        """``run`` for an event loop: awaits the commit without holding a thread."""
        return await asyncio.wrap_future(self.submit(operation))

    def submit(self, operation: Callable[[sqlite3.Connection], T]) -> Future[T]:
        """Queue ``operation`` for the next group; its future is set once it is durable."""
        future: Future[T] = Future()
        with self._lock:
            if self._closed:
                raise RuntimeError("storage is closed")
            self._queue.put((operation, future))
        return future

    @property
    def alive(self) -> bool:
        """True while the writer thread can still commit work."""
        return not self._closed and self._thread.is_alive()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._queue.put(_STOP)
        self._thread.join()

    def _loop(self) -> None:
        try:
            conn = self._connect()
        except Exception as exc:  # reported to the constructor's caller
            self._startup_error = exc
            self._ready.set()
            return
        self._ready.set()
        try:
            while True:
                item = self._queue.get()
                if item is _STOP:
                    return
                group = [item]
                while len(group) < self._max_group:
                    try:
                        nxt = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if nxt is _STOP:
                        self._queue.put(_STOP)
                        break
                    group.append(nxt)
                # A request cancelled while it waited (its client went, the server is
                # stopping) is dropped here: its work is not done.
                group = [(op, f) for op, f in group if f.set_running_or_notify_cancel()]
                if group:
                    self._commit(conn, group)
        finally:
            with self._lock:
                self._closed = True
            self._fail_waiting(RuntimeError("storage is closed"))
            conn.close()

    def _fail_waiting(self, error: Exception) -> None:
        """Answer whatever is still queued: once the loop ends, nothing else will."""
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if item is not _STOP and item[1].set_running_or_notify_cancel():
                item[1].set_exception(error)

    def _commit(self, conn: sqlite3.Connection, group: list[tuple[Operation, Future[Any]]]) -> None:
        try:
            outcomes = self._run_group(conn, group)
        except Exception as exc:  # the transaction itself failed: nothing was stored
            try:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
            finally:
                for _, future in group:
                    future.set_exception(exc)
            return
        self.groups_committed += 1
        for future, value, error in outcomes:
            if error is None:
                future.set_result(value)
            else:
                future.set_exception(error)

    def _run_group(
        self, conn: sqlite3.Connection, group: list[tuple[Operation, Future[Any]]]
    ) -> list[tuple[Future[Any], Any, BaseException | None]]:
        """Run and commit the group; each operation's value or its own failure.

        Operations rarely fail, so the group first runs without savepoints (two
        statements fewer per operation). If one fails, the whole transaction is
        rolled back and the group runs again with a SAVEPOINT per operation, so
        the failing one is undone alone. Operations are functions of the
        connection only, so running one again is safe. A group of one needs no
        savepoint: its failure is the transaction's.
        """
        values: list[tuple[Future[Any], Any, BaseException | None]]
        conn.execute("BEGIN IMMEDIATE")
        try:
            values = [(future, operation(conn), None) for operation, future in group]
        except Exception as exc:
            conn.execute("ROLLBACK")
            if len(group) == 1:
                return [(group[0][1], None, exc)]
            conn.execute("BEGIN IMMEDIATE")
            values = self._run_isolated(conn, group)
        conn.execute("COMMIT")
        return values

    @staticmethod
    def _run_isolated(
        conn: sqlite3.Connection, group: list[tuple[Operation, Future[Any]]]
    ) -> list[tuple[Future[Any], Any, BaseException | None]]:
        outcomes: list[tuple[Future[Any], Any, BaseException | None]] = []
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
