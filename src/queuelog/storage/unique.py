"""Enqueueing job by job, as both SQL backends do for a batch with unique keys: the
idempotency key first, then the unique key's holder, then the insert.

Each step is a named query both ``queries.sql`` hold, run through ``Execute`` (a
backend's connection and its queries). On SQLite the writer's transaction holds the
write lock, so the first attempt decides. On PostgreSQL two nodes may insert the same
key at once: the partial unique index lets one insert, the other's ``ON CONFLICT DO
NOTHING`` waits for it to commit and inserts nothing, and its next attempt finds the
winner.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from queuelog.clock import to_micros
from queuelog.models import EventKind, Job, JobStatus, OnDuplicate
from queuelog.storage.protocol import NewJob
from queuelog.storage.rows import (
    check_reused,
    event_params,
    insert_statement,
    inserted_job,
    job_from_row,
    keyed_job,
    payload_text,
    stored_time,
)
from queuelog.storage.workflows import Settle

# Runs a named query with its parameters; returns the cursor (fetchone() for RETURNING).
Execute = Callable[[str, Mapping[str, Any]], Any]
_ATTEMPTS = 5


def insert_each(
    execute: Execute, jobs: Sequence[NewJob], now: datetime, settle: Settle
) -> list[tuple[Job, bool, bool]]:
    """``(job, created, replaced)`` per job, each enqueued after the one before it. The
    jobs that wait are settled by ``settle`` at the end, in one step, and before the
    next job wherever a later job has the same unique key: it must meet what the earlier
    became (a job cancelled at once holds its key no more)."""
    met_later = _keys_met_later(jobs)
    each: list[tuple[Job, bool, bool]] = []
    for index, new in enumerate(jobs):
        each.append(insert_one(execute, new, now, index))
        if index in met_later or index == len(jobs) - 1:
            made = settle([(job, created) for job, created, _ in each])
            each = [(job, created, was[2]) for (job, created), was in zip(made, each, strict=True)]
    return each


def _keys_met_later(jobs: Sequence[NewJob]) -> set[int]:
    """The indices of the jobs whose unique key a later job of ``jobs`` has too."""
    seen: set[tuple[str, str, str]] = set()
    met: set[int] = set()
    for index in reversed(range(len(jobs))):
        new = jobs[index]
        if new.unique_key is not None:
            key = (new.principal, new.type, new.unique_key)
            if key in seen:
                met.add(index)
            seen.add(key)
    return met


def insert_one(execute: Execute, new: NewJob, now: datetime, index: int) -> tuple[Job, bool, bool]:
    """Enqueue ``new``: the job holding its idempotency key, its unique key's holder
    (kept or replaced), or the job inserted."""
    for _ in range(_ATTEMPTS):
        if new.idempotency_key is not None:
            args = {"principal": new.principal, "idempotency_key": new.idempotency_key}
            row = execute("job_by_idempotency_key", args).fetchone()
            if row is not None:
                return check_reused(keyed_job(row), new, index), False, False
        if new.unique_key is not None:
            row = execute("job_unique_holder", holder_params(new)).fetchone()
            if row is not None:
                settled = _on_duplicate(execute, job_from_row(row), new, now)
                if settled is not None and _key_settled(execute, new, settled[0]):
                    return settled
                if settled is not None:
                    continue  # another request took the key meanwhile: it decides
        query, args = insert_statement([new], now)
        row = execute(query, args).fetchone()
        if row is not None:
            return inserted_job(new, int(row["id"]), stored_time(now)), True, False
    # Each failed attempt met a job that was gone by the next look (pruned, finished).
    raise RuntimeError("the enqueue kept conflicting with jobs that then changed")


def _key_settled(execute: Execute, new: NewJob, holder: Job) -> bool:
    """Make ``new``'s idempotency key name the holder that settled its request: sent
    again, the request gets that job, and another request with the key is refused.
    False if another request recorded the key first (on PostgreSQL, committed while
    this one waited for it): the next look at the key decides this request."""
    if new.idempotency_key is None:
        return True
    args = {"principal": new.principal, "idempotency_key": new.idempotency_key}
    params = {**args, "fingerprint": new.fingerprint, "job_id": holder.id}
    return execute("idempotency_key_settled", params).fetchone() is not None


def holder_params(new: NewJob) -> dict[str, Any]:
    return {"principal": new.principal, "type": new.type, "unique_key": new.unique_key}


def _on_duplicate(
    execute: Execute, holder: Job, new: NewJob, now: datetime
) -> tuple[Job, bool, bool] | None:
    """What an active holder of ``new``'s unique key makes of it; None: insert ``new``."""
    if new.on_duplicate is OnDuplicate.KEEP:
        return holder, False, False
    if holder.status == JobStatus.RUNNING:
        # The running job works on old data: it gives the key up to a new job.
        execute("job_unique_give_up", {"id": holder.id})
        return None
    args = {
        "id": holder.id,
        "payload": payload_text(new),
        "priority": int(new.priority),
        "run_at": to_micros(new.run_at),
        "now": to_micros(now),
    }
    row = execute("job_replace", args).fetchone()
    if row is None:  # no longer pending: the insert and the next look settle it
        return None
    job = job_from_row(row)
    execute(
        "event_insert", event_params(job, now, EventKind.REPLACED, holder.status, new.principal)
    )
    return job, False, True
