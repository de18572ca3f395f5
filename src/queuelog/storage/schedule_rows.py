"""Schedules in both SQL backends: how a schedule is stored and read back, and the
transactions on schedules, written once. Both backends' connections run a named
query as ``conn.execute(sql, params)``; each hands in its own queries and its own
insert of jobs, and runs these inside one of its transactions."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

from queuelog.clock import from_micros, to_micros
from queuelog.errors import InvalidState, NotFound
from queuelog.models import Job, JobStatus, Priority
from queuelog.schedules import Cadence, ConfigSync, Schedule, ScheduleSpec
from queuelog.specs import stored_json
from queuelog.storage.protocol import FireOutcome, NewJob, NewSchedule, ScheduleFire, ScheduleSwitch
from queuelog.storage.rows import Row, job_from_row

Conn = Any  # a sqlite3.Connection or a psycopg Connection: both execute(sql, params)
Queries = Mapping[str, str]
InsertJobs = Callable[[Conn, Sequence[NewJob], datetime], list[tuple[Job, bool]]]

_ACTIVE = {JobStatus.PENDING.value, JobStatus.RUNNING.value}


def schedule_from_row(row: Row) -> Schedule:
    payload = row["payload"]
    spec = ScheduleSpec(
        name=row["name"],
        cadence=Cadence(row["cron"], row["every_seconds"], row["timezone"]),
        type=row["type"],
        payload=payload if isinstance(payload, dict) else json.loads(payload),
        priority=Priority(row["priority"]),
        overlap=bool(row["overlap"]),
    )
    last_run = row["last_run_at"]
    return Schedule(
        spec=spec,
        source=row["source"],
        paused=bool(row["paused"]),
        next_run_at=from_micros(row["next_run_at"]),
        last_run_at=from_micros(last_run) if last_run is not None else None,
        last_job_id=row["last_job_id"],
        jobs_made=row["jobs_made"],
        fires_skipped=row["fires_skipped"],
        created_at=from_micros(row["created_at"]),
        updated_at=from_micros(row["updated_at"]),
    )


def schedule_params(new: NewSchedule, now: datetime) -> dict[str, Any]:
    spec = new.spec
    return {
        "name": spec.name,
        "cron": spec.cadence.cron,
        "every_seconds": spec.cadence.every_seconds,
        "timezone": spec.cadence.timezone,
        "type": spec.type,
        "payload": stored_json(spec.payload),
        "priority": int(spec.priority),
        "overlap": spec.overlap,
        "source": new.source,
        "next_run_at": to_micros(new.next_run_at),
        "now": to_micros(now),
    }


def sync_config(
    conn: Conn, q: Queries, schedules: Sequence[NewSchedule], now: datetime
) -> ConfigSync:
    replaced, changed, removed = [], [], []
    for new in schedules:
        row = conn.execute(q["schedule_get"], {"name": new.spec.name}).fetchone()
        if row is not None and row["source"] != new.source:
            replaced.append(new.spec.name)
        elif row is not None and schedule_from_row(row).spec != new.spec:
            changed.append(new.spec.name)
        conn.execute(q["schedule_upsert_config"], schedule_params(new, now))
    kept = {new.spec.name for new in schedules}
    for row in conn.execute(q["schedule_config_names"], {}).fetchall():
        if row["name"] not in kept:
            conn.execute(q["schedule_delete_config"], {"name": row["name"]})
            removed.append(row["name"])
    return ConfigSync(tuple(replaced), tuple(changed), tuple(removed))


def insert(conn: Conn, q: Queries, new: NewSchedule, now: datetime) -> Schedule | None:
    row = conn.execute(q["schedule_insert"], schedule_params(new, now)).fetchone()
    return schedule_from_row(row) if row is not None else None


def delete(conn: Conn, q: Queries, name: str) -> None:
    if conn.execute(q["schedule_delete"], {"name": name}).fetchone() is not None:
        return
    # On PostgreSQL the delete may have waited for another request's delete of the row,
    # and this look may see a schedule of the name made since: a schedule of the API is
    # another one than the delete meant, which was gone (404), not one of the config.
    row = conn.execute(q["schedule_get"], {"name": name}).fetchone()
    if row is None or row["source"] != "config":
        raise NotFound("No such schedule")
    raise InvalidState("A schedule from the config file is deleted by removing it there")


def set_paused(conn: Conn, q: Queries, switch: ScheduleSwitch) -> Schedule | None:
    """Pause or resume; with ``seen``, only if the schedule's ``updated_at`` is still that
    (None if another change came first)."""
    next_run_at, seen = switch.next_run_at, switch.seen
    args = {
        "name": switch.name,
        "paused": switch.paused,
        "next_run_at": to_micros(next_run_at) if next_run_at is not None else None,
        "now": to_micros(switch.now),
        "seen": to_micros(seen) if seen is not None else None,
    }
    row = conn.execute(q["schedule_set_paused"], args).fetchone()
    if row is not None:
        return schedule_from_row(row)
    if seen is not None and conn.execute(q["schedule_get"], {"name": switch.name}).fetchone():
        return None
    raise NotFound("No such schedule")


def fire(
    conn: Conn, q: Queries, insert_jobs: InsertJobs, fire: ScheduleFire
) -> tuple[FireOutcome, Job | None]:
    """The guarded advance, then the job (or the skip), in the caller's transaction.

    The advance holds the schedule's row until the transaction ends; a node firing
    the same ``due`` at once waits for it, then finds ``next_run_at`` moved on.
    """
    args = {
        "name": fire.name,
        "due": to_micros(fire.due),
        "fire_at": to_micros(fire.fire_at),
        "next_run_at": to_micros(fire.next_run_at),
        "now": to_micros(fire.now),
    }
    row = conn.execute(q["schedule_advance"], args).fetchone()
    if row is None:
        return FireOutcome.TAKEN, None
    if fire.job is None or (not row["overlap"] and _last_job_active(conn, q, row)):
        conn.execute(q["schedule_count_skip"], {"name": fire.name})
        return FireOutcome.SKIPPED, None
    return FireOutcome.MADE, made_job(conn, q, insert_jobs, fire.name, fire.job, fire.now)


def trigger(
    conn: Conn, q: Queries, insert_jobs: InsertJobs, name: str, job: NewJob, now: datetime
) -> Job:
    # Held first: a trigger that made its job before holding the schedule could record
    # it as the last job after a newer one made at once.
    if conn.execute(q["schedule_hold"], {"name": name}).fetchone() is None:
        raise NotFound("No such schedule")
    return made_job(conn, q, insert_jobs, name, job, now)


def made_job(
    conn: Conn, q: Queries, insert_jobs: InsertJobs, name: str, job: NewJob, now: datetime
) -> Job:
    """Insert the schedule's job, mark it as the schedule's, and make it the last job."""
    ((inserted, _),) = insert_jobs(conn, [job], now)
    row = conn.execute(q["job_mark_schedule"], {"id": inserted.id, "schedule": name}).fetchone()
    conn.execute(q["schedule_count_made"], {"name": name, "job_id": inserted.id})
    return job_from_row(row)


def _last_job_active(conn: Conn, q: Queries, schedule: Row) -> bool:
    if schedule["last_job_id"] is None:
        return False
    row = conn.execute(q["job_get"], {"id": schedule["last_job_id"]}).fetchone()
    return row is not None and row["status"] in _ACTIVE
