"""The PostgreSQL store's operations, each run inside one transaction.

Every transition is guarded in SQL and decided by the row it returns; its
``job_events`` row is written in the same transaction. A transition that makes a
job pending also NOTIFYs, which PostgreSQL delivers to the listening nodes only
if the transaction commits.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from functools import partial
from typing import Any

import psycopg
from psycopg.rows import DictRow

from queuelog.clock import to_micros
from queuelog.errors import QueueError
from queuelog.models import TERMINAL, EventKind, Finished, Job, JobStatus, TypeEventKind
from queuelog.storage import flow, workflows
from queuelog.storage import statements as st
from queuelog.storage.protocol import ClaimParams, FinishParams, NewJob
from queuelog.storage.rows import (
    event_params,
    finished,
    id_status,
    insert_statement,
    job_from_row,
    json_param,
    match_inserted,
)
from queuelog.storage.sqlfile import load_migrations, load_queries, refuse_newer
from queuelog.storage.unique import insert_each, insert_one
from queuelog.storage.workflows import Released

PACKAGE = "queuelog.storage.postgres"
Q = load_queries(PACKAGE)
Conn = psycopg.Connection[DictRow]
# Enqueues with unique keys lock their keys' buckets: keys that share one take turns.
_KEY_BUCKETS = 64


def one(conn: Conn, name: str, args: Mapping[str, Any]) -> DictRow:
    row = conn.execute(Q[name], args).fetchone()
    assert row is not None, name
    return row


def _record(conn: Conn, events: Sequence[dict[str, Any]]) -> None:
    """Insert events in one statement (executemany costs a round trip per row)."""
    if len(events) == 1:
        conn.execute(Q["event_insert"], events[0])
    elif events:
        conn.execute(Q["event_insert_many"], {"events": json_param(list(events))})


def _notify_ready(conn: Conn) -> None:
    """NOTIFY every node's claimers (an insert of jobs notifies by itself: migration
    0011)."""
    conn.execute(Q["job_ready_notify"])


# Ids per finish notification: a notification's payload holds under 8,000 bytes.
_IDS_PER_NOTIFY = 200


def _notify_finished(conn: Conn, jobs: Sequence[Job | DictRow]) -> None:
    """NOTIFY the ids of the ``jobs`` that finished (completed, failed, cancelled)."""
    _notify_ids(conn, [job_id for job_id, status in map(id_status, jobs) if status in TERMINAL])


def _notify_ids(conn: Conn, ids: Sequence[int]) -> None:
    for start in range(0, len(ids), _IDS_PER_NOTIFY):
        chunk = ",".join(str(i) for i in ids[start : start + _IDS_PER_NOTIFY])
        conn.execute(Q["job_finished_notify"], {"ids": chunk})


def _get(conn: Conn, job_id: int) -> Job | None:
    row = conn.execute(Q["job_get"], {"id": job_id}).fetchone()
    return job_from_row(row) if row else None


def apply_migrations(conn: Conn) -> None:
    """Apply what is missing, under an advisory lock held to the end of the transaction."""
    conn.execute(Q["migrate_lock"])
    conn.execute(Q["migrations_table"])
    done = {r["version"] for r in conn.execute(Q["migrations_done"])}
    migrations = load_migrations(PACKAGE)
    refuse_newer(done, migrations)
    for version, sql in migrations:
        if version not in done:
            conn.execute(sql)  # no parameters: sent as is, several statements
            conn.execute(Q["migration_record"], {"version": version})


def insert_many(conn: Conn, jobs: Sequence[NewJob], now: datetime) -> list[tuple[Job, bool]]:
    if any(new.unique_key is not None for new in jobs):
        return _insert_each(conn, jobs, now)
    made = _insert(conn, jobs, now)
    if any(new.waits for new in jobs):
        return workflows.settle_new(_Sql(conn), jobs, made, now)
    return made


def one_statement(jobs: Sequence[NewJob]) -> bool:
    """Whether inserting ``jobs`` is one statement, the database's own transaction: one
    job with no unique key and no dependencies (a repeat of an idempotency key then
    inserts nothing, and the reads that find its first job change nothing)."""
    return len(jobs) == 1 and jobs[0].unique_key is None and not jobs[0].waits


def _insert_each(conn: Conn, jobs: Sequence[NewJob], now: datetime) -> list[tuple[Job, bool]]:
    """Job by job: a unique key's holder decides, and may be an earlier job of the batch."""
    _lock_keys(conn, jobs)
    settle = workflows.settler(_Sql(conn), jobs, now)
    each = insert_each(partial(_execute, conn), jobs, now, settle)
    if any(replaced for _, _, replaced in each):
        _notify_ready(conn)  # a replaced job may be due sooner
    return [(job, created) for job, created, _ in each]


def _execute(conn: Conn, name: str, args: Mapping[str, Any]) -> Any:
    return conn.execute(Q[name], args)


def _insert(conn: Conn, jobs: Sequence[NewJob], now: datetime) -> list[tuple[Job, bool]]:
    # Each inserted job's 'enqueued' event, and the NOTIFY of the nodes' claimers, are
    # the insert's (the jobs_enqueued trigger, migrations 0004, 0009 and 0011).
    execute = partial(_execute, conn)
    query, args = insert_statement(jobs, now)
    rows = conn.execute(Q[query], args).fetchall()
    # A job whose idempotency key another insert took (on any node): ON CONFLICT waited
    # for that insert to commit, so insert_one finds the winner (or inserts, if it is
    # gone since).
    return match_inserted(
        jobs, now, rows, lambda new: insert_one(execute, new, now, jobs.index(new))[:2]
    )


def _lock_keys(conn: Conn, jobs: Sequence[NewJob]) -> None:
    """Lock the batch's unique and idempotency keys to the end of the transaction, all
    before the first insert and in one order (their buckets', rising): two enqueues of
    the same keys, on any node, then take them one after the other instead of each
    holding one that the other waits for (a deadlock), whatever order their batches list
    the keys in. (A batch without unique keys needs none of this: its one statement
    inserts in its keys' order.) A key's lock is its bucket's, one of
    ``_KEY_BUCKETS``: a batch of 500 keys holds that many locks at most, not 500, in
    the database's shared lock table."""
    unique = [(j.principal, j.type, j.unique_key) for j in jobs if j.unique_key is not None]
    keyed = [(j.principal, j.idempotency_key) for j in jobs if j.idempotency_key is not None]
    if len(jobs) == 1:
        keyed = []  # one job's one key cannot be held against another batch's order
    buckets = sorted({_bucket(key) for key in [*unique, *keyed]})
    conn.execute(Q["keys_lock"], {"buckets": buckets})


def _bucket(key: tuple[str, ...]) -> int:
    """The lock bucket of a key: a unique key with its principal and type (as nodes of
    earlier versions reckon it, so a rolling upgrade keeps the turns), an idempotency
    key with its principal. Two keys may share a bucket: they take turns."""
    named = "\0".join(key).encode()
    return int.from_bytes(hashlib.blake2b(named, digest_size=8).digest()) % _KEY_BUCKETS


class _Sql:
    """Named queries in the transaction (the flow claim's, with a lock per limited type; a
    workflow's)."""

    def __init__(self, conn: Conn) -> None:
        self._conn = conn

    def rows(self, name: str, args: dict[str, Any]) -> list[DictRow]:
        return self._conn.execute(Q[name], args).fetchall()

    def run(self, name: str, args: dict[str, Any]) -> None:
        self._conn.execute(Q[name], args)

    def ids(self, ids: list[int]) -> list[int]:
        return ids

    def types(self, types: Sequence[str]) -> list[str]:
        return list(types)

    def lock(self, types: Sequence[str]) -> None:
        # Always in the same (sorted) order, so two claims never wait on each other.
        for name in sorted(types):
            self._conn.execute(Q["flow_lock"], {"type": name})

    def hold_dependencies(self, ids: list[int]) -> None:
        self._conn.execute(Q["job_redrive_hold"], {"ids": ids})

    def hold_dependents(self, ids: list[int]) -> None:
        self._conn.execute(Q["job_dependents_hold"], {"ids": ids})


def claim(conn: Conn, params: ClaimParams) -> list[Job]:
    if params.retry_at is not None:
        rescue(conn, params.now, params.retry_at, limit=500)
    return flow.take(_Sql(conn), params)


def rescue(conn: Conn, now: datetime, retry_at: Callable[[Job], datetime], limit: int) -> list[Job]:
    """Fail expired leases; rows another node is rescuing right now are skipped."""
    args = {"now": to_micros(now), "limit": limit}
    expired = [job_from_row(r) for r in conn.execute(Q["job_expired_leases"], args)]
    rescued: list[Job] = []
    events: list[dict[str, Any]] = []
    for job in expired:
        params = st.expired_finish(job, now, retry_at)
        outcome = _finish(conn, params, events, EventKind.LEASE_EXPIRED, "queuelog")
        if isinstance(outcome, Job):
            rescued.append(outcome)
    _recorded(conn, events, rescued)
    if rescued:
        # A job failed for good frees a slot of its type's limits: claims waiting for
        # it, on every node, look again (one put back to pending notified already).
        _notify_ready(conn)
    _notify_finished(conn, rescued)
    _released(conn, rescued, now)
    return rescued


def held(conn: Conn, query: str, args: Mapping[str, Any]) -> Job:
    """Run a guarded statement on a held job (heartbeat, release); the job, or why not."""
    row = conn.execute(Q[query], args).fetchone()
    if row is None:
        raise st.guard_failure(_get(conn, args["id"]))
    return job_from_row(row)


def release(conn: Conn, args: Mapping[str, Any], now: datetime) -> Job:
    job = held(conn, "job_release", args)
    event = event_params(job, now, EventKind.RELEASED, JobStatus.RUNNING, args["worker_name"])
    _recorded(conn, [event], [job])
    return job


def finish_many(
    conn: Conn, items: Sequence[FinishParams], with_jobs: bool
) -> list[Job | Finished | QueueError]:
    """Finish every item under its own guard: a batch of completions in one statement;
    then release the dependents of the jobs that ended. Each finished item is answered
    by its job, or without ``with_jobs`` by its id and new status alone."""
    if not items:
        return []
    params = st.complete_batch_params(items)
    if params is None:
        outcomes: Sequence[Job | DictRow | QueueError] = _finish_each(conn, items)
    else:
        outcomes = _complete_batch(conn, items, params, with_jobs)
    made = _job_of if with_jobs else finished
    return [o if isinstance(o, QueueError) else made(o) for o in outcomes]


def _finish_each(conn: Conn, items: Sequence[FinishParams]) -> list[Job | QueueError]:
    events: list[dict[str, Any]] = []
    outcomes = [_finish(conn, item, events) for item in items]
    finished = [o for o in outcomes if isinstance(o, Job)]
    _recorded(conn, events, finished)
    _notify_finished(conn, [j for j in finished if not _self_recorded(j)])
    _slots_freed(conn, items, [j.type for j in finished if j.status != JobStatus.PENDING])
    _released(conn, finished, items[0].now)
    return outcomes


def _complete_batch(
    conn: Conn, items: Sequence[FinishParams], params: dict[str, Any], with_jobs: bool
) -> list[DictRow | QueueError]:
    """Complete, record the events and notify the ids in one statement. Each item's
    answer: its job's row (the whole row ``with_jobs``, else the statement's few
    columns), or why its guard held the job back."""
    rows = conn.execute(Q["job_complete_batch"], params).fetchall()
    _slots_freed(conn, items, [row["type"] for row in rows])
    _released(conn, rows, items[0].now)
    if rows and with_jobs:
        rows = conn.execute(Q["job_get_many"], {"ids": [row["id"] for row in rows]}).fetchall()
    return st.match_completed(items, rows, lambda item: st.guard_failure(_get(conn, item.job_id)))


def _job_of(outcome: Job | DictRow) -> Job:
    return outcome if isinstance(outcome, Job) else job_from_row(outcome)


def _released(conn: Conn, ended: Sequence[Job | DictRow], now: datetime) -> Released:
    """Release the dependents of the ``ended`` jobs; NOTIFY the jobs made ready (every
    node's claimers look again) and those cancelled (their awaiting reads answer)."""
    released = workflows.release(_Sql(conn), ended, now)
    if released.ready:
        _notify_ready(conn)
    if released.cancelled:
        _notify_ids(conn, released.cancelled)
    return released


def _slots_freed(conn: Conn, items: Sequence[FinishParams], ended_types: list[str]) -> None:
    """NOTIFY when a job of a concurrency-limited type ended (``ended_types``: those of
    the jobs that ended, not those made pending, which notified already): claims waiting
    for its slot on other nodes look again."""
    slot_types = items[0].slot_types if items else frozenset()
    if not slot_types.isdisjoint(ended_types):
        _notify_ready(conn)


def _recorded(conn: Conn, events: Sequence[dict[str, Any]], jobs: Sequence[Job]) -> None:
    """Write the transitions' events; NOTIFY if one made a job pending."""
    _record(conn, events)
    if any(job.status == JobStatus.PENDING for job in jobs):
        _notify_ready(conn)


def _finish(
    conn: Conn,
    item: FinishParams,
    events: list[dict[str, Any]],
    kind: EventKind | None = None,
    actor: str | None = None,
) -> Job | QueueError:
    """Complete or fail one held job under its guard; a failure's event goes to
    ``events``."""
    query, args = st.finish_statement(item, expired=kind is EventKind.LEASE_EXPIRED)
    row = conn.execute(Q[query], args).fetchone()
    if row is None:
        return st.guard_failure(_get(conn, item.job_id))
    job = job_from_row(row)
    if not _self_recorded(job):
        events.append(st.finish_event(job, item, kind, actor))
    return job


def _self_recorded(job: Job) -> bool:
    """Whether the statement that finished ``job`` recorded its event and NOTIFYed its
    id itself: a completion's does (job_complete, job_complete_batch); a failure's,
    whose event depends on where the job went, leaves both to the transaction."""
    return job.status == JobStatus.COMPLETED


def cancel(conn: Conn, job_id: int, actor: str, now: datetime) -> Job:
    job = workflows.transition(_Sql(conn), "job_cancel", job_id, actor, now, EventKind.CANCELLED)
    _notify_finished(conn, [job])
    _released(conn, [job], now)
    return job


def requeue(conn: Conn, job_id: int, actor: str, now: datetime) -> Job:
    job = workflows.requeue(_Sql(conn), job_id, actor, now)
    _notify_ready(conn)
    return job


def requeue_failed(conn: Conn, args: dict[str, Any], actor: str, now: datetime) -> list[int]:
    jobs = [job_from_row(r) for r in conn.execute(Q["job_requeue_failed"], args)]
    events = [event_params(job, now, EventKind.REQUEUED, JobStatus.FAILED, actor) for job in jobs]
    _record(conn, events)
    # Pending now, or waiting (a job with dependencies) until job_recount finds none left.
    _recorded(conn, [], workflows.redrive(_Sql(conn), jobs, actor, now))
    return sorted(job.id for job in jobs)


def prune(conn: Conn, cutoffs: Mapping[JobStatus, datetime], limit: int) -> int:
    """Delete old finished jobs and their events; pruners on other nodes take other rows."""
    ids: list[int] = []
    for status, cutoff in cutoffs.items():
        args = {"status": status.value, "cutoff": to_micros(cutoff), "limit": limit}
        ids += [r["id"] for r in conn.execute(Q["job_prunable"], args)]
    if ids:
        ids = [r["id"] for r in conn.execute(Q["job_prunable_held"], {"ids": ids})]
    if ids:
        conn.execute(Q["job_events_delete"], {"ids": ids})
        conn.execute(Q["job_dependencies_delete"], {"ids": ids})
        # The jobs_pruned trigger deletes the idempotency keys naming them (0016).
        conn.execute(Q["job_delete"], {"ids": ids})
    return len(ids)


def set_paused(conn: Conn, job_type: str, paused: bool, actor: str, now: datetime) -> None:
    """Pause or resume a type; a change records its ``type_events`` row, naming ``actor``."""
    args = {"type": job_type, "actor": actor, "now": to_micros(now)}
    if paused:
        # After the claims of a limited type that hold its lock or wait for it.
        conn.execute(Q["flow_lock"], {"type": job_type})
    changed = conn.execute(Q["type_pause" if paused else "type_resume"], args).fetchone()
    if changed is not None:
        kind = TypeEventKind.PAUSED if paused else TypeEventKind.RESUMED
        conn.execute(Q["type_event_insert"], {**args, "event": kind.value})
        if not paused:
            _notify_ready(conn)  # the type's jobs are claimable again, on every node


def refresh_statistics(conn: Conn) -> bool:
    """ANALYZE the jobs when enough of them changed since their statistics were taken
    that the planner may misjudge the queue (a burst into a table it saw drained walks
    the burst at every claim): a fifth of them, checked every sweep, where autovacuum
    waits for a tenth but looks once a minute, if it runs at all."""
    if not one(conn, "jobs_statistics_stale", {})["stale"]:
        return False
    conn.execute(Q["jobs_analyze"])
    return True
