"""What the API answers, as typed values: jobs, events, keys and per-item results."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from queuelog.errors import QueueError
from queuelog.models import JobStatus, Priority, Role

JsonObject = dict[str, Any]


def parse_time(value: str | None) -> datetime | None:
    """An RFC 3339 time from the API (``...Z``) as an aware datetime, or None."""
    # Python 3.11's fromisoformat reads the "Z" itself.
    return None if value is None else datetime.fromisoformat(value)


def _time(value: str) -> datetime:
    return datetime.fromisoformat(value)


# A worker reads every job it claims: a dict lookup costs a fraction of an Enum call.
_STATUSES = {s.value: s for s in JobStatus}


def _status(value: str) -> JobStatus:
    try:
        return _STATUSES[value]
    except KeyError:
        raise ValueError(f"unknown job status: {value!r}") from None


def _carrier(trace_context: JsonObject | None) -> dict[str, str] | None:
    if not trace_context:
        return None
    return {name: str(value) for name, value in trace_context.items() if value is not None}


@dataclass(frozen=True, slots=True)
class Job:
    """A job as the API shows it. ``lease_token`` is set only on jobs this worker claimed."""

    id: int
    type: str
    payload: JsonObject
    priority: Priority
    status: JobStatus
    retry_count: int
    max_retries: int
    idempotency_key: str | None
    run_at: datetime
    created_at: datetime
    updated_at: datetime
    claimed_at: datetime | None = None
    lease_expires_at: datetime | None = None
    worker_id: str | None = None
    error: str | None = None
    result: JsonObject | None = None
    lease_token: str | None = field(default=None, repr=False)  # a secret of its worker
    unique_key: str | None = None
    progress: JsonObject | None = None
    schedule: str | None = None  # the schedule that made the job, if one did
    depends_on: tuple[int, ...] = ()  # the jobs this one waits for
    # Set by the Worker on the job it hands a handler: where report_progress goes, and
    # what dependencies() reads.
    progress_to: Callable[[JsonObject], None] | None = field(
        default=None, repr=False, compare=False
    )
    dependencies_from: Callable[[], list[Dependency]] | None = field(
        default=None, repr=False, compare=False
    )

    def report_progress(self, progress: JsonObject) -> None:
        """In a handler: how far the work is (a JSON object of at most 4,096 bytes), sent
        with the job's next heartbeat, at most one a second; the job shows the last one
        sent. A report still unsent when the handler returns is dropped: the job's outcome
        says how the work ended.

        Raises:
            ValueError: not a JSON object (as the server reads one: at most 64 levels deep),
                too large, or not a job a Worker handed out.
        """
        if self.progress_to is None:
            raise ValueError("report_progress is for the job a Worker hands its handler")
        self.progress_to(progress)

    def dependencies(self) -> list[Dependency]:
        """In a handler: the jobs this one depends on, with their status and result (what
        they produced), read from the server with the Worker's client.

        Raises:
            ValueError: not a job a Worker handed out (use ``Client.dependencies``).
        """
        if self.dependencies_from is None:
            raise ValueError("dependencies() is for the job a Worker hands its handler")
        return self.dependencies_from()

    group: str | None = None
    # On a claimed job: the W3C trace context of the enqueue that made it, as a carrier
    # (``{"traceparent": ..., "tracestate": ...}``, the latter only when sent) that
    # OpenTelemetry's ``propagate.extract`` reads; the Worker continues its trace.
    trace_context: dict[str, str] | None = None

    @classmethod
    def from_json(cls, data: JsonObject) -> Job:
        return cls(
            id=int(data["id"]),
            type=str(data["type"]),
            payload=dict(data.get("payload") or {}),
            priority=Priority.from_label(str(data["priority"])),
            status=_status(data["status"]),
            retry_count=int(data["retry_count"]),
            max_retries=int(data["max_retries"]),
            idempotency_key=data.get("idempotency_key"),
            run_at=_time(data["run_at"]),
            created_at=_time(data["created_at"]),
            updated_at=_time(data["updated_at"]),
            claimed_at=parse_time(data.get("claimed_at")),
            lease_expires_at=parse_time(data.get("lease_expires_at")),
            worker_id=data.get("worker_id"),
            error=data.get("error"),
            result=data.get("result"),
            lease_token=data.get("lease_token"),
            unique_key=data.get("unique_key"),
            progress=data.get("progress"),
            schedule=data.get("schedule"),
            group=data.get("group"),
            trace_context=_carrier(data.get("trace_context")),
            depends_on=tuple(int(i) for i in data.get("depends_on") or ()),
        )

    @property
    def lease_seconds(self) -> float | None:
        """Length of the lease this job was claimed with (None if not claimed)."""
        if self.claimed_at is None or self.lease_expires_at is None:
            return None
        return (self.lease_expires_at - self.claimed_at).total_seconds()


@dataclass(frozen=True, slots=True)
class Dependency:
    """A job another depends on, as ``GET /jobs/{id}/dependencies`` shows it."""

    id: int
    type: str
    status: JobStatus
    result: JsonObject | None

    @classmethod
    def from_json(cls, data: JsonObject) -> Dependency:
        return cls(
            id=int(data["id"]),
            type=str(data["type"]),
            status=_status(data["status"]),
            result=data.get("result"),
        )


@dataclass(frozen=True, slots=True)
class Event:
    """One entry of a job's history."""

    at: datetime
    event: str
    from_status: JobStatus | None
    to_status: JobStatus
    actor: str
    detail: str | None
    id: int | None = None  # its place in the history: a cursor for the events after it

    @classmethod
    def from_json(cls, data: JsonObject) -> Event:
        source = data.get("from_status")
        return cls(
            at=_time(data["at"]),
            event=str(data["event"]),
            from_status=JobStatus(source) if source else None,
            to_status=JobStatus(data["to_status"]),
            actor=str(data["actor"]),
            detail=data.get("detail"),
            id=data.get("id"),
        )


@dataclass(frozen=True, slots=True)
class Enqueued:
    """One answer of a batch enqueue: the job, and whether this call created it."""

    job: Job
    created: bool


@dataclass(frozen=True, slots=True)
class Acknowledged:
    """One answer of a batch completion. ``error`` is set unless ``status`` is 200."""

    id: int
    status: int
    job: Job | None
    error: QueueError | None

    @property
    def ok(self) -> bool:
        return self.status == 200


@dataclass(frozen=True, slots=True)
class Key:
    """An API key. ``key`` (the plaintext) is set only in the answer that created it."""

    id: int
    name: str
    roles: frozenset[Role]
    max_priority: Priority
    types: tuple[str, ...] | None
    prefix: str
    created_at: datetime
    revoked_at: datetime | None
    key: str | None = field(default=None, repr=False)  # never in a repr: it is the secret

    @classmethod
    def from_json(cls, data: JsonObject) -> Key:
        types = data.get("types")
        return cls(
            id=int(data["id"]),
            name=str(data["name"]),
            roles=frozenset(Role(r) for r in data["roles"]),
            max_priority=Priority.from_label(str(data["max_priority"])),
            types=tuple(types) if types is not None else None,
            prefix=str(data["prefix"]),
            created_at=_time(data["created_at"]),
            revoked_at=parse_time(data.get("revoked_at")),
            key=data.get("key"),
        )


@dataclass(frozen=True, slots=True)
class Schedule:
    """A recurring job: ``cron`` (read in ``timezone``) or ``every_seconds``."""

    name: str
    cron: str | None
    every_seconds: int | None
    timezone: str
    type: str
    payload: JsonObject
    priority: Priority
    overlap: bool
    paused: bool
    source: str  # "config" or "api"
    next_run_at: datetime
    last_run_at: datetime | None
    last_job_id: int | None
    jobs_made: int
    fires_skipped: int

    @classmethod
    def from_json(cls, data: JsonObject) -> Schedule:
        return cls(
            name=str(data["name"]),
            cron=data.get("cron"),
            every_seconds=data.get("every_seconds"),
            timezone=str(data["timezone"]),
            type=str(data["type"]),
            payload=dict(data.get("payload") or {}),
            priority=Priority.from_label(str(data["priority"])),
            overlap=bool(data["overlap"]),
            paused=bool(data["paused"]),
            source=str(data["source"]),
            next_run_at=_time(data["next_run_at"]),
            last_run_at=parse_time(data.get("last_run_at")),
            last_job_id=data.get("last_job_id"),
            jobs_made=int(data.get("jobs_made", 0)),
            fires_skipped=int(data.get("fires_skipped", 0)),
        )


@dataclass(frozen=True, slots=True)
class Page:
    """One page of ``GET /jobs``."""

    jobs: list[Job]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class EventPage:
    """One page of ``GET /jobs/{id}/events``."""

    events: list[Event]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class JobType:
    """A configured job type (``GET /types``): its limits, pause and jobs by status."""

    name: str
    concurrency: int | None
    group_concurrency: int | None
    rate_limit: JsonObject | None  # {"jobs", "per_seconds"}
    paused: bool
    paused_by: str | None
    paused_at: datetime | None
    counts: dict[str, int]

    @classmethod
    def from_json(cls, data: JsonObject) -> JobType:
        return cls(
            name=str(data["name"]),
            concurrency=data.get("concurrency"),
            group_concurrency=data.get("group_concurrency"),
            rate_limit=data.get("rate_limit"),
            paused=bool(data["paused"]),
            paused_by=data.get("paused_by"),
            paused_at=parse_time(data.get("paused_at")),
            counts={str(k): int(v) for k, v in dict(data["counts"]).items()},
        )
