"""Jobs that wait for other jobs, as both SQL backends keep them: made waiting, released
when their dependencies end, brought back when a failed dependency is redriven.

A waiting job counts what it still waits for (``deps_left``): each dependency not
completed, except that with ``on_dependency_failure = "run"`` a dependency that failed
or was cancelled has ended too. ``job_dependencies`` holds one row per (job,
dependency), indexed by the dependency, and a job that any other depends on is marked
``has_dependents``: the transition that ends such a job (complete, fail for good,
cancel, a lease rescued for good) runs ``release`` in its own transaction: no later
sweep discovers ready jobs, so a graph never stalls on a lost message. A job that
nobody depends on ends as it always did. A release, like a redrive, is a few
set-based statements however deep the graph it moves: recursive queries walk it
whole, where a statement per level cost a round trip per level.

On PostgreSQL, an insert locks the dependencies it names (``job_dependency_hold``)
before reading their status, so a dependency that ends on another node meanwhile
either ended first (and is read as ended) or waits for the insert to commit and then
finds the new dependent. Two dependencies of one job that end at once count off in
turn under the job's row lock; a release with a failure locks, in id order, every
waiting job its statements may change before they change them (``hold_dependents``).
A redrive locks, in id order, the jobs it may bring back and the dependencies of the
jobs it may move before it reads how they stand (``hold_dependencies``), so of a
redrive and the end or redrive of another dependency on another node, the later sees
what the earlier did.

Each step is a named query both ``queries.sql`` hold, run through ``WorkflowSql``;
so is an admin's cancel or requeue of one job (``transition``), which the release or
redrive of its dependents follows in the same transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from queuelog.clock import to_micros
from queuelog.errors import InvalidState, NotFound, ValidationFailed
from queuelog.models import TERMINAL, DependencyFailure, EventKind, Job, JobStatus
from queuelog.storage.protocol import NewJob
from queuelog.storage.rows import Row, event_params, job_from_row, json_param
from queuelog.storage.statements import each_event_params

# Settles the jobs an insert made so far that no call settled yet: all made, as they are.
Settle = Callable[[Sequence[tuple[Job, bool]]], list[tuple[Job, bool]]]
# The actor of the transitions a dependency's end makes.
ACTOR = "queuelog"
_FAILED = frozenset({JobStatus.FAILED, JobStatus.CANCELLED})


class WorkflowSql(Protocol):
    """What a backend gives: its named queries on the transaction's connection."""

    def rows(self, name: str, args: dict[str, Any]) -> list[Row]: ...
    def run(self, name: str, args: dict[str, Any]) -> None: ...
    def ids(self, ids: list[int]) -> Any: ...
    def hold_dependencies(self, ids: Any) -> None: ...
    def hold_dependents(self, ids: Any) -> None: ...


@dataclass
class Released:
    """The waiting jobs a transaction moved: made pending, or cancelled."""

    ready: list[int] = field(default_factory=list)
    cancelled: list[int] = field(default_factory=list)


def unfinished(status: JobStatus, mode: DependencyFailure | None) -> bool:
    """Whether a dependency in ``status`` still holds back a job in ``mode``."""
    if status is JobStatus.COMPLETED:
        return False
    return mode is not DependencyFailure.RUN or status not in _FAILED


# -- making waiting jobs ----------------------------------------------------------


def settle_new(
    sql: WorkflowSql,
    jobs: Sequence[NewJob],
    made: Sequence[tuple[Job, bool]],
    now: datetime,
    first: int = 0,
    known: Mapping[int, JobStatus] | None = None,
) -> list[tuple[Job, bool]]:
    """The jobs of an insert once those made waiting (from the ``first``) took their
    dependencies: still waiting, or pending (``ready``), or cancelled
    (``dependency_failed``) at once. ``known``: dependencies this transaction holds
    already, with their status (not held and marked again)."""
    waiting = [
        (index, new, job)
        for index, (new, (job, created)) in enumerate(zip(jobs, made, strict=True))
        if index >= first and created and new.waits
    ]
    if not waiting:
        return list(made)
    deps_of = {job.id: _dependencies(new, made) for _, new, job in waiting}
    known = known or {}
    wanted = sorted({dep for deps in deps_of.values() for dep in deps} - known.keys())
    status_of = {**known, **_held(sql, wanted)}
    for index, new, _ in waiting:
        missing = [dep for dep in new.depends_on if dep not in status_of]
        if missing:  # gone since the service looked (pruned)
            detail = f"depends_on names job {missing[0]}, which does not exist"
            raise ValidationFailed(detail, index=index)
    # In order: a later job of the batch sees what an earlier one became.
    settled = [_settled(new, job, deps_of[job.id], status_of) for _, new, job in waiting]
    pairs = [[job_id, dep] for job_id, deps in deps_of.items() for dep in deps]
    sql.run("job_dependency_insert", {"pairs": json_param(pairs)})
    rows = sql.rows("job_settle", {"jobs": json_param(settled), "now": to_micros(now)})
    after = {job.id: job for job in map(job_from_row, rows)}
    _record_settled(sql, list(after.values()), status_of, now)
    return [(after.get(job.id, job), created) for job, created in made]


def settler(sql: WorkflowSql, jobs: Sequence[NewJob], now: datetime) -> Settle:
    """For an insert job by job (a batch with unique keys), settling the jobs that wait
    in steps (``unique.insert_each`` says when). The dependencies the jobs name are
    held first, in id order, as ``settle_new`` holds them, once for the whole insert:
    two such inserts take them in one order. (A job that lands on an active holder of
    its key, not made, leaves the dependencies it named marked ``has_dependents``: their
    end looks for dependents and finds none.)"""
    known = _held(sql, sorted({dep for new in jobs for dep in new.depends_on}))
    done = 0

    def settle(made: Sequence[tuple[Job, bool]]) -> list[tuple[Job, bool]]:
        nonlocal done
        settled = settle_new(sql, jobs[: len(made)], made, now, first=done, known=known)
        done = len(made)
        return settled

    return settle


def _held(sql: WorkflowSql, ids: list[int]) -> dict[int, JobStatus]:
    """Hold the jobs of ``ids`` as dependencies (``job_dependency_hold``); their status."""
    if not ids:
        return {}
    rows = sql.rows("job_dependency_hold", {"ids": sql.ids(ids)})
    return {int(r["id"]): JobStatus(r["status"]) for r in rows}


def _dependencies(new: NewJob, made: Sequence[tuple[Job, bool]]) -> list[int]:
    """The ids ``new`` waits for, once each (an item may name a job an id names too)."""
    ids = [*new.depends_on, *(made[index][0].id for index in new.depends_on_items)]
    return list(dict.fromkeys(ids))


def _settled(
    new: NewJob, job: Job, deps: list[int], status_of: dict[int, JobStatus]
) -> dict[str, Any]:
    mode = new.on_dependency_failure
    failed = next((dep for dep in deps if status_of[dep] in _FAILED), None)
    left = sum(unfinished(status_of[dep], mode) for dep in deps)
    if mode is DependencyFailure.CANCEL and failed is not None:
        status = JobStatus.CANCELLED
    else:
        status = JobStatus.WAITING if left else JobStatus.PENDING
        failed = None
    status_of[job.id] = status
    return {
        "id": job.id,
        "status": status.value,
        "deps_left": left,
        "depends_on": json_param(deps),
        "cancelled_by": failed,
    }


def _record_settled(
    sql: WorkflowSql, jobs: list[Job], status_of: dict[int, JobStatus], now: datetime
) -> None:
    events = []
    for job in jobs:
        if job.status is JobStatus.PENDING:
            events.append(event_params(job, now, EventKind.READY, JobStatus.WAITING, ACTOR))
        elif job.status is JobStatus.CANCELLED:
            cause = next(dep for dep in job.depends_on if status_of[dep] in _FAILED)
            detail = f"job {cause} {status_of[cause].value}"
            kind = EventKind.DEPENDENCY_FAILED
            events.append(event_params(job, now, kind, JobStatus.WAITING, ACTOR, detail))
    if events:
        sql.run("event_insert_many", {"events": json_param(events)})


# -- the end of a dependency ------------------------------------------------------


def release(sql: WorkflowSql, ended: Iterable[Job | Row], now: datetime) -> Released:
    """Release the waiting dependents of the ``ended`` jobs (those that ended: completed,
    failed for good or cancelled): the failures' cancellation spreads through every
    level of waiting ``cancel``-mode jobs first, then every job that ended, cancelled
    ones included, counts itself off the waiting jobs that depend on it, in one
    statement each however deep the graph."""
    ending = dict(_endings(ended))
    if not ending:
        return Released()
    failed = [job_id for job_id, status in ending.items() if status in _FAILED]
    cancelled = _cancel_dependents(sql, ending, failed, now) if failed else []
    ends = [*ending, *(int(r["id"]) for r in cancelled if r["has_dependents"])]
    rows = sql.rows("job_release_dependents", {"ids": sql.ids(ends), "now": to_micros(now)})
    ready = [int(r["id"]) for r in rows if r["status"] == JobStatus.PENDING.value]
    _record_released(sql, cancelled, ready, ending, now)
    return Released(ready=ready, cancelled=[int(r["id"]) for r in cancelled])


def _cancel_dependents(
    sql: WorkflowSql, ending: dict[int, JobStatus], failed: list[int], now: datetime
) -> list[Row]:
    """Cancel the waiting ``cancel``-mode jobs that the ``failed`` jobs' end reaches,
    directly or through jobs it cancels; their rows in the order their levels reached
    them. On PostgreSQL every waiting dependent these ends may change is locked in id
    order before the cascade is read (``hold_dependents``), so the read, a statement
    after the locks, sees every dependent committed before them."""
    sql.hold_dependents(sql.ids(list(ending)))
    edges = sql.rows("job_cancel_cascade", {"ids": sql.ids(failed)})
    causes = _cascade_causes(failed, [(int(r["job_id"]), int(r["depends_on_id"])) for r in edges])
    if not causes:
        return []
    args = {"jobs": json_param([[job, cause] for job, cause in causes.items()])}
    rows = sql.rows("job_cancel_dependents", {**args, "now": to_micros(now)})
    order = {job_id: index for index, job_id in enumerate(causes)}
    return sorted(rows, key=lambda row: order[int(row["id"])])


def _cascade_causes(failed: Iterable[int], edges: Iterable[tuple[int, int]]) -> dict[int, int]:
    """Each job the cascade cancels, with the dependency it names as the cause, level by
    level from the ``failed`` jobs along ``edges`` (job, dependency; a dependency that no
    level holds is passed over): a job is cancelled at the first level that holds one of
    its dependencies, by the lowest id among those, as when each level was a statement
    of its own. A job's cause comes before it."""
    dependents: dict[int, list[int]] = {}
    for job_id, dependency in edges:
        dependents.setdefault(dependency, []).append(job_id)
    causes: dict[int, int] = {}
    level = set(failed)
    while level:
        found: dict[int, int] = {}
        for dependency in sorted(level):
            for job_id in dependents.get(dependency, ()):
                if job_id not in causes and job_id not in found:
                    found[job_id] = dependency  # the lowest first: the level is sorted
        causes.update(found)
        level = set(found)
    return causes


def _endings(jobs: Iterable[Job | Row]) -> Iterable[tuple[int, JobStatus]]:
    """``(id, status)`` of each job that ended and that another job depends on."""
    for job in jobs:
        if isinstance(job, Job):
            if job.has_dependents and job.status in TERMINAL:
                yield job.id, job.status
        elif job["has_dependents"] and job["status"] in _TERMINAL_VALUES:
            yield int(job["id"]), JobStatus(job["status"])


_TERMINAL_VALUES = frozenset(status.value for status in TERMINAL)


def _record_released(
    sql: WorkflowSql,
    cancelled: list[Row],
    ready: list[int],
    ending: dict[int, JobStatus],
    now: datetime,
) -> None:
    _record_each(sql, ready, _READY, ACTOR, now)
    events = []
    for row in cancelled:
        cause = int(row["cancelled_by"])
        detail = f"job {cause} {ending.get(cause, JobStatus.CANCELLED).value}"
        kind = EventKind.DEPENDENCY_FAILED
        events.append(event_params(row, now, kind, JobStatus.WAITING, ACTOR, detail))
    if events:
        sql.run("event_insert_many", {"events": json_param(events)})


# -- an admin's change of one job (cancel, requeue), before its release or redrive -


def transition(
    sql: WorkflowSql, query: str, job_id: int, actor: str, now: datetime, kind: EventKind
) -> Job:
    """Run the guarded ``query`` on the job and record its event; NotFound, or
    InvalidState naming the status the job is in now (on PostgreSQL another node may
    have moved it since it was read)."""
    before = _job(sql, job_id)
    if before is None:
        raise NotFound("No such job")
    rows = sql.rows(query, {"id": job_id, "now": to_micros(now)})
    if not rows:
        current = _job(sql, job_id) or before
        raise InvalidState(f"Job is {current.status.value}")
    job = job_from_row(rows[0])
    sql.run("event_insert", event_params(job, now, kind, before.status, actor))
    return job


def _job(sql: WorkflowSql, job_id: int) -> Job | None:
    rows = sql.rows("job_get", {"id": job_id})
    return job_from_row(rows[0]) if rows else None


# -- a redrive --------------------------------------------------------------------


def requeue(sql: WorkflowSql, job_id: int, actor: str, now: datetime) -> Job:
    """An admin's redrive of one failed or cancelled job, and of what its end moved. The
    job is locked with the dependencies the redrive reads, in one statement and in id
    order, before it changes: two redrives of a job's dependencies then take turns,
    where each locking its own job first could hold one that the other waits for."""
    sql.hold_dependencies(sql.ids([job_id]))
    job = transition(sql, "job_requeue", job_id, actor, now, EventKind.REQUEUED)
    return redrive(sql, [job], actor, now, held=True)[0]


def redrive(
    sql: WorkflowSql, requeued: Sequence[Job], actor: str, now: datetime, held: bool = False
) -> list[Job]:
    """After ``requeued`` jobs went back from failed or cancelled: the jobs their failure
    cancelled wait again, and in turn those that these jobs' cancellation cancelled
    (event ``requeued``), unless another dependency of theirs failed too (a redrive of
    that one brings them back); so do the dependents in run mode that these jobs' end
    made pending and that have not run yet, since what they waited for runs again. Each
    step is one statement however deep the graph. The requeued jobs as they are then:
    a job with dependencies waits, unless none is left (then it is ``ready``).
    ``held``: the caller locked what the redrive reads already (``hold_dependencies``)."""
    ids = sql.ids([job.id for job in requeued])
    if not held:
        sql.hold_dependencies(ids)
    back = sql.rows("job_reinstate_dependents", {"ids": ids, "now": to_micros(now)})
    # The requeued jobs and those back are what their dependents wait for again.
    again = [job.id for job in requeued] + [int(r["id"]) for r in back if r["has_dependents"]]
    args = {"ids": sql.ids(again), "now": to_micros(now)}
    sql.run("job_cancel_moved", {"ids": args["ids"]})
    _record_each(sql, [int(r["id"]) for r in back], _BACK, actor, now)
    rewaiting = sql.rows("job_rewait_dependents", args)
    _record_each(sql, [int(r["id"]) for r in rewaiting], _AGAIN, actor, now)
    counted = [job.id for job in requeued if job.status is JobStatus.WAITING]
    counted += [int(r["id"]) for r in sql.rows("job_waiting_dependents", {"ids": args["ids"]})]
    ready = _recount(sql, counted, now)
    return [ready.get(job.id, job) for job in requeued]


def _recount(sql: WorkflowSql, counted: list[int], now: datetime) -> dict[int, Job]:
    """The waiting jobs of ``counted`` count again what they wait for; those that wait for
    nothing more are made pending (event ``ready``), and returned by id."""
    if not counted:
        return {}
    sql.run("job_recount", {"ids": sql.ids(counted)})
    rows = sql.rows("job_ready_counted", {"ids": sql.ids(counted), "now": to_micros(now)})
    ready = {job.id: job for job in map(job_from_row, rows)}
    _record_each(sql, list(ready), _READY, ACTOR, now)
    return ready


# The moves a redrive records, each an event kind and the statuses it goes between.
_Move = tuple[EventKind, JobStatus, JobStatus]
_READY: _Move = (EventKind.READY, JobStatus.WAITING, JobStatus.PENDING)
_BACK: _Move = (EventKind.REQUEUED, JobStatus.CANCELLED, JobStatus.WAITING)
_AGAIN: _Move = (EventKind.REQUEUED, JobStatus.PENDING, JobStatus.WAITING)


def _record_each(sql: WorkflowSql, ids: list[int], move: _Move, actor: str, now: datetime) -> None:
    """One event of ``move`` (a job made ready, or brought back to wait) for each of ``ids``."""
    if ids:
        kind, before, after = move
        sql.run("event_insert_each", each_event_params(ids, now, kind, before, after, actor))
