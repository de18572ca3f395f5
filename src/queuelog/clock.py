"""Time is injected: the service and storage take `now`, tests move a fake clock."""

from __future__ import annotations

import functools
import threading
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime: ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


class FakeClock:
    """A clock that only moves when told to."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 1, tzinfo=UTC)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> datetime:
        with self._lock:
            self._now += timedelta(seconds=seconds)
            return self._now


def to_micros(at: datetime) -> int:
    """Stored form of a time: integer microseconds since the Unix epoch, UTC."""
    delta = at - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


# Rows read together (a claim, a batch) share most of their times: see rfc3339.
@functools.lru_cache(maxsize=4096)
def from_micros(value: int) -> datetime:
    return _EPOCH + timedelta(microseconds=value)


# Every job in an answer carries six times, and the jobs of one batch, claim or
# group commit share most of them: a small cache turns most conversions into lookups.
@functools.lru_cache(maxsize=4096)
def rfc3339(at: datetime) -> str:
    # isoformat is several times faster than strftime.
    if at.tzinfo is not UTC:
        at = at.astimezone(UTC)
    return at.replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
