"""The Storage protocol: the domain operations every backend implements.

Every operation is awaited; each that depends on the time takes an explicit
``now``; none knows of HTTP or roles. Every state change is guarded in SQL and
writes a ``job_events`` row in the same transaction. A backend opens (and
migrates) its database when it is made, before any request is served.

An operation the database cannot take for a storage fault (no space, an I/O error,
read-only, unreachable, locked past the lock wait) raises ``StorageUnavailable``
(``StorageFull`` for no space), counted by ``health``; never a driver's exception.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from queuelog.errors import QueueError
from queuelog.models import (
    ApiKey,
    DependencyFailure,
    EventKind,
    Finished,
    FlowLimits,
    Job,
    JobEvent,
    JobStatus,
    JsonObject,
    OnDuplicate,
    Priority,
    QueueStats,
    Role,
    TraceContext,
    TypeEvent,
    TypePause,
    readonly_dataclass,
)
from queuelog.schedules import ConfigSync, Schedule, ScheduleSpec
from queuelog.storage.health import StorageHealth


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
    # stored_json(payload), if the caller encoded it to check the limit: encoded once.
    payload_text: str | None = None
    # While an active job of this principal and type holds the unique key, no job is
    # made: the holder is kept, or (replace) a pending holder takes this payload.
    unique_key: str | None = None
    on_duplicate: OnDuplicate = OnDuplicate.KEEP
    group: str | None = None
    trace_context: TraceContext | None = None
    # The jobs this one waits for: ids of existing jobs, and (in a batch) the indices of
    # earlier jobs of the same insert. With any, the job is made waiting.
    depends_on: tuple[int, ...] = ()
    depends_on_items: tuple[int, ...] = ()
    on_dependency_failure: DependencyFailure = DependencyFailure.CANCEL

    @property
    def waits(self) -> bool:
        """Whether the job has dependencies (and is made waiting)."""
        return bool(self.depends_on or self.depends_on_items)


@dataclass(frozen=True, slots=True)
class ClaimParams:
    worker_name: str
    worker_id: str
    limit: int
    now: datetime
    # The types it may take (the service resolves a claim naming none to its node's).
    types: Sequence[str]
    lease_seconds: int | None = None
    # When an expired lease is rescued: the job's next run_at if it is retried.
    retry_at: Callable[[Job], datetime] | None = None
    # The limited types and their limits; a type not named has none.
    limits: Mapping[str, FlowLimits] = field(default_factory=dict)
    # Filled by the claim: how many times a (type, reason) held a ready job back.
    skipped: Counter[tuple[str, str]] = field(default_factory=Counter)
    # Read again once the claim holds its types' locks (waited for): stamped when taken.
    clock: Callable[[], datetime] | None = None


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
    # stored_json(result), if the caller encoded it to check the limit: encoded once.
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
    # A heartbeat's new lease from now; None: the one last asked for, else the type's.
    lease_seconds: int | None = None
    # A heartbeat's progress as stored (compact JSON text); None keeps the last one.
    progress_text: str | None = None
    # A release's delay: pending again this long after now (a snooze).
    delay_seconds: float = 0


@dataclass(frozen=True, slots=True)
class JobListParams:
    limit: int
    before_id: int | None = None
    status: JobStatus | None = None
    type: str | None = None
    # Visibility: with either set, only jobs this producer enqueued or this worker holds
    # now; with neither, all jobs.
    principal: str | None = None
    holder: str | None = None
    idempotency_key: str | None = None
    # Only the jobs that depend on this job (its dependents).
    depends_on: int | None = None


# A listing's page stops once its jobs' stored JSON (payload, result, progress, error)
# reaches this many bytes, after its first job, as DynamoDB's Query stops at 1 MB: 500
# jobs of 64 KiB payloads and results were 64 MB a page, and sixty such pages at once
# took a server to 3 GB. 500 jobs of 2 KiB each still fill a page.
LISTED_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class JobPage:
    """A page of a job listing, newest first; ``more``: jobs after its last are listed too."""

    jobs: list[Job]
    more: bool


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


@dataclass(frozen=True, slots=True)
class NewSchedule:
    """A schedule to store: its spec, its source and its first fire time."""

    spec: ScheduleSpec
    source: str  # "config" or "api"
    next_run_at: datetime


@dataclass(frozen=True, slots=True)
class ScheduleSwitch:
    """A pause or resume; a resume's next fire is stored only while ``updated_at`` is ``seen``."""

    name: str
    paused: bool
    now: datetime
    next_run_at: datetime | None = None
    seen: datetime | None = None


@dataclass(frozen=True, slots=True)
class ScheduleFire:
    """One fire of a due schedule: taken only while its ``next_run_at`` is still ``due``.
    ``job`` (its ``run_at`` the fire time, ``fire_at``) is None when no job can be made
    (its type left the config): the fire is then recorded as skipped."""

    name: str
    due: datetime
    fire_at: datetime
    next_run_at: datetime
    job: NewJob | None
    now: datetime


class FireOutcome(enum.Enum):
    MADE = "made"  # this fire made a job
    SKIPPED = "skipped"  # overlap false and the last job still active, or no job to make
    TAKEN = "taken"  # another node fired it first, or it was paused or deleted meanwhile


class Storage(Protocol):
    health: StorageHealth

    def close(self) -> None: ...
    async def ping(self) -> bool:
        """True when a read answers and, in a fault, a probe write stores (ending it)."""
        ...

    async def durability(self) -> str:
        """What commits wait for, as the database says: ``full``, ``normal`` or ``off``."""
        ...

    async def statistics_refresh(self) -> bool:
        """Gather the planner's statistics of the jobs again if they lag far behind the
        table (a burst); True if it asked (an ANALYZE or VACUUM under way passes it by,
        and the next pass asks again). SQLite's claims name their indexes: no-op."""
        ...

    async def job_insert_many(
        self, jobs: Sequence[NewJob], now: datetime
    ) -> list[tuple[Job, bool]]:
        """Insert jobs in one transaction; ``(job, created)`` in order.

        A job whose ``(principal, idempotency_key)`` exists is not inserted: the existing
        one comes back with ``created=False``. If its fingerprint differs,
        IdempotencyKeyReused (with ``index``) is raised and nothing is inserted.

        Idempotency keys are looked at first. Then a job with a ``unique_key`` that an
        active job of its principal and type holds (a pending one before a running one)
        is not inserted: with ``keep`` the holder comes back unchanged; with ``replace``
        a pending holder takes the job's payload, priority and run_at (event
        ``replaced``), while a running holder gives the key up to a new job. Jobs are
        taken in order, so a later job of the batch sees an earlier one's key. A partial
        unique index over the active holders decides between concurrent inserts, on any
        node. A job's ``trace_context`` is stored and read back with it (a replaced
        holder keeps its own). A job with dependencies is made waiting and settled in
        the same transaction (workflows.py)."""
        ...

    async def job_get(self, job_id: int) -> Job | None: ...
    async def job_get_many(self, job_ids: Sequence[int]) -> list[Job]: ...
    async def job_by_idempotency_key(self, principal: str, key: str) -> Job | None: ...
    async def job_list(self, params: JobListParams) -> JobPage:
        """Up to ``limit`` jobs, fewer where their stored JSON reaches ``LISTED_BYTES``."""
        ...

    async def job_events(self, job_id: int, after: int = 0, limit: int = 500) -> list[JobEvent]: ...

    async def job_claim(self, params: ClaimParams) -> list[Job]:
        """Rescue expired leases, then atomically claim up to ``limit`` ready jobs."""
        ...

    async def job_next_due(self, types: Sequence[str]) -> datetime | None:
        """The earliest ``run_at`` of the scheduled jobs (of ``types``): one that no claim
        has made ready yet though its time has come answers that past time."""
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

        A job that ends here (as in a lease's rescue and ``job_cancel``) releases its
        waiting dependents in the same transaction (storage/workflows.py).

        Without ``with_jobs``, a finished item is answered with its id and new
        status only (its row need not be read)."""
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
    async def job_requeue(self, job_id: int, actor: str, now: datetime) -> Job:
        """Failed or cancelled back to pending (waiting, with dependencies not ended); the
        jobs its failure cancelled wait again (storage/workflows.py)."""
        ...

    async def job_requeue_failed(
        self, job_type: str, actor: str, now: datetime, after_id: int = 0, limit: int = 500
    ) -> list[int]:
        """The first ``limit`` ``failed`` jobs of ``job_type`` after ``after_id`` (in id
        order) back to ``pending`` as job_requeue does, in one transaction; their ids."""
        ...

    async def job_prune(self, cutoffs: Mapping[JobStatus, datetime], limit: int = 1000) -> int:
        """Delete old finished jobs and their events, none a job not completed depends on."""
        ...

    async def job_stats(self, now: datetime) -> QueueStats: ...

    async def job_event_counts(
        self, since: datetime, until: datetime, bucket_seconds: int
    ) -> list[EventCount]:
        """Events with ``since <= at < until``, counted per kind and per bucket of
        ``bucket_seconds`` from ``since`` (empty ones left out); an event that failed its
        job for good counts as ``failed`` (a lease that expired with no attempt left too)."""
        ...

    async def key_insert(self, key: NewKey, now: datetime) -> ApiKey: ...
    async def key_by_hash(self, key_hash: str) -> ApiKey | None: ...
    async def key_list(self) -> list[ApiKey]: ...
    async def key_revoke(self, key_id: int, now: datetime) -> bool: ...
    async def key_has_active_admin(self) -> bool: ...

    async def key_insert_first_admin(self, key: NewKey, now: datetime) -> ApiKey | None:
        """Insert ``key`` only if no active admin key exists, atomically across nodes."""
        ...

    # -- schedules ----------------------------------------------------------

    async def schedule_sync_config(
        self, schedules: Sequence[NewSchedule], now: datetime
    ) -> ConfigSync:
        """The config's schedules become ``schedules`` in one transaction (its others are
        deleted): one kept takes the new fields but keeps its pause state and, unless its
        cadence changed, its ``next_run_at``. Answers what changed."""
        ...

    async def schedule_insert(self, new: NewSchedule, now: datetime) -> Schedule | None:
        """Insert a schedule; None if one of that name exists."""
        ...

    async def schedule_get(self, name: str) -> Schedule | None: ...
    async def schedule_list(self) -> list[Schedule]: ...

    async def schedule_due(self, now: datetime) -> list[Schedule]:
        """The schedules not paused whose ``next_run_at`` has come."""
        ...

    async def schedule_delete(self, name: str) -> None:
        """Delete an API schedule: NotFound, or InvalidState for a config schedule."""
        ...

    async def schedule_set_paused(self, switch: ScheduleSwitch) -> Schedule | None:
        """Pause or resume (NotFound if missing), storing ``next_run_at`` if given; one
        already in that state is left as it is. With ``seen``: None if it changed since."""
        ...

    async def schedule_fire(self, fire: ScheduleFire) -> tuple[FireOutcome, Job | None]:
        """Advance the schedule from ``fire.due`` to ``fire.next_run_at`` and make its
        job, in one transaction, only if its ``next_run_at`` is still ``fire.due`` and it
        is not paused: however many nodes fire at once, one makes the job. With
        ``overlap`` false and the last job pending or running, no job is made and the
        fire is counted as skipped."""
        ...

    async def schedule_trigger(self, name: str, job: NewJob) -> Job:
        """Make the schedule's job now, whatever its pause and overlap (NotFound if missing)."""
        ...
