"""Whether this node can write: found by its operations themselves.

A storage fault (no space, an I/O error, a read-only or unreachable database, a
lock held past the busy timeout) begins with the first operation refused for it
and ends with the first write that stores something: a request's, the sweeper's,
or readiness' probe. A write that stores nothing (a claim that found no job)
commits even on a full disk, so it proves nothing and ends nothing. Nor does a
small write that fits in what is left of a nearly full disk: where the backend can
tell the free space (SQLite's filesystem), a fault for lack of space ends only
once ``headroom`` bytes are free again, so readiness does not flap between every
large write refused and every small one stored.

Each fault is logged twice, as a warning when it begins and when it ends, never
once per refused request: on a full disk the log is often on the same disk. The
refusals are counted by reason for ``/metrics``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from queuelog.errors import StorageUnavailable

log = logging.getLogger("queuelog.storage")


class StorageHealth:
    """Thread-safe: PostgreSQL's operations report from its pool's threads."""

    def __init__(self, space_left: Callable[[], int] | None = None, headroom: int = 0) -> None:
        """``space_left``, if given, tells the bytes free where the database grows."""
        self._space_left = space_left
        self._headroom = headroom
        self._lock = threading.Lock()
        self._fault: StorageUnavailable | None = None
        self._since = 0.0
        self._refused_during = 0
        self._refused: dict[str, int] = {}

    @property
    def writable(self) -> bool:
        """False from an operation refused for a fault until a write stores again."""
        return self._fault is None

    @property
    def fault(self) -> StorageUnavailable | None:
        """The fault under way (the first refusal's error), if any."""
        return self._fault

    def refused(self) -> dict[str, int]:
        """Operations refused for a storage fault since the node started, by reason."""
        with self._lock:
            return dict(self._refused)

    def contended(self, error: StorageUnavailable) -> StorageUnavailable:
        """Count an operation refused because it lost to others on each of its tries:
        no fault of the database, so writes are not refused after it."""
        with self._lock:
            self._count(error.reason)
        return error

    def refuse(self, error: StorageUnavailable) -> StorageUnavailable:
        """Count an operation refused for ``error``, which is returned to be raised."""
        with self._lock:
            self._count(error.reason)
            self._refused_during += 1
            if self._fault is not None:
                return error
            self._fault, self._since, self._refused_during = error, time.monotonic(), 1
        log.warning(
            "storage fault (%s): %s; operations are refused (%d %s) until a write stores again",
            error.reason,
            error.detail,
            error.status,
            error.slug,
        )
        return error

    def _count(self, reason: str) -> None:
        """One more operation refused for ``reason`` (the lock held)."""
        self._refused[reason] = self._refused.get(reason, 0) + 1

    def stored(self) -> None:
        """A write stored something and committed: a fault under way has ended."""
        under_way = self._fault  # read without the lock: the common case is None
        if under_way is None or (under_way.reason == "no-space" and not self._has_room()):
            return
        with self._lock:
            fault, self._fault = self._fault, None
            if fault is None:
                return
            seconds, refused = time.monotonic() - self._since, self._refused_during
        log.warning(
            "storage fault (%s) ended: writes are stored again after %.1f s, %d operations refused",
            fault.reason,
            seconds,
            refused,
        )

    def _has_room(self) -> bool:
        if self._space_left is None:
            return True
        try:
            return self._space_left() >= self._headroom
        except OSError:
            return True  # cannot tell: the write that stored is the best evidence
