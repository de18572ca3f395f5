"""Wakes long-polling claimers when a job may have become ready.

Producers of readiness (enqueue, retry, redrive, lease rescue, and another
node's notification) call ``notify()`` from any thread once the job is
committed; claimers wait in the event loop. A claimer registers *before* it
looks for jobs, so a notification that arrives between an empty claim and the
wait is never lost.

When the server begins to shut down, ``close()`` wakes every waiter for good, so
long-polling claims answer at once instead of holding the graceful shutdown.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Collection
from typing import Any


class Waiter:
    """One claimer's wait. A notification made on the waiter's own event loop (an
    enqueue served there) wakes it directly; one from another thread goes through
    the loop's thread-safe queue."""

    def __init__(self, wakeup: Wakeup, types: Collection[str] | None) -> None:
        self._wakeup = wakeup
        self.types = types  # the job types the claimer may take (None: any)
        self._loop = asyncio.get_running_loop()
        self._thread = threading.get_ident()
        self._notified = False
        self._future: asyncio.Future[bool] | None = None

    def _set(self) -> None:
        if threading.get_ident() == self._thread:
            self._wake()
        else:
            self._loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        self._notified = True
        if self._future is not None and not self._future.done():
            self._future.set_result(True)

    async def wait(self, timeout: float, until: asyncio.Future[Any] | None = None) -> bool:
        """True if notified (since this waiter was registered) within ``timeout`` seconds;
        False when the time is up or ``until`` is done first."""
        if self._notified:
            return True
        # A future and a timer: the task wakes on the turn after the notification,
        # where asyncio.wait_for would wrap the wait in a task of its own (more turns).
        future: asyncio.Future[bool] = self._loop.create_future()
        self._future = future
        timer = self._loop.call_later(timeout, _expire, future)
        if until is not None:
            until.add_done_callback(future_expire := lambda _: _expire(future))
        try:
            return await future
        finally:
            timer.cancel()
            if until is not None:
                until.remove_done_callback(future_expire)
            self._future = None

    def __enter__(self) -> Waiter:
        return self

    def __exit__(self, *_: object) -> None:
        self._wakeup._discard(self)


def _expire(future: asyncio.Future[bool]) -> None:
    if not future.done():
        future.set_result(False)


class Wakeup:
    def __init__(self, recheck_seconds: float = 1.0) -> None:
        # Waiters also look again this often, for wake-ups they cannot hear (another
        # process writing to the same database without notifying).
        self.recheck_seconds = recheck_seconds
        self._waiters: set[Waiter] = set()
        self._lock = threading.Lock()
        self.closed = False

    def waiter(self, types: Collection[str] | None = None) -> Waiter:
        """Register a waiter for jobs of ``types`` (None: any); use it as a context
        manager so it is always removed."""
        waiter = Waiter(self, types)
        with self._lock:
            self._waiters.add(waiter)
        return waiter

    def notify(self) -> None:
        with self._lock:
            waiters = list(self._waiters)
        for waiter in waiters:
            waiter._set()

    def close(self) -> None:
        """Shutdown: wake every waiter; claims stop waiting from now on."""
        with self._lock:
            self.closed = True
        self.notify()

    def _discard(self, waiter: Waiter) -> None:
        with self._lock:
            self._waiters.discard(waiter)
