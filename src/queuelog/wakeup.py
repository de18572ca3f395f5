"""Wakes long-polling claimers when a job may have become ready.

Producers of readiness (enqueue, retry, redrive, lease rescue, and another
node's notification) call ``notify()`` from any thread; claimers wait in the
event loop. A claimer registers *before* it looks for jobs, so a notification
that arrives between an empty claim and the wait is never lost.

When the server begins to shut down, ``close()`` wakes every waiter for good, so
long-polling claims answer at once instead of holding the graceful shutdown.
"""

from __future__ import annotations

import asyncio
import threading


class Waiter:
    def __init__(self, wakeup: Wakeup) -> None:
        self._wakeup = wakeup
        self._loop = asyncio.get_running_loop()
        self._event = asyncio.Event()

    def _set(self) -> None:
        self._loop.call_soon_threadsafe(self._event.set)

    async def wait(self, timeout: float) -> bool:
        """True if notified within ``timeout`` seconds."""
        try:
            await asyncio.wait_for(self._event.wait(), timeout)
        except TimeoutError:
            return False
        return True

    def __enter__(self) -> Waiter:
        return self

    def __exit__(self, *_: object) -> None:
        self._wakeup._discard(self)


class Wakeup:
    def __init__(self) -> None:
        self._waiters: set[Waiter] = set()
        self._lock = threading.Lock()
        self.notifications = 0
        self.closed = False

    def waiter(self) -> Waiter:
        """Register a waiter; use it as a context manager so it is always removed."""
        waiter = Waiter(self)
        with self._lock:
            self._waiters.add(waiter)
        return waiter

    def notify(self) -> None:
        with self._lock:
            waiters = list(self._waiters)
            self.notifications += 1
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
