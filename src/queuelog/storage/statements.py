"""The bound parameters of the statements both SQL backends run alike (a claim, a
finish, a batch completion, their events), and what a guard that held a job back
means."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from queuelog.clock import to_micros
from queuelog.errors import InvalidState, NotFound, NotLeaseHolder, QueueError
from queuelog.models import EventKind, Job, JobStatus
from queuelog.specs import stored_json
from queuelog.storage.protocol import ClaimParams, FinishParams, HeldParams
from queuelog.storage.rows import Row, event_params, id_status, json_param


def held_params(held: HeldParams) -> dict[str, Any]:
    """The bound parameters of a statement on a held job (``job_heartbeat``, ``job_release``)."""
    return {
        "id": held.job_id,
        "lease_token": held.lease_token,
        "worker_name": held.worker_name,
        "lease_seconds": held.lease_seconds,
        "progress": held.progress_text,
        "now": to_micros(held.now),
        "run_at": to_micros(held.now + timedelta(seconds=held.delay_seconds)),
    }


def requeue_params(job_type: str, now: datetime, after_id: int, limit: int) -> dict[str, Any]:
    """The bound parameters of ``job_requeue_failed``: a chunk of a type's failed jobs."""
    return {"type": job_type, "now": to_micros(now), "after_id": after_id, "limit": limit}


def result_text(item: FinishParams) -> str | None:
    """A completion's result as stored: the text the service measured, when it did."""
    return item.result_text if item.result_text is not None else json_text(item.result)


def json_text(value: Any) -> str | None:
    """``stored_json``, with None (SQL NULL) for no value."""
    return None if value is None else stored_json(value)


def expired_finish(job: Job, now: datetime, retry_at: Callable[[Job], datetime]) -> FinishParams:
    """How the rescue fails a job whose lease passed its deadline: as its holder would."""
    assert job.lease_token is not None and job.claimed_by is not None
    return FinishParams(
        job_id=job.id,
        lease_token=job.lease_token,
        worker_name=job.claimed_by,
        now=now,
        error="lease expired",
        retry_at=retry_at(job),
    )


def finish_statement(item: FinishParams, expired: bool = False) -> tuple[str, dict[str, Any]]:
    """The guarded query that completes or fails ``item``, and its parameters.

    ``expired`` is set only by the rescue of leases past their deadline.
    """
    args: dict[str, Any] = {
        "id": item.job_id,
        "lease_token": item.lease_token,
        "worker_name": item.worker_name,
        "now": to_micros(item.now),
    }
    if item.error is None:
        args["result"] = result_text(item)
        return "job_complete", args
    args.update(
        error=item.error,
        retryable=item.retryable,
        retry_at=to_micros(item.retry_at or item.now),
        expired=expired,
    )
    return "job_fail", args


_FINISHED_AS = {
    JobStatus.COMPLETED: EventKind.COMPLETED,
    JobStatus.PENDING: EventKind.RETRY_SCHEDULED,
    JobStatus.FAILED: EventKind.FAILED,
}


def finish_event(
    job: Job | Row, item: FinishParams, kind: EventKind | None, actor: str | None
) -> dict[str, Any]:
    """The event of a finished ``item``: named after where the job went, unless ``kind``."""
    kind = kind or _FINISHED_AS[id_status(job)[1]]
    return event_params(
        job, item.now, kind, JobStatus.RUNNING, actor or item.worker_name, item.error
    )


def match_completed(
    items: Sequence[FinishParams],
    rows: Iterable[Row],
    refused: Callable[[FinishParams], QueueError],
) -> list[Row | QueueError]:
    """Each item's row from ``job_complete_batch``, or ``refused(item)`` for the
    items whose guard held the job back."""
    by_id = {int(row["id"]): row for row in rows}
    outcomes: list[Row | QueueError] = []
    for item in items:
        row = by_id.get(item.job_id)
        outcomes.append(refused(item) if row is None else row)
    return outcomes


def guard_failure(job: Job | None) -> QueueError:
    """Why a guarded transition on a held job changed no row (the seed's rule)."""
    if job is None:
        return NotFound("No such job")
    if job.status != JobStatus.RUNNING:
        # A fixed text: a worker must not learn the state of a job it cannot see.
        return InvalidState("The job is not running")
    return NotLeaseHolder("The job is held by another worker or under a newer lease")


def complete_batch_params(items: Sequence[FinishParams]) -> dict[str, Any] | None:
    """The bound parameters of ``job_complete_batch``, which completes many jobs in one
    statement: for completions of distinct jobs by one worker at one time (a worker's
    batch acknowledgement). None for anything else, which is finished item by item.
    """
    if len(items) < 2:
        return None
    first = items[0]
    if any(
        item.error is not None or item.now != first.now or item.worker_name != first.worker_name
        for item in items
    ):
        return None
    if len({item.job_id for item in items}) != len(items):
        return None
    batch = [
        {
            "id": item.job_id,
            "lease_token": item.lease_token,
            "worker_name": item.worker_name,
            "result": result_text(item),
        }
        for item in items
    ]
    return {"items": json_param(batch), "now": to_micros(first.now)}


def claim_params(params: ClaimParams, types: Any) -> dict[str, Any]:
    """The bound parameters of ``job_claim``; ``types`` as the backend's query takes it."""
    return {
        "worker_id": params.worker_id,
        "worker_name": params.worker_name,
        "now": to_micros(params.now),
        "lease_seconds": params.lease_seconds,
        "types": types,
        "limit": params.limit,
    }


def claim_order(job: Job) -> tuple[int, datetime, int]:
    """A claim hands out jobs highest priority first, then oldest first."""
    return (-job.priority, job.created_at, job.id)


def each_event_params(
    ids: Sequence[int],
    at: datetime,
    kind: EventKind,
    before: JobStatus,
    after: JobStatus,
    actor: str,
) -> dict[str, Any]:
    """The bound parameters of ``event_insert_each``: one event, for each job of ``ids``."""
    return {
        "ids": json_param(list(ids)),
        "at": to_micros(at),
        "event": kind.value,
        "from_status": before.value,
        "to_status": after.value,
        "actor": actor,
    }


def claimed_events(jobs: Sequence[Job], params: ClaimParams) -> dict[str, Any]:
    """The ``claimed`` events of the jobs a claim took, by the claiming worker instance."""
    ids = [job.id for job in jobs]
    return each_event_params(
        ids, params.now, EventKind.CLAIMED, JobStatus.PENDING, JobStatus.RUNNING, params.worker_id
    )
