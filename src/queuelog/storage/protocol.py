"""The Storage protocol: the domain operations every backend implements.

Every operation is awaited; each that depends on the time takes an explicit
``now``; none knows of HTTP or roles. Every state change is guarded in SQL and
writes a ``job_events`` row in the same transaction. A backend opens (and
migrates) its database when it is made, before any request is served.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol, runtime_checkable

from queuelog.errors import QueueError
from queuelog.models import (
    ApiKey,
    EventKind,
    Finished,
    Job,
    JobEvent,
    JobStatus,
    JsonObject,
    Priority,
    QueueStats,
    Role,
    TypeEventKind,
    readonly_dataclass,
)


@readonly_dataclass
class NewJob:
    type: str
    payload: JsonObject
    priority: Priority
    max_retries: int
    lease_seconds: int
    run_at: datetime
    principal: str
    idempotency_key: str | None = None
    fingerprint: str | None = None
    # stored_json(payload), when the caller already encoded it to measure it against
    # the limit: a batch of 500 then encodes each payload once, not twice.
    payload_text: str | None = None
    group: str | None = None


@dataclass(frozen=True, slots=True)
class FlowLimits:
    """A job type's limits, across every worker and node (None: no limit)."""

    concurrency: int | None = None
    group_concurrency: int | None = None
    rate_jobs: int | None = None
    rate_per_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class TypePause:
    """A paused job type: never claimed until an admin resumes it."""

    type: str
    paused_by: str
    paused_at: datetime


@dataclass(frozen=True, slots=True)
class TypeEvent:
    """An admin's act on a job type (its audit record)."""

    type: str
    at: datetime
    event: TypeEventKind
    actor: str


@dataclass(frozen=True, slots=True)
class ClaimParams:
    worker_name: str
    worker_id: str
    limit: int
    now: datetime
    types: Sequence[str] | None = None
    lease_seconds: int | None = None
    # When an expired lease is rescued: the job's next run_at if it is retried.
    retry_at: Callable[[Job], datetime] | None = None
    # The limited types and their limits; a type not named has none.
    limits: Mapping[str, FlowLimits] = field(default_factory=dict)
    # Every configured type: what ``types=None`` covers once a limit or a pause applies.
    configured: Sequence[str] = ()
    # Filled by the claim: how many times a (type, reason) held a ready job back.
    skipped: Counter[tuple[str, str]] = field(default_factory=Counter)


@readonly_dataclass
class FinishParams:
    """Complete (``error is None``) or fail a job held by ``worker_name``."""

    job_id: int
    lease_token: str
    worker_name: str
    now: datetime
    result: JsonObject | None = None
    error: str | None = None
    retryable: bool = True
    retry_at: datetime | None = None
    # stored_json(result), when the caller already encoded it to measure it against
    # the limit: the text stored, so a result is encoded once.
    result_text: str | None = None
    # The types with concurrency limits: a backend shared by several processes tells
    # the others when a job of one of them ends (a slot is free).
    slot_types: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class HeldParams:
    """A statement on a job held by ``worker_name`` under ``lease_token`` (heartbeat, release)."""

    job_id: int
    lease_token: str
    worker_name: str
    now: datetime
    # A heartbeat's new lease from now; None: the job type's lease.
    lease_seconds: int | None = None
    # A release's delay: pending again this long after now (a snooze).
    delay_seconds: float = 0


@dataclass(frozen=True, slots=True)
class JobListParams:
    limit: int
    before_id: int | None = None
    status: JobStatus | None = None
    type: str | None = None
    # Visibility: with either set, only jobs this producer enqueued or that
    # this worker holds now; with neither, all jobs.
    principal: str | None = None
    holder: str | None = None
    idempotency_key: str | None = None


@dataclass(frozen=True, slots=True)
class NewKey:
    name: str
    roles: frozenset[Role]
    max_priority: Priority
    types: tuple[str, ...] | None
    key_hash: str
    prefix: str


@dataclass(frozen=True, slots=True)
class EventCount:
    """How many events of one kind happened in one time bucket."""

    bucket_start: datetime
    event: EventKind
    count: int


class Storage(Protocol):
    def close(self) -> None: ...
    async def ping(self) -> bool: ...

    async def job_insert_many(
        self, jobs: Sequence[NewJob], now: datetime
    ) -> list[tuple[Job, bool]]:
        """Insert jobs in one transaction; ``(job, created)`` in order.

        A job whose ``(principal, idempotency_key)`` exists is not inserted: the
        existing one comes back with ``created=False``. If its fingerprint
        differs, IdempotencyKeyReused (with ``index``) is raised and nothing is
        inserted.
        """
        ...

    async def job_get(self, job_id: int) -> Job | None: ...
    async def job_list(self, params: JobListParams) -> list[Job]: ...
    async def job_events(self, job_id: int) -> list[JobEvent]: ...

    async def job_claim(self, params: ClaimParams) -> list[Job]:
        """Rescue expired leases, then atomically claim up to ``limit`` ready jobs."""
        ...

    async def job_next_due(
        self, now: datetime, types: Sequence[str] | None = None
    ) -> datetime | None:
        """The earliest ``run_at`` after ``now`` among pending jobs (of ``types``)."""
        ...

    async def job_heartbeat(self, held: HeldParams) -> Job:
        """Extend the lease to ``now + lease_seconds`` (default: the job type's lease)."""
        ...

    async def job_release(self, held: HeldParams) -> Job:
        """A held job back to pending now, its attempt unspent; guarded like a heartbeat."""
        ...

    async def job_finish_many(
        self, items: Sequence[FinishParams], with_jobs: bool = True
    ) -> list[Job | Finished | QueueError]:
        """Complete or fail each item under its guard; one answer per item, in order.

        Without ``with_jobs``, a finished item is answered with its id and new
        status only (its row need not be read).
        """
        ...

    async def job_rescue_expired(
        self, now: datetime, retry_at: Callable[[Job], datetime], limit: int = 500
    ) -> list[Job]:
        """Treat running jobs whose lease has passed as failed attempts."""
        ...

    async def type_pauses(self) -> list[TypePause]:
        """The paused job types."""
        ...

    async def type_set_paused(self, job_type: str, paused: bool, actor: str, now: datetime) -> None:
        """Pause or resume ``job_type``, with a ``type_events`` row naming ``actor``, in one
        transaction. Pausing a paused type (or resuming a running one) changes nothing
        and records nothing."""
        ...

    async def type_events(self, job_type: str) -> list[TypeEvent]:
        """What admins did to ``job_type``, oldest first."""
        ...

    async def type_window_opens(
        self, job_type: str, now: datetime, limits: FlowLimits
    ) -> datetime | None:
        """When ``job_type``'s rate window next has room for a claim, if it has none now."""
        ...

    async def job_cancel(self, job_id: int, actor: str, now: datetime) -> Job: ...
    async def job_requeue(self, job_id: int, actor: str, now: datetime) -> Job: ...

    async def job_requeue_failed(self, job_type: str, actor: str, now: datetime) -> int:
        """Every ``failed`` job of ``job_type`` back to ``pending`` (as job_requeue does),
        each with a ``requeued`` event, in one transaction. Returns how many.
        """
        ...

    async def job_prune(self, cutoffs: Mapping[JobStatus, datetime], limit: int = 1000) -> int: ...
    async def job_stats(self, now: datetime) -> QueueStats: ...

    async def job_event_counts(
        self, since: datetime, until: datetime, bucket_seconds: int
    ) -> list[EventCount]:
        """Events with ``since <= at < until``, counted per kind and per bucket.

        Buckets are ``bucket_seconds`` long and start at ``since``; empty ones
        are left out.
        """
        ...

    async def key_insert(self, key: NewKey, now: datetime) -> ApiKey: ...
    async def key_by_hash(self, key_hash: str) -> ApiKey | None: ...
    async def key_list(self) -> list[ApiKey]: ...
    async def key_revoke(self, key_id: int, now: datetime) -> bool: ...
    async def key_has_active_admin(self) -> bool: ...

    async def key_insert_first_admin(self, key: NewKey, now: datetime) -> ApiKey | None:
        """Insert ``key`` only if no active admin key exists, atomically across nodes."""
        ...


@runtime_checkable
class ReadySubscriber(Protocol):
    """A backend that hears when another process sharing the database made a job ready.

    PostgreSQL does (LISTEN/NOTIFY); SQLite has one process, whose own wake-ups suffice.
    """

    def subscribe(self, on_ready: Callable[[], None]) -> None:
        """Call ``on_ready`` (from any thread) whenever a job may have become ready."""
        ...
