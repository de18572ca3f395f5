"""Verbs of many reads, which a client follows until they are over (a wait, a job's
history of many pages), and the reads of a job's history. Pure: no I/O."""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

from queuelog.client import calls
from queuelog.client.calls import Call, JobRef
from queuelog.client.types import Event, EventPage
from queuelog.errors import QueueError

R_co = TypeVar("R_co", covariant=True)


class ManyReads(Protocol[R_co]):
    """Reads sent one after another: ``Client.follow`` and ``AsyncClient.follow`` send
    ``next_call`` and hand its answer to ``take`` until there is none left, then answer
    ``finished``."""

    def next_call(self) -> Call[Any] | None: ...
    def take(self, answer: Any, /) -> None: ...
    def pause_after(self, error: QueueError, /) -> float:
        """A read that failed after the client's own tries: the pause before the next
        one, or ``error`` raised."""
        ...

    def finished(self) -> R_co: ...


class History:
    """A job's events, oldest first, read a page at a time: a history has no bound."""

    def __init__(self, job: JobRef) -> None:
        self._job = job
        self._events: list[Event] = []
        self._cursor: str | None = None
        self._read_all = False

    def next_call(self) -> Call[EventPage] | None:
        return None if self._read_all else calls.events_page(self._job, self._cursor)

    def take(self, page: EventPage, /) -> None:
        self._events += page.events
        self._cursor = page.next_cursor
        self._read_all = self._cursor is None

    def pause_after(self, error: QueueError, /) -> float:
        raise error  # the client tried as its retry policy says: nothing is awaited here

    def finished(self) -> list[Event]:
        return self._events


def events(job_id: JobRef) -> ManyReads[list[Event]]:
    """A job's history, oldest first (``GET /jobs/{id}/events``, every page of it)."""
    return History(job_id)
