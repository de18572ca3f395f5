"""The SQLite backend's operations: each runs inside the group writer's transaction."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from functools import partial
from typing import Any

from queuelog.clock import to_micros
from queuelog.errors import QueueError
from queuelog.models import EventKind, Job, JobStatus, TypeEventKind
from queuelog.storage import flow, workflows
from queuelog.storage import statements as st
from queuelog.storage.protocol import ClaimParams, FinishParams, NewJob
from queuelog.storage.rows import (
    Row,
    event_params,
    insert_statement,
    job_from_row,
    json_param,
    keyed_job,
    match_inserted,
)
from queuelog.storage.sqlfile import load_migrations, load_queries, refuse_newer
from queuelog.storage.unique import insert_each
from queuelog.storage.workflows import Released

PACKAGE = "queuelog.storage.sqlite"
Q = load_queries(PACKAGE)


def types_json(types: Sequence[str]) -> str:
    """A list of job types as ``json_each`` reads it."""
    return json.dumps(list(types))


def apply_migrations(conn: sqlite3.Connection) -> None:
    conn.execute(Q["migrations_table"])
    done = {r[0] for r in conn.execute(Q["migrations_done"])}
    migrations = load_migrations(PACKAGE)
    refuse_newer(done, migrations)
    for version, sql in migrations:
        if version in done:
            continue
        for statement in _statements(sql):
            conn.execute(statement)
        conn.execute(Q["migration_record"], {"version": version})
        _read_schema_again(conn)


def _read_schema_again(conn: sqlite3.Connection) -> None:
    """Have ``conn`` read the schema again before its next statement, by a new schema
    version: a migration that edits a table's definition in place (0009) is then seen by
    the migrations after it, whose ALTER TABLE works from the definition as stored."""
    version = int(conn.execute("PRAGMA schema_version").fetchone()[0])
    conn.execute(f"PRAGMA schema_version = {version + 1}")


def _statements(sql: str) -> list[str]:
    """Split a migration into statements: a statement ends at the first line where
    SQLite's parser finds it complete (a trigger's body holds ';' of its own)."""
    statements: list[str] = []
    pending = ""
    for line in sql.splitlines():
        if not pending and (not line.strip() or line.strip().startswith("--")):
            continue
        pending += line + "\n"
        if sqlite3.complete_statement(pending):
            statements.append(pending.strip())
            pending = ""
    if pending.strip():
        raise ValueError(f"incomplete statement in a migration: {pending.strip()[:60]!r}")
    return statements


def record(conn: sqlite3.Connection, events: Sequence[dict[str, Any]]) -> None:
    """Insert events in one statement: one step, where executemany takes one per row."""
    if len(events) == 1:
        conn.execute(Q["event_insert"], events[0])
    elif events:
        conn.execute(Q["event_insert_many"], {"events": json_param(list(events))})


def get(conn: sqlite3.Connection, job_id: int) -> Job | None:
    row = conn.execute(Q["job_get"], {"id": job_id}).fetchone()
    return job_from_row(row) if row else None


def insert_many(
    conn: sqlite3.Connection, jobs: Sequence[NewJob], now: datetime
) -> list[tuple[Job, bool]]:
    if any(new.unique_key is not None for new in jobs):
        # Job by job: a unique key's holder decides, and may be an earlier job of the batch.
        settle = workflows.settler(_Sql(conn), jobs, now)
        each = insert_each(lambda name, args: conn.execute(Q[name], args), jobs, now, settle)
        return [(job, created) for job, created, _ in each]
    made = _insert(conn, jobs, now)
    if any(new.waits for new in jobs):
        return workflows.settle_new(_Sql(conn), jobs, made, now)
    return made


def _insert(
    conn: sqlite3.Connection, jobs: Sequence[NewJob], now: datetime
) -> list[tuple[Job, bool]]:
    query, args = insert_statement(jobs, now)
    rows = conn.execute(Q[query], args).fetchall()
    # Each inserted job's 'enqueued' event was written by the insert (the
    # jobs_enqueued trigger, migrations 0004 and 0009).
    return match_inserted(jobs, now, rows, partial(_existing, conn))


def _existing(conn: sqlite3.Connection, new: NewJob) -> tuple[Job, bool]:
    """The job holding ``new``'s idempotency key, not created by this insert."""
    # The writer's transaction holds the write lock: the job holding the key is there.
    args = {"principal": new.principal, "idempotency_key": new.idempotency_key}
    return keyed_job(conn.execute(Q["job_by_idempotency_key"], args).fetchone()), False


def rescue(
    conn: sqlite3.Connection, now: datetime, retry_at: Callable[[Job], datetime], limit: int
) -> tuple[list[Job], Released]:
    """Fail (or retry) the leases past their deadline; the jobs rescued, and the
    dependents of those that failed for good."""
    expired = [
        job_from_row(r)
        for r in conn.execute(Q["job_expired_leases"], {"now": to_micros(now), "limit": limit})
    ]
    rescued = []
    for job in expired:
        params = st.expired_finish(job, now, retry_at)
        outcome = finish(conn, params, kind=EventKind.LEASE_EXPIRED, actor="queuelog")
        if not isinstance(outcome, QueueError):
            rescued.append(job_from_row(outcome))
    return rescued, workflows.release(_Sql(conn), rescued, now)


class _Sql:
    """Named queries on the write connection, whose lock serialises every writer (the flow
    claim's, a workflow's)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def rows(self, name: str, args: dict[str, Any]) -> list[Row]:
        return self._conn.execute(Q[name], args).fetchall()

    def run(self, name: str, args: dict[str, Any]) -> None:
        self._conn.execute(Q[name], args)

    def ids(self, ids: list[int]) -> str:
        return json.dumps(ids)

    def types(self, types: Sequence[str]) -> str:
        return types_json(types)

    def lock(self, types: Sequence[str]) -> None:
        """Nothing to take: the group's transaction holds the database's write lock."""

    def hold_dependencies(self, ids: str) -> None:
        """Nothing to take: no other writer can change a dependency meanwhile."""

    def hold_dependents(self, ids: str) -> None:
        """Nothing to take, as for ``hold_dependencies``."""


def claim(conn: sqlite3.Connection, params: ClaimParams) -> tuple[list[Job], list[Job], Released]:
    """Claim up to ``params.limit`` ready jobs, in claim order, within the types' limits;
    and the jobs whose expired leases the claim rescued first, with what that released."""
    rescued: list[Job] = []
    released = Released()
    if params.retry_at is not None:
        rescued, released = rescue(conn, params.now, params.retry_at, limit=500)
    return flow.take(_Sql(conn), params), rescued, released


def finish(
    conn: sqlite3.Connection,
    item: FinishParams,
    kind: EventKind | None = None,
    actor: str | None = None,
) -> Row | QueueError:
    """Complete or fail ``item`` if its lease holds; the job's row, or why not."""
    query, args = st.finish_statement(item, expired=kind is EventKind.LEASE_EXPIRED)
    row: sqlite3.Row | None = conn.execute(Q[query], args).fetchone()
    if row is None:
        return st.guard_failure(get(conn, item.job_id))
    conn.execute(Q["event_insert"], st.finish_event(row, item, kind, actor))
    return row


def finish_many(
    conn: sqlite3.Connection, items: Sequence[FinishParams]
) -> tuple[list[Row | QueueError], Released]:
    """Finish every item under its own guard: a batch of completions in one statement;
    then release the dependents of the jobs that ended.

    Each finished item is answered by its job's row: the store makes a Job of it only
    when the answer carries the job.
    """
    if not items:
        return [], Released()
    params = st.complete_batch_params(items)
    if params is None:
        outcomes = [finish(conn, item) for item in items]
    else:
        rows = conn.execute(Q["job_complete_batch"], params).fetchall()
        if rows:
            conn.execute(Q["event_insert_each"], _completed_events(rows, items))
        outcomes = st.match_completed(
            items, rows, lambda item: st.guard_failure(get(conn, item.job_id))
        )
    ended = [o for o in outcomes if not isinstance(o, QueueError)]
    return outcomes, workflows.release(_Sql(conn), ended, items[0].now)


def cancel(
    conn: sqlite3.Connection, job_id: int, actor: str, now: datetime
) -> tuple[Job, Released]:
    job = workflows.transition(_Sql(conn), "job_cancel", job_id, actor, now, EventKind.CANCELLED)
    return job, workflows.release(_Sql(conn), [job], now)


def requeue(conn: sqlite3.Connection, job_id: int, actor: str, now: datetime) -> Job:
    return workflows.requeue(_Sql(conn), job_id, actor, now)


def requeue_failed(
    conn: sqlite3.Connection, args: dict[str, Any], actor: str, now: datetime
) -> list[int]:
    jobs = [job_from_row(r) for r in conn.execute(Q["job_requeue_failed"], args)]
    events = [event_params(job, now, EventKind.REQUEUED, JobStatus.FAILED, actor) for job in jobs]
    record(conn, events)
    workflows.redrive(_Sql(conn), jobs, actor, now)
    return sorted(job.id for job in jobs)


def held(conn: sqlite3.Connection, query: str, args: Mapping[str, Any]) -> Job:
    """Run a guarded statement on a held job (heartbeat, release); the job, or why not."""
    row = conn.execute(Q[query], args).fetchone()
    if row is None:
        raise st.guard_failure(get(conn, args["id"]))
    return job_from_row(row)


def release(conn: sqlite3.Connection, args: Mapping[str, Any], now: datetime) -> Job:
    job = held(conn, "job_release", args)
    actor = args["worker_name"]
    record(conn, [event_params(job, now, EventKind.RELEASED, JobStatus.RUNNING, actor)])
    return job


def prune(conn: sqlite3.Connection, cutoffs: Mapping[JobStatus, datetime], limit: int) -> int:
    """Delete up to ``limit`` jobs of each status finished before its cutoff, with their
    events; how many."""
    ids: list[dict[str, int]] = []
    for status, cutoff in cutoffs.items():
        args = {"status": status.value, "cutoff": to_micros(cutoff), "limit": limit}
        ids += [{"id": r["id"]} for r in conn.execute(Q["job_prunable"], args)]
    conn.executemany(Q["job_events_delete"], ids)
    conn.executemany(Q["job_dependencies_delete"], ids)
    # The jobs_pruned trigger deletes the idempotency keys naming them (0016).
    conn.executemany(Q["job_delete"], ids)
    return len(ids)


def set_paused(
    conn: sqlite3.Connection, job_type: str, paused: bool, actor: str, now: datetime
) -> None:
    """Pause or resume a type; a change records its ``type_events`` row, naming ``actor``."""
    args = {"type": job_type, "actor": actor, "now": to_micros(now)}
    changed = conn.execute(Q["type_pause" if paused else "type_resume"], args).fetchone()
    if changed is not None:
        kind = TypeEventKind.PAUSED if paused else TypeEventKind.RESUMED
        conn.execute(Q["type_event_insert"], {**args, "event": kind.value})


def _completed_events(rows: Sequence[Row], items: Sequence[FinishParams]) -> dict[str, Any]:
    """The ``completed`` events of a batch completion's jobs (``job_complete_batch``'s
    rows), by the one worker whose batch it is."""
    ids = [int(row["id"]) for row in rows]
    first = items[0]
    return st.each_event_params(
        ids,
        first.now,
        EventKind.COMPLETED,
        JobStatus.RUNNING,
        JobStatus.COMPLETED,
        first.worker_name,
    )
