"""What a backend tells the service of changes the service did not make or see: jobs made
ready, jobs finished. A backend that can tells through these; the app subscribes."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol, runtime_checkable


@runtime_checkable
class ReadySubscriber(Protocol):
    """A backend that tells when a job may have become ready where the service did not
    see it: made ready by another process sharing the database (PostgreSQL, LISTEN/NOTIFY,
    this node's own writes included but for its enqueues, which its service announced
    itself), or a waiting job released by the end of its last dependency (SQLite, whose
    one process hears only its own writes).
    """

    def subscribe(self, on_ready: Callable[[], None]) -> None:
        """Call ``on_ready`` (from any thread) whenever a job may have become ready, and, on a
        backend that listens, once as soon as this node listens: what was notified before
        then went unheard."""
        ...


@runtime_checkable
class FinishSubscriber(Protocol):
    """A backend that tells of jobs finished where the service did not see it: by another
    process sharing the database (PostgreSQL, LISTEN/NOTIFY, a claim's rescue included),
    or by a claim's rescue of expired leases or a dependency's failure that cancelled its
    dependents (SQLite)."""

    def subscribe_finished(self, on_finished: Callable[[Iterable[int] | None], None]) -> None:
        """Call ``on_finished`` (from any thread) with the ids of jobs that finished, or
        None when any job may have finished unheard."""
        ...
