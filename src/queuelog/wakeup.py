"""Wakes long-polling claimers when a job may have become ready, and the requests
awaiting a job's result when it finishes.

Producers of readiness (enqueue, retry, redrive, lease rescue, and another
node's notification) call ``Wakeup.notify()`` from any thread once the job is
committed; claimers wait in the event loop. An enqueue says how many jobs of which
types it made, and wakes only as many of the claimers that may take them, those
asleep first: every woken claimer looks in the database, and a trickle of single
jobs would otherwise send every waiting claim there for each one. The others wake
at their next recheck, or at the next notification. A claimer registers *before* it
looks for jobs, so a notification that arrives between an empty claim and the
wait is never lost. ``Finishes`` does the same for the jobs that finished
(completed, failed, cancelled): it wakes only the waiters of those jobs.

When the server begins to shut down, ``close()`` wakes every waiter for good, so
long polls answer at once instead of holding the graceful shutdown.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Collection, Iterable
from typing import Any, Protocol


class _Registry(Protocol):
    def _discard(self, waiter: Waiter) -> None: ...


class Waiter:
    """One claimer's wait. A notification made on the waiter's own event loop (an
    enqueue served there) wakes it directly; one from another thread goes through
    the loop's thread-safe queue."""

    def __init__(
        self, wakeup: _Registry, types: Collection[str] | None, job_id: int | None = None
    ) -> None:
        self._wakeup = wakeup
        self.types = types  # the job types the claimer may take (None: any)
        self.job_id = job_id  # the job whose finish it awaits (Finishes)
        self._loop = asyncio.get_running_loop()
        self._thread = threading.get_ident()
        self._notified = False
        self._future: asyncio.Future[bool] | None = None

    def may_take(self, types: Collection[str] | None) -> bool:
        """Whether this claimer may take a job of one of ``types`` (None: of any type)."""
        return types is None or self.types is None or not set(types).isdisjoint(self.types)

    @property
    def notified(self) -> bool:
        """Whether a notification has come since this waiter was registered (one that
        came just as its wait timed out too)."""
        return self._notified

    @property
    def asleep(self) -> bool:
        """In ``wait`` now (not between its registration and its wait, looking)."""
        return self._future is not None

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

    def notify(self, types: Collection[str] | None = None, ready: int | None = None) -> None:
        """Wake the claimers that may take jobs of ``types`` (None: every claimer); with
        ``ready``, at most that many of them: those not woken yet first (an enqueue of
        several types wakes claims type by type, and one woken for another type's job
        takes that one), then those asleep (one that is looking already may have looked
        before the jobs were committed: it is woken after)."""
        with self._lock:
            waiters = [w for w in self._waiters if w.may_take(types)]
        if ready is not None and len(waiters) > ready:
            waiters.sort(key=lambda w: (w.notified, not w.asleep))
            del waiters[ready:]
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


class Finishes:
    """The requests awaiting jobs' results, woken by the transitions that finish them."""

    def __init__(self) -> None:
        self._waiting: dict[int, set[Waiter]] = {}
        self._lock = threading.Lock()
        self.closed = False

    def waiter(self, job_id: int) -> Waiter:
        """Register a waiter for ``job_id``'s finish; use it as a context manager so it is
        always removed."""
        waiter = Waiter(self, None, job_id)
        with self._lock:
            self._waiting.setdefault(job_id, set()).add(waiter)
        return waiter

    @property
    def waiting(self) -> int:
        """How many requests await a result now."""
        with self._lock:
            return sum(len(waiters) for waiters in self._waiting.values())

    def notify(self, job_ids: Iterable[int] | None) -> None:
        """Wake the waiters of ``job_ids``; None wakes every waiter (a notification may
        have been missed: each looks at its job again)."""
        with self._lock:
            if job_ids is None:
                woken = [w for waiters in self._waiting.values() for w in waiters]
            else:
                woken = [w for i in set(job_ids) for w in self._waiting.get(i, ())]
        for waiter in woken:
            waiter._set()

    def close(self) -> None:
        """Shutdown: wake every waiter; result requests stop waiting from now on."""
        with self._lock:
            self.closed = True
        self.notify(None)

    def _discard(self, waiter: Waiter) -> None:
        assert waiter.job_id is not None
        with self._lock:
            waiters = self._waiting.get(waiter.job_id)
            if waiters is not None:
                waiters.discard(waiter)
                if not waiters:
                    del self._waiting[waiter.job_id]
