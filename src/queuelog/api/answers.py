"""Response models and the JSON of jobs and events. The models document the answers in
OpenAPI; the routes build the JSON directly with ``job_json`` and ``event_json``, and
tests/api/test_openapi_exact.py checks real answers against the published models."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from queuelog.api.schemas import JsonObject, PriorityLabel
from queuelog.clock import rfc3339
from queuelog.models import Job, JobEvent


class JobOut(BaseModel):
    id: int
    type: str
    payload: JsonObject
    priority: PriorityLabel
    status: Literal["waiting", "pending", "running", "completed", "failed", "cancelled"]
    retry_count: int
    max_retries: int
    idempotency_key: str | None
    run_at: str
    claimed_at: str | None
    lease_expires_at: str | None
    worker_id: str | None
    error: str | None = Field(description="Shown to admin keys only; null for everyone else.")
    result: JsonObject | None
    unique_key: str | None
    progress: JsonObject | None = Field(description="The last progress its worker reported.")
    created_at: str
    updated_at: str
    schedule: str | None = Field(description="The schedule that made the job, if one did.")
    group: str | None
    depends_on: list[int] = Field(description="The jobs this one waits for (`[]`: none).")


class TraceContextOut(BaseModel):
    traceparent: str
    tracestate: str | None


class ClaimedJobOut(JobOut):
    lease_token: str
    trace_context: TraceContextOut | None = Field(
        description=(
            "The W3C trace context of the enqueue that made the job (its `traceparent` "
            "and `tracestate` headers, as checked then); null when it had none."
        )
    )


class JobListOut(BaseModel):
    jobs: list[JobOut]
    next_cursor: str | None


class ClaimOut(BaseModel):
    jobs: list[ClaimedJobOut]


class BatchItemOut(BaseModel):
    job: JobOut
    created: bool


class BatchEnqueueOut(BaseModel):
    jobs: list[BatchItemOut]


class BatchCompleteResult(BaseModel):
    id: int
    status: Literal[200, 404, 409, 422]
    type: str | None = Field(None, description="The problem's slug, unless 200.")
    job: JobOut | None = Field(
        None, description="The completed job; left out under `Prefer: return=minimal`."
    )


class BatchCompleteOut(BaseModel):
    results: list[BatchCompleteResult]


class DependencyOut(BaseModel):
    id: int
    type: str
    status: Literal["waiting", "pending", "running", "completed", "failed", "cancelled"]
    result: JsonObject | None


class DependenciesOut(BaseModel):
    dependencies: list[DependencyOut]


class EventOut(BaseModel):
    id: int
    at: str
    event: str
    from_status: str | None
    to_status: str
    actor: str
    detail: str | None


class EventsOut(BaseModel):
    events: list[EventOut]
    next_cursor: str | None


class StatsOut(BaseModel):
    by_status: dict[str, int]
    by_type: dict[str, dict[str, int]]
    oldest_ready_age_seconds: float | None


class KeyOut(BaseModel):
    id: int
    name: str
    roles: list[str]
    max_priority: PriorityLabel
    types: list[str] | None
    prefix: str
    created_at: str
    revoked_at: str | None


class KeyCreatedOut(KeyOut):
    key: str = Field(description="The plaintext key. Shown only in this response.")


class KeyListOut(BaseModel):
    keys: list[KeyOut]


class ProblemError(BaseModel):
    loc: list[str | int] = Field(description="Where: `body`, `query` or `path`, then the field.")
    msg: str


class ProblemOut(BaseModel):
    """An RFC 9457 problem; `type` is a stable slug."""

    type: str
    title: str
    status: int
    detail: str
    errors: list[ProblemError] | None = Field(None, description="With `validation`.")
    index: int | None = Field(None, description="In a batch: the item it is about.")


def _time(at: datetime | None) -> str | None:
    return rfc3339(at) if at else None


def job_json(job: Job, show_error: bool, lease_token: bool = False) -> dict[str, Any]:
    # A new job's run_at and updated_at are most often its created_at itself.
    created = rfc3339(job.created_at)
    run_at = created if job.run_at is job.created_at else _time(job.run_at)
    updated = created if job.updated_at is job.created_at else _time(job.updated_at)
    body: dict[str, Any] = {
        "id": job.id,
        "type": job.type,
        "payload": job.payload,
        "priority": job.priority.label,
        "status": job.status.value,
        "retry_count": job.retry_count,
        "max_retries": job.max_retries,
        "idempotency_key": job.idempotency_key,
        "run_at": run_at,
        "claimed_at": _time(job.claimed_at),
        "lease_expires_at": _time(job.lease_expires_at),
        "worker_id": job.worker_id,
        "error": job.error if show_error else None,
        "result": job.result,
        "unique_key": job.unique_key,
        "progress": job.progress,
        "created_at": created,
        "updated_at": updated,
        "schedule": job.schedule,
        "group": job.group,
        "depends_on": list(job.depends_on),
    }
    if lease_token:  # a claim's answer: the worker carries the job's trace on
        body["lease_token"] = job.lease_token
        trace = job.trace_context
        body["trace_context"] = (
            {"traceparent": trace.traceparent, "tracestate": trace.tracestate} if trace else None
        )
    return body


def dependency_json(job: Job) -> dict[str, Any]:
    """A dependency as ``GET /jobs/{id}/dependencies`` shows it: what it produced."""
    return {"id": job.id, "type": job.type, "status": job.status.value, "result": job.result}


def event_json(event: JobEvent, show_detail: bool) -> dict[str, Any]:
    return {
        "id": event.id,
        "at": _time(event.at),
        "event": event.event.value,
        "from_status": event.from_status.value if event.from_status else None,
        "to_status": event.to_status.value,
        "actor": event.actor,
        # Failure details are worker error text: admins only, like the job's error.
        "detail": event.detail if show_detail else None,
    }
