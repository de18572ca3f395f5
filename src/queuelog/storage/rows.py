"""Row codecs both SQL backends share: how a job, an event and a key are stored and
read back, and the bound parameters of the statements both backends run alike."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

import orjson

from queuelog.clock import from_micros, to_micros
from queuelog.errors import (
    IdempotencyKeyReused,
)
from queuelog.models import (
    ApiKey,
    DependencyFailure,
    EventKind,
    Finished,
    Job,
    JobEvent,
    JobStatus,
    Priority,
    Role,
    TraceContext,
)
from queuelog.specs import stored_json
from queuelog.storage.protocol import NewJob, NewKey

# A row maps column names to values: sqlite3.Row, or a psycopg dict row.
Row = Any


def _time(value: Any) -> datetime | None:
    return None if value is None else from_micros(int(value))


def _json(value: Any) -> Any:
    if value is None or isinstance(value, dict):
        return value
    return json.loads(value)


# Every row read turns two stored values into enums: dict lookups cost a tenth of Enum calls.
_PRIORITIES = {p.value: p for p in Priority}


_STATUSES = {s.value: s for s in JobStatus}
_MODES = {m.value: m for m in DependencyFailure}


def job_from_row(row: Row) -> Job:
    """A Job from a ``jobs`` row; both backends store the same column types."""
    return Job(
        id=int(row["id"]),
        type=row["type"],
        payload=_json(row["payload"]),
        priority=_PRIORITIES[row["priority"]],
        status=_STATUSES[row["status"]],
        retry_count=row["retry_count"],
        max_retries=row["max_retries"],
        principal=row["principal"],
        idempotency_key=row["idempotency_key"],
        run_at=from_micros(row["run_at"]),
        created_at=from_micros(row["created_at"]),
        updated_at=from_micros(row["updated_at"]),
        claimed_at=_time(row["claimed_at"]),
        lease_expires_at=_time(row["lease_expires_at"]),
        lease_token=row["lease_token"],
        worker_id=row["worker_id"],
        error=row["error"],
        result=_json(row["result"]),
        fingerprint=row["fingerprint"],
        claimed_by=row["claimed_by"],
        unique_key=row["unique_key"],
        progress=_json(row["progress"]),
        schedule=row["schedule"],
        group=row["job_group"],
        trace_context=_trace_context(row),
        depends_on=_ids(row["depends_on"]),
        on_dependency_failure=_MODES.get(row["on_dependency_failure"]),
        has_dependents=bool(row["has_dependents"]),
    )


def _ids(value: str | None) -> tuple[int, ...]:
    """A job's ``depends_on`` as stored (a JSON array, or NULL for none)."""
    return () if value is None else tuple(json.loads(value))


def _trace_context(row: Row) -> TraceContext | None:
    traceparent = row["traceparent"]
    return None if traceparent is None else TraceContext(traceparent, row["tracestate"])


def _trace_columns(new: NewJob) -> dict[str, str | None]:
    trace = new.trace_context
    if trace is None:
        return {"traceparent": None, "tracestate": None}
    return {"traceparent": trace.traceparent, "tracestate": trace.tracestate}


def event_from_row(row: Row) -> JobEvent:
    return JobEvent(
        id=int(row["id"]),
        job_id=int(row["job_id"]),
        at=from_micros(row["at"]),
        event=EventKind(row["event"]),
        from_status=JobStatus(row["from_status"]) if row["from_status"] else None,
        to_status=JobStatus(row["to_status"]),
        actor=row["actor"],
        detail=row["detail"],
    )


def key_from_row(row: Row) -> ApiKey:
    types = _json(row["types"])
    return ApiKey(
        id=int(row["id"]),
        name=row["name"],
        roles=frozenset(Role(r) for r in _json(row["roles"])),
        max_priority=Priority(row["max_priority"]),
        types=tuple(types) if types is not None else None,
        key_hash=row["key_hash"],
        prefix=row["prefix"],
        created_at=from_micros(row["created_at"]),
        revoked_at=_time(row["revoked_at"]),
    )


def event_params(
    job: Job | Row,
    at: datetime,
    kind: EventKind,
    before: JobStatus | None,
    actor: str,
    detail: Any = None,
) -> dict[str, Any]:
    """The bound parameters of a ``job_events`` row recording ``job``'s transition.

    ``job`` may be a ``jobs`` row not yet made a Job (SQLite's writer leaves that
    to the request's thread).
    """
    job_id, status = id_status(job)
    return {
        "job_id": job_id,
        "at": to_micros(at),
        "event": kind.value,
        "from_status": before.value if before else None,
        "to_status": status.value,
        "actor": actor,
        "detail": detail,
    }


def finished(job: Job | Row) -> Finished:
    """What ``job_finish_many`` answers for a finished item without ``with_jobs``."""
    return Finished(*id_status(job))


def id_status(job: Job | Row) -> tuple[int, JobStatus]:
    if isinstance(job, Job):
        return job.id, job.status
    return int(job["id"]), _STATUSES[job["status"]]


def stored_columns(new: NewJob) -> dict[str, Any]:
    """A new job's columns as both backends store them."""
    return {
        **_varying_columns(new),
        "max_retries": new.max_retries,
        "lease_seconds": new.lease_seconds,
        "principal": new.principal,
        "run_at": to_micros(new.run_at),
        "unique_key": new.unique_key,
        **_trace_columns(new),
        # A job with dependencies is made waiting; the insert's transaction then settles it.
        "status": _made_as(new).value,
        "on_dependency_failure": new.on_dependency_failure.value if new.waits else None,
    }


def _made_as(new: NewJob) -> JobStatus:
    return JobStatus.WAITING if new.waits else JobStatus.PENDING


def insert_statement(jobs: Sequence[NewJob], now: datetime) -> tuple[str, dict[str, Any]]:
    """The insert of ``jobs`` (one or many) and its bound parameters: the jobs as one
    JSON array, in order, each payload as its stored text (stored as is).

    Jobs alike but for type, payload, priority, group and idempotency key, without unique
    keys or dependencies (a producer's usual batch, whose one request gave them one trace
    context), take ``job_insert_batch_uniform``, which binds what they share once; any
    other take ``job_insert_batch``.
    """
    first = jobs[0]
    shared = (first.principal, first.max_retries, first.lease_seconds, first.run_at)
    alike = all(
        new.unique_key is None
        and not new.waits
        and (new.principal, new.max_retries, new.lease_seconds, new.run_at) == shared
        and new.trace_context == first.trace_context
        for new in jobs
    )
    if not alike:
        rows = [stored_columns(new) for new in jobs]
        return "job_insert_batch", {"jobs": json_param(rows), "now": to_micros(now)}
    return "job_insert_batch_uniform", {
        "jobs": json_param([_varying_columns(new) for new in jobs]),
        "principal": first.principal,
        "max_retries": first.max_retries,
        "lease_seconds": first.lease_seconds,
        "run_at": to_micros(first.run_at),
        "now": to_micros(now),
        **_trace_columns(first),
    }


def _varying_columns(new: NewJob) -> dict[str, Any]:
    """The columns a job of a batch may have of its own: all that
    ``job_insert_batch_uniform`` reads of each job (it binds the rest once)."""
    return {
        "type": new.type,
        "payload": payload_text(new),
        "priority": int(new.priority),
        "group": new.group,
        "idempotency_key": new.idempotency_key,
        "fingerprint": new.fingerprint,
    }


def payload_text(new: NewJob) -> str:
    """A new job's payload as stored: the text the service measured, when it did."""
    return new.payload_text if new.payload_text is not None else stored_json(new.payload)


def inserted_job(new: NewJob, job_id: int, stamp: datetime) -> Job:
    """The job ``job_insert_batch`` stored for ``new`` at ``stamp`` (the insert's time
    as stored, ``stored_time(now)``), without reading it back."""
    # Most jobs run at once: their run_at is the insert's time, already converted.
    run_at = stamp if new.run_at == stamp else stored_time(new.run_at)
    return Job(
        id=job_id,
        type=new.type,
        payload=new.payload,
        priority=new.priority,
        status=_made_as(new),
        retry_count=0,
        max_retries=new.max_retries,
        principal=new.principal,
        idempotency_key=new.idempotency_key,
        run_at=run_at,
        created_at=stamp,
        updated_at=stamp,
        fingerprint=new.fingerprint,
        unique_key=new.unique_key,
        group=new.group,
        trace_context=new.trace_context,
        on_dependency_failure=new.on_dependency_failure if new.waits else None,
    )


def stored_time(at: datetime) -> datetime:
    """``at`` as a read gives it back: UTC, to the microsecond."""
    return from_micros(to_micros(at))


def match_inserted(
    jobs: Sequence[NewJob],
    now: datetime,
    rows: Iterable[Row],
    existing: Callable[[NewJob], tuple[Job, bool]],
) -> list[tuple[Job, bool]]:
    """``(job, created)`` per job, from the ``id, principal, idempotency_key`` rows
    that ``job_insert_batch`` returned.

    Ids rise in the array's order, so sorted they follow the jobs that were
    inserted. A job with an idempotency key and no row met a job holding that
    key (perhaps an earlier one of the same batch): ``existing`` finds it, and a
    different fingerprint is IdempotencyKeyReused naming the job's index.
    """
    ordered = sorted(rows, key=lambda r: int(r["id"]))
    keyed = {
        (r["principal"], r["idempotency_key"]): int(r["id"])
        for r in ordered
        if r["idempotency_key"] is not None
    }
    plain = iter([int(r["id"]) for r in ordered if r["idempotency_key"] is None])
    stamp = stored_time(now)
    out: list[tuple[Job, bool]] = []
    for index, new in enumerate(jobs):
        if new.idempotency_key is None:
            out.append((inserted_job(new, next(plain), stamp), True))
            continue
        job_id = keyed.pop((new.principal, new.idempotency_key), None)
        if job_id is not None:
            out.append((inserted_job(new, job_id, stamp), True))
            continue
        job, created = existing(new)
        out.append((job if created else check_reused(job, new, index), created))
    return out


def keyed_job(row: Row) -> Job:
    """The job ``job_by_idempotency_key`` found, with the fingerprint of the request the
    key came with: the job's own, or that of a request the job settled as its unique
    key's holder."""
    return replace(job_from_row(row), fingerprint=row["key_fingerprint"])


def check_reused(job: Job, new: NewJob, index: int | None) -> Job:
    """``job``, which holds ``new``'s idempotency key, unless ``new`` is another request
    (IdempotencyKeyReused, naming the batch's ``index``)."""
    if job.fingerprint != new.fingerprint:
        where = {"index": index} if index is not None else {}
        raise IdempotencyKeyReused(
            "This idempotency key was used with a different request", **where
        )
    return job


def json_param(value: list[Any] | dict[str, Any]) -> str:
    """Rows (a JSON array) or a mapping (a JSON object) handed to one statement
    (``json_each``, ``json_array_elements``).

    orjson writes it several times faster than the standard encoder; a value it
    refuses (a string with a lone surrogate, say) falls back to the standard one.
    """
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return json.dumps(value, separators=(",", ":"))


def key_params(key: NewKey, now: datetime) -> dict[str, Any]:
    """The bound parameters of ``key_insert``: both backends store keys alike."""
    return {
        "name": key.name,
        "roles": json.dumps(sorted(r.value for r in key.roles)),
        "max_priority": int(key.max_priority),
        "types": json.dumps(list(key.types)) if key.types is not None else None,
        "key_hash": key.key_hash,
        "prefix": key.prefix,
        "now": to_micros(now),
    }
