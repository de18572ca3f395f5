"""The read side both SQL backends share: the same named queries, the same rows."""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from queuelog.clock import from_micros, to_micros
from queuelog.errors import StorageUnavailable
from queuelog.models import (
    ApiKey,
    EventKind,
    FlowLimits,
    Job,
    JobEvent,
    JobStatus,
    QueueStats,
    TypeEvent,
    TypeEventKind,
    TypePause,
)
from queuelog.schedules import Schedule
from queuelog.storage.flow import window_start
from queuelog.storage.health import StorageHealth
from queuelog.storage.protocol import LISTED_BYTES, EventCount, JobListParams, JobPage
from queuelog.storage.rows import Row, event_from_row, job_from_row, key_from_row
from queuelog.storage.schedule_rows import schedule_from_row

# What a key that is not an admin's may list: its own jobs, the jobs it holds.
_PARTS = (("job_list_by_principal", "principal"), ("job_list_running", "holder"))


def _union(parts: list[JobPage], limit: int) -> JobPage:
    """A key with both roles sees the union of its own jobs and those it holds, newest
    first. A part cut short (by its limit or its bytes) has not read its jobs after its
    last, so the page ends there: the next page reads on from it."""
    ends = [part.jobs[-1].id for part in parts if part.more]
    found = {job.id: job for part in parts for job in part.jobs if job.id >= max(ends, default=0)}
    jobs = sorted(found.values(), key=lambda j: j.id, reverse=True)
    return JobPage(jobs[:limit], bool(ends) or len(jobs) > limit)


class SqlReads(abc.ABC):
    """Reads by query name; a backend supplies ``_read`` on its own connections."""

    health: StorageHealth

    @abc.abstractmethod
    async def _read(self, name: str, params: Mapping[str, Any]) -> list[Row]:
        """Run the named query and return its rows."""

    @abc.abstractmethod
    async def _probe(self) -> None:
        """Rewrite the ``storage_probe`` row in a transaction of its own."""

    async def ping(self) -> bool:
        """True when the node can serve: a read answers, and while writes are refused
        for a storage fault, a write of the probe row stores and ends the fault."""
        try:
            if self.health.writable:
                await self._read("ping", {})
                return True
            await self._probe()
        except StorageUnavailable:
            return False
        return self.health.writable  # a probe stored on a disk still nearly full

    async def durability(self) -> str:
        """What this node's commits wait for, as the database reports it for the store's
        connections: ``full`` (each commit is on the disk), ``normal`` (less: SQLite syncs
        its WAL at checkpoints only, PostgreSQL does not wait for the WAL flush), or
        ``off`` (SQLite: never synced)."""
        (row,) = await self._read("session_durability", {})
        return str(row["durability"])

    @abc.abstractmethod
    def _types_param(self, types: Sequence[str]) -> Any:
        """A list of job types as the backend's queries take it."""

    @abc.abstractmethod
    def _ids_param(self, ids: Sequence[int]) -> Any:
        """A list of job ids as the backend's queries take it."""

    async def job_next_due(self, types: Sequence[str]) -> datetime | None:
        args = {"types": self._types_param(types)}
        value = (await self._read("job_next_due", args))[0]["next_due"]
        return from_micros(value) if value is not None else None

    async def job_get(self, job_id: int) -> Job | None:
        rows = await self._read("job_get", {"id": job_id})
        return job_from_row(rows[0]) if rows else None

    async def job_by_idempotency_key(self, principal: str, key: str) -> Job | None:
        args = {"principal": principal, "idempotency_key": key}
        rows = await self._read("job_by_idempotency_key", args)
        return job_from_row(rows[0]) if rows else None

    async def job_get_many(self, job_ids: Sequence[int]) -> list[Job]:
        if not job_ids:
            return []
        rows = await self._read("job_get_many", {"ids": self._ids_param(job_ids)})
        return [job_from_row(r) for r in rows]

    async def job_list(self, params: JobListParams) -> JobPage:
        args = {
            "before_id": params.before_id,
            "status": params.status.value if params.status else None,
            "type": params.type,
            "principal": params.principal,
            "holder": params.holder,
            "idempotency_key": params.idempotency_key,
            "depends_on": params.depends_on,
            "limit": params.limit,
            "max_bytes": LISTED_BYTES,
        }
        if params.depends_on is not None:
            return await self._job_page("job_list_dependents", args)
        if params.principal is None and params.holder is None:
            running = params.status is JobStatus.RUNNING
            return await self._job_page("job_list_running" if running else "job_list", args)
        queries = [query for query, who in _PARTS if args[who] is not None]
        # The parts share the budget: their union holds about one page's bytes.
        shared = {**args, "max_bytes": LISTED_BYTES // len(queries)}
        return _union([await self._job_page(query, shared) for query in queries], params.limit)

    async def _job_page(self, query: str, args: Mapping[str, Any]) -> JobPage:
        rows = await self._read(query, args)
        return JobPage([job_from_row(r) for r in rows], bool(rows) and bool(rows[-1]["more"]))

    async def job_events(self, job_id: int, after: int = 0, limit: int = 500) -> list[JobEvent]:
        """A page of a job's history, oldest first: the events after the event ``after``."""
        args = {"job_id": job_id, "after": after, "limit": limit}
        return [event_from_row(r) for r in await self._read("job_events", args)]

    async def job_stats(self, now: datetime) -> QueueStats:
        counts = {(r["status"], r["type"]): r["n"] for r in await self._read("job_counts", {})}
        args = {"now": to_micros(now)}
        oldest = (await self._read("job_oldest_ready", args))[0]["oldest"]
        return QueueStats(
            counts=counts,
            oldest_ready_at=from_micros(oldest) if oldest is not None else None,
            ready=(await self._read("job_ready_count", args))[0]["ready"],
        )

    async def job_event_counts(
        self, since: datetime, until: datetime, bucket_seconds: int
    ) -> list[EventCount]:
        start = to_micros(since)
        bucket = bucket_seconds * 1_000_000
        args = {"since": start, "until": to_micros(until), "bucket": bucket}
        return [
            EventCount(from_micros(start + r["bucket"] * bucket), EventKind(r["kind"]), r["n"])
            for r in await self._read("job_event_counts", args)
        ]

    async def schedule_get(self, name: str) -> Schedule | None:
        rows = await self._read("schedule_get", {"name": name})
        return schedule_from_row(rows[0]) if rows else None

    async def schedule_list(self) -> list[Schedule]:
        return [schedule_from_row(r) for r in await self._read("schedule_list", {})]

    async def schedule_due(self, now: datetime) -> list[Schedule]:
        rows = await self._read("schedule_due", {"now": to_micros(now)})
        return [schedule_from_row(r) for r in rows]

    async def key_by_hash(self, key_hash: str) -> ApiKey | None:
        rows = await self._read("key_by_hash", {"key_hash": key_hash})
        return key_from_row(rows[0]) if rows else None

    async def key_list(self) -> list[ApiKey]:
        return [key_from_row(r) for r in await self._read("key_list", {})]

    async def key_has_active_admin(self) -> bool:
        return bool(await self._read("key_active_admin", {}))

    async def type_pauses(self) -> list[TypePause]:
        rows = await self._read("type_paused", {})
        return [TypePause(r["type"], r["paused_by"], from_micros(r["paused_at"])) for r in rows]

    async def type_events(self, job_type: str) -> list[TypeEvent]:
        rows = await self._read("type_events", {"type": job_type})
        return [
            TypeEvent(r["type"], from_micros(r["at"]), TypeEventKind(r["event"]), r["actor"])
            for r in rows
        ]

    async def type_window_opens(
        self, job_type: str, now: datetime, limits: FlowLimits
    ) -> datetime | None:
        if limits.rate_jobs is None or limits.rate_per_seconds is None:
            return None
        since = window_start(to_micros(now), limits.rate_per_seconds)
        args = {"type": job_type, "since": since}
        used = int((await self._read("type_claims_used", args))[0]["n"])
        if used < limits.rate_jobs:
            return None
        rows = await self._read("type_window_opens", {**args, "over": used - limits.rate_jobs})
        if not rows:
            return None
        return from_micros(int(rows[0]["at"]) + (to_micros(now) - since))
