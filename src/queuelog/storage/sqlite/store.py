"""SQLite backend: WAL, one group-commit writer, a read connection per thread."""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from queuelog.clock import from_micros, to_micros
from queuelog.errors import IdempotencyKeyReused, InvalidState, NotFound, QueueError
from queuelog.models import ApiKey, EventKind, Job, JobEvent, JobStatus, QueueStats
from queuelog.storage.base import (
    ClaimParams,
    EventCount,
    FinishParams,
    JobListParams,
    NewJob,
    NewKey,
    event_from_row,
    guard_failure,
    job_from_row,
    key_from_row,
    key_params,
)
from queuelog.storage.sqlfile import load_migrations, load_queries
from queuelog.storage.sqlite.writer import GroupWriter

_PACKAGE = "queuelog.storage.sqlite"
Q = load_queries(_PACKAGE)


def _dumps(value: Any) -> str | None:
    return None if value is None else json.dumps(value, separators=(",", ":"), allow_nan=False)


def _types_json(types: Sequence[str] | None) -> str | None:
    """A type filter for ``json_each``; None matches every type."""
    return None if types is None else json.dumps(list(types))


def _event(
    job: Job,
    at: datetime,
    kind: EventKind,
    before: JobStatus | None,
    actor: str,
    detail: Any = None,
) -> dict[str, Any]:
    return {
        "job_id": job.id,
        "at": to_micros(at),
        "event": kind.value,
        "from_status": before.value if before else None,
        "to_status": job.status.value,
        "actor": actor,
        "detail": detail,
    }


class SqliteStorage:
    def __init__(self, path: str | Path, durability: str = "full") -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._synchronous = "FULL" if durability == "full" else "NORMAL"
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self._readers_lock = threading.Lock()
        self._writer = GroupWriter(self._connect)
        self.migrate()

    # -- connections -------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path, isolation_level=None, check_same_thread=False, timeout=30.0
        )
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(f"PRAGMA synchronous = {self._synchronous}")
        conn.execute("PRAGMA busy_timeout = 30000")
        return conn

    def _reader(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._connect()
            self._local.conn = conn
            with self._readers_lock:
                self._readers.append(conn)
        return conn

    def _read(self, name: str, params: Mapping[str, Any]) -> list[sqlite3.Row]:
        return self._reader().execute(Q[name], params).fetchall()

    def migrate(self) -> None:
        self._writer.run(_apply_migrations)

    def close(self) -> None:
        self._writer.close()
        with self._readers_lock:
            for conn in self._readers:
                conn.close()
            self._readers.clear()

    def ping(self) -> bool:
        if not self._writer.alive:
            return False
        try:
            self._reader().execute("SELECT 1").fetchone()
        except sqlite3.Error:
            return False
        return True

    def integrity_check(self) -> str:
        row = self._reader().execute("PRAGMA integrity_check").fetchone()
        return str(row[0])

    # -- jobs --------------------------------------------------------------

    def job_insert_many(self, jobs: Sequence[NewJob], now: datetime) -> list[tuple[Job, bool]]:
        return self._writer.run(lambda conn: _insert_many(conn, jobs, now))

    def job_get(self, job_id: int) -> Job | None:
        rows = self._read("job_get", {"id": job_id})
        return job_from_row(rows[0]) if rows else None

    def job_list(self, params: JobListParams) -> list[Job]:
        args = {
            "before_id": params.before_id,
            "status": params.status.value if params.status else None,
            "type": params.type,
            "principal": params.principal,
            "holder": params.holder,
            "idempotency_key": params.idempotency_key,
            "limit": params.limit,
        }
        if params.principal is None and params.holder is None:
            return [job_from_row(r) for r in self._read("job_list", args)]
        # A key with both roles sees the union: each part newest first, merged.
        found: dict[int, Job] = {}
        for query, who in (
            ("job_list_by_principal", "principal"),
            ("job_list_by_holder", "holder"),
        ):
            if args[who] is not None:
                found.update((j.id, j) for j in map(job_from_row, self._read(query, args)))
        return sorted(found.values(), key=lambda j: j.id, reverse=True)[: params.limit]

    def job_events(self, job_id: int) -> list[JobEvent]:
        return [event_from_row(r) for r in self._read("job_events", {"job_id": job_id})]

    def job_claim(self, params: ClaimParams) -> list[Job]:
        return self._writer.run(lambda conn: _claim(conn, params))

    def job_next_due(self, now: datetime, types: Sequence[str] | None = None) -> datetime | None:
        args = {"now": to_micros(now), "types": _types_json(types)}
        value = self._read("job_next_due", args)[0]["next_due"]
        return from_micros(value) if value is not None else None

    def job_heartbeat(
        self,
        job_id: int,
        lease_token: str,
        worker_name: str,
        lease_seconds: int | None,
        now: datetime,
    ) -> Job:
        args = {
            "id": job_id,
            "lease_token": lease_token,
            "worker_name": worker_name,
            "lease_seconds": lease_seconds,
            "now": to_micros(now),
        }

        def heartbeat(conn: sqlite3.Connection) -> Job:
            row = conn.execute(Q["job_heartbeat"], args).fetchone()
            if row is None:
                raise guard_failure(_get(conn, job_id), worker_name, lease_token)
            return job_from_row(row)

        return self._writer.run(heartbeat)

    def job_finish_many(self, items: Sequence[FinishParams]) -> list[Job | QueueError]:
        return self._writer.run(lambda conn: [_finish(conn, item) for item in items])

    def job_rescue_expired(
        self, now: datetime, retry_at: Callable[[Job], datetime], limit: int = 500
    ) -> list[Job]:
        return self._writer.run(lambda conn: _rescue(conn, now, retry_at, limit))

    def job_cancel(self, job_id: int, actor: str, now: datetime) -> Job:
        return self._writer.run(
            lambda conn: _transition(conn, "job_cancel", job_id, actor, now, EventKind.CANCELLED)
        )

    def job_requeue(self, job_id: int, actor: str, now: datetime) -> Job:
        return self._writer.run(
            lambda conn: _transition(conn, "job_requeue", job_id, actor, now, EventKind.REQUEUED)
        )

    def job_prune(self, cutoffs: Mapping[JobStatus, datetime], limit: int = 1000) -> int:
        def prune(conn: sqlite3.Connection) -> int:
            ids: list[dict[str, int]] = []
            for status, cutoff in cutoffs.items():
                args = {"status": status.value, "cutoff": to_micros(cutoff), "limit": limit}
                ids += [{"id": r["id"]} for r in conn.execute(Q["job_prunable"], args)]
            conn.executemany(Q["job_events_delete"], ids)
            conn.executemany(Q["job_delete"], ids)
            return len(ids)

        return self._writer.run(prune)

    def job_stats(self, now: datetime) -> QueueStats:
        counts = {(r["status"], r["type"]): r["n"] for r in self._read("job_counts", {})}
        args = {"now": to_micros(now)}
        oldest = self._read("job_oldest_ready", args)[0]["oldest"]
        return QueueStats(
            counts=counts,
            oldest_ready_at=from_micros(oldest) if oldest is not None else None,
            ready=self._read("job_ready_count", args)[0]["ready"],
        )

    def job_event_counts(
        self, since: datetime, until: datetime, bucket_seconds: int
    ) -> list[EventCount]:
        start = to_micros(since)
        bucket = bucket_seconds * 1_000_000
        args = {"since": start, "until": to_micros(until), "bucket": bucket}
        return [
            EventCount(from_micros(start + r["bucket"] * bucket), EventKind(r["event"]), r["n"])
            for r in self._read("job_event_counts", args)
        ]

    def job_requeue_failed(self, job_type: str, actor: str, now: datetime) -> int:
        return self._writer.run(lambda conn: _requeue_failed(conn, job_type, actor, now))

    # -- keys --------------------------------------------------------------

    def key_insert(self, key: NewKey, now: datetime) -> ApiKey:
        args = key_params(key, now)
        return self._writer.run(
            lambda conn: key_from_row(conn.execute(Q["key_insert"], args).fetchone())
        )

    def key_by_hash(self, key_hash: str) -> ApiKey | None:
        rows = self._read("key_by_hash", {"key_hash": key_hash})
        return key_from_row(rows[0]) if rows else None

    def key_list(self) -> list[ApiKey]:
        return [key_from_row(r) for r in self._read("key_list", {})]

    def key_revoke(self, key_id: int, now: datetime) -> bool:
        args = {"id": key_id, "now": to_micros(now)}
        return self._writer.run(lambda conn: conn.execute(Q["key_revoke"], args).rowcount == 1)

    def key_has_active_admin(self) -> bool:
        return bool(self._read("key_active_admin", {}))

    def key_insert_first_admin(self, key: NewKey, now: datetime) -> ApiKey | None:
        args = key_params(key, now)

        def insert_first(conn: sqlite3.Connection) -> ApiKey | None:
            # The writer's BEGIN IMMEDIATE serialises this check with every other writer.
            if conn.execute(Q["key_active_admin"]).fetchone() is not None:
                return None
            return key_from_row(conn.execute(Q["key_insert"], args).fetchone())

        return self._writer.run(insert_first)


# -- operations run by the writer, inside its transaction ---------------------


def _apply_migrations(conn: sqlite3.Connection) -> None:
    conn.execute("CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY)")
    done = {r[0] for r in conn.execute("SELECT version FROM schema_migrations")}
    for version, sql in load_migrations(_PACKAGE):
        if version in done:
            continue
        for statement in _statements(sql):
            conn.execute(statement)
        conn.execute("INSERT INTO schema_migrations (version) VALUES (?)", (version,))


def _statements(sql: str) -> list[str]:
    """Split a migration into statements (migrations hold no ';' inside literals)."""
    lines = [line for line in sql.splitlines() if not line.strip().startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


def _get(conn: sqlite3.Connection, job_id: int) -> Job | None:
    row = conn.execute(Q["job_get"], {"id": job_id}).fetchone()
    return job_from_row(row) if row else None


def _insert_many(
    conn: sqlite3.Connection, jobs: Sequence[NewJob], now: datetime
) -> list[tuple[Job, bool]]:
    out: list[tuple[Job, bool]] = []
    events = []
    for index, new in enumerate(jobs):
        args = {
            "type": new.type,
            "payload": _dumps(new.payload),
            "priority": int(new.priority),
            "max_retries": new.max_retries,
            "lease_seconds": new.lease_seconds,
            "principal": new.principal,
            "idempotency_key": new.idempotency_key,
            "fingerprint": new.fingerprint,
            "run_at": to_micros(new.run_at),
            "now": to_micros(now),
        }
        row = conn.execute(Q["job_insert"], args).fetchone()
        if row is not None:
            job = job_from_row(row)
            out.append((job, True))
            events.append(_event(job, now, EventKind.ENQUEUED, None, new.principal))
            continue
        # The UNIQUE (principal, idempotency_key) constraint turned the insert away.
        existing = job_from_row(conn.execute(Q["job_by_idempotency_key"], args).fetchone())
        if existing.fingerprint != new.fingerprint:
            raise IdempotencyKeyReused(
                "This idempotency key was used with a different request", index=index
            )
        out.append((existing, False))
    conn.executemany(Q["event_insert"], events)
    return out


def _rescue(
    conn: sqlite3.Connection, now: datetime, retry_at: Callable[[Job], datetime], limit: int
) -> list[Job]:
    expired = [
        job_from_row(r)
        for r in conn.execute(Q["job_expired_leases"], {"now": to_micros(now), "limit": limit})
    ]
    rescued = []
    for job in expired:
        assert job.lease_token is not None and job.claimed_by is not None
        params = FinishParams(
            job_id=job.id,
            lease_token=job.lease_token,
            worker_name=job.claimed_by,
            now=now,
            error="lease expired",
            retry_at=retry_at(job),
        )
        outcome = _finish(conn, params, kind=EventKind.LEASE_EXPIRED, actor="queuelog")
        if isinstance(outcome, Job):
            rescued.append(outcome)
    return rescued


def _claim(conn: sqlite3.Connection, params: ClaimParams) -> list[Job]:
    if params.retry_at is not None:
        _rescue(conn, params.now, params.retry_at, limit=500)
    conn.execute(Q["job_promote_due"], {"now": to_micros(params.now)})
    args = {
        "worker_id": params.worker_id,
        "worker_name": params.worker_name,
        "now": to_micros(params.now),
        "lease_seconds": params.lease_seconds,
        "types": _types_json(params.types),
        "limit": params.limit,
    }
    jobs = [job_from_row(r) for r in conn.execute(Q["job_claim"], args)]
    jobs.sort(key=lambda j: (-j.priority, j.created_at, j.id))
    events = [
        _event(j, params.now, EventKind.CLAIMED, JobStatus.PENDING, params.worker_id) for j in jobs
    ]
    conn.executemany(Q["event_insert"], events)
    return jobs


def _finish(
    conn: sqlite3.Connection,
    item: FinishParams,
    kind: EventKind | None = None,
    actor: str | None = None,
) -> Job | QueueError:
    args: dict[str, Any] = {
        "id": item.job_id,
        "lease_token": item.lease_token,
        "worker_name": item.worker_name,
        "now": to_micros(item.now),
    }
    if item.error is None:
        args["result"] = _dumps(item.result)
        row = conn.execute(Q["job_complete"], args).fetchone()
    else:
        retry_at = item.retry_at or item.now
        args.update(
            error=item.error,
            retryable=item.retryable,
            retry_at=to_micros(retry_at),
            expired=kind is EventKind.LEASE_EXPIRED,
        )
        row = conn.execute(Q["job_fail"], args).fetchone()
    if row is None:
        return guard_failure(_get(conn, item.job_id), item.worker_name, item.lease_token)
    job = job_from_row(row)
    if kind is None:
        kind = {
            JobStatus.COMPLETED: EventKind.COMPLETED,
            JobStatus.PENDING: EventKind.RETRY_SCHEDULED,
            JobStatus.FAILED: EventKind.FAILED,
        }[job.status]
    detail = item.error if item.error is not None else None
    event = _event(job, item.now, kind, JobStatus.RUNNING, actor or item.worker_name, detail)
    conn.execute(Q["event_insert"], event)
    return job


def _transition(
    conn: sqlite3.Connection, query: str, job_id: int, actor: str, now: datetime, kind: EventKind
) -> Job:
    before = _get(conn, job_id)
    if before is None:
        raise NotFound("No such job")
    row = conn.execute(Q[query], {"id": job_id, "now": to_micros(now)}).fetchone()
    if row is None:
        raise InvalidState(f"Job is {before.status.value}")
    job = job_from_row(row)
    conn.execute(Q["event_insert"], _event(job, now, kind, before.status, actor))
    return job


def _requeue_failed(conn: sqlite3.Connection, job_type: str, actor: str, now: datetime) -> int:
    args = {"type": job_type, "now": to_micros(now)}
    jobs = [job_from_row(r) for r in conn.execute(Q["job_requeue_failed"], args)]
    events = [_event(job, now, EventKind.REQUEUED, JobStatus.FAILED, actor) for job in jobs]
    conn.executemany(Q["event_insert"], events)
    return len(jobs)
