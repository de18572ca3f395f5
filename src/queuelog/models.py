"""The queue's own words: jobs, their states and priorities, API keys. No I/O here."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar, dataclass_transform

JsonObject = dict[str, Any]

MAX_ID = 2**63 - 1  # job and key ids are 64-bit integers in every backend
MAX_DEPENDS_ON = 100  # the most jobs one job's depends_on names
# A worker's instance, as a claim names it (the SDK checks its own before it claims).
INSTANCE_PATTERN = r"^[A-Za-z0-9._-]{1,64}$"

_Record = TypeVar("_Record")


@dataclass_transform(frozen_default=True)
def readonly_dataclass(cls: type[_Record]) -> type[_Record]:
    """A frozen dataclass to the type checker (mypy refuses any assignment to a field),
    built at run time as a plain dataclass with slots, without ``frozen``'s guard.

    For the values built once or more per job (a Job, the specs and parameters an
    enqueue or a completion goes through). A frozen dataclass sets each field
    through ``object.__setattr__``, which made building a Job several times slower,
    and a Job is built for every job enqueued, claimed or finished. ``unsafe_hash``
    keeps the hash a frozen dataclass has (of its fields), which costs nothing to
    build.
    """
    return dataclass(slots=True, unsafe_hash=True)(cls)


class Priority(enum.IntEnum):
    """Job priority. Stored as a number so SQL sorts it; gaps leave room for new levels."""

    LOW = 0
    MEDIUM = 10
    HIGH = 20
    CRITICAL = 30

    @property
    def label(self) -> str:
        return _LABELS[self]

    @classmethod
    def from_label(cls, label: str) -> Priority:
        try:
            return _BY_LABEL[label.strip().lower()]
        except KeyError:
            raise ValueError(f"unknown priority: {label!r}") from None


# Looked up for every job in and out; a dict is much cheaper than enum name lookups.
_LABELS = {p: p.name.lower() for p in Priority}
_BY_LABEL = {label: p for p, label in _LABELS.items()}
PRIORITY_LABELS = list(_BY_LABEL)


class JobStatus(enum.StrEnum):
    WAITING = "waiting"  # for its dependencies: never claimed
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class Role(enum.StrEnum):
    PRODUCER = "producer"
    WORKER = "worker"
    ADMIN = "admin"


class EventKind(enum.StrEnum):
    ENQUEUED = "enqueued"
    CLAIMED = "claimed"
    COMPLETED = "completed"
    RETRY_SCHEDULED = "retry_scheduled"
    FAILED = "failed"
    LEASE_EXPIRED = "lease_expired"
    CANCELLED = "cancelled"
    REQUEUED = "requeued"
    RELEASED = "released"
    REPLACED = "replaced"
    READY = "ready"  # its last dependency ended: waiting -> pending
    DEPENDENCY_FAILED = "dependency_failed"  # a dependency failed: waiting -> cancelled


# Statuses that end a job: a producer awaiting its result is answered at one of these.
TERMINAL = frozenset({JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED})


class OnDuplicate(enum.StrEnum):
    """What an enqueue does when an active job of its principal and type holds its unique key."""

    KEEP = "keep"
    REPLACE = "replace"


class DependencyFailure(enum.StrEnum):
    """What a waiting job does when one of its dependencies fails or is cancelled."""

    CANCEL = "cancel"  # it is cancelled too, and so are the jobs that wait on it
    RUN = "run"  # it runs once every dependency has ended, whatever the outcome


class TypeEventKind(enum.StrEnum):
    """What an admin did to a job type (its audit record)."""

    PAUSED = "paused"
    RESUMED = "resumed"


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


@readonly_dataclass
class TraceContext:
    """The W3C trace context an enqueue carried (its ``traceparent`` and ``tracestate``
    headers, as checked by the API): the worker that claims the job continues the trace."""

    traceparent: str
    tracestate: str | None = None


@readonly_dataclass
class Finished:
    """A finished job's id and new status: the answer to a batch acknowledgement that
    asked for no jobs back (``Prefer: return=minimal``), so none was read or sent."""

    id: int
    status: JobStatus


@readonly_dataclass
class Job:
    id: int
    type: str
    payload: JsonObject
    priority: Priority
    status: JobStatus
    retry_count: int
    max_retries: int
    principal: str
    idempotency_key: str | None
    run_at: datetime
    created_at: datetime
    updated_at: datetime
    claimed_at: datetime | None = None
    lease_expires_at: datetime | None = None
    lease_token: str | None = None
    worker_id: str | None = None
    error: str | None = None
    result: JsonObject | None = None
    fingerprint: str | None = None
    claimed_by: str | None = None  # name of the worker key holding the lease
    unique_key: str | None = None
    progress: JsonObject | None = None  # the last progress its worker reported
    schedule: str | None = None  # the schedule that made the job, if one did
    group: str | None = None  # the enqueue's group, which group_concurrency counts by
    trace_context: TraceContext | None = None  # the enqueue's, handed to its claimer
    depends_on: tuple[int, ...] = ()  # the jobs this one waits for
    on_dependency_failure: DependencyFailure | None = None  # set when it has dependencies
    has_dependents: bool = False  # another job depends on this one


@dataclass(frozen=True, slots=True)
class JobEvent:
    job_id: int
    at: datetime
    event: EventKind
    from_status: JobStatus | None
    to_status: JobStatus
    actor: str
    detail: str | None = None
    # Where the event is in the stored history (a page's cursor): not what it says.
    id: int | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class ApiKey:
    """An API key as stored: only the hash of the secret is kept."""

    id: int
    name: str
    roles: frozenset[Role]
    max_priority: Priority
    types: tuple[str, ...] | None
    key_hash: str
    prefix: str
    created_at: datetime
    revoked_at: datetime | None = None

    def has(self, role: Role) -> bool:
        return role in self.roles


@dataclass(frozen=True, slots=True)
class QueueStats:
    counts: dict[tuple[str, str], int] = field(default_factory=dict)
    oldest_ready_at: datetime | None = None
    ready: int = 0  # pending jobs whose run_at has come: the ready queue's depth


@dataclass(slots=True)
class MinuteCounts:
    """Jobs completed and failed in the minute that starts at ``start``."""

    start: datetime
    completed: int = 0
    failed: int = 0
