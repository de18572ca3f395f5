"""The overview's chart data: jobs completed and failed per minute."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from queuelog.models import EventKind, MinuteCounts
from queuelog.service import JobService

MINUTE = timedelta(minutes=1)
# A minute this long past its end has every event it will ever count. A transaction
# takes its time before it commits, and may wait meanwhile: for a database connection
# (on PostgreSQL up to `connection_wait_seconds`, at most ten minutes), for locks, or
# for SQLite's busy timeout; and nodes' clocks differ a little.
SETTLED_AFTER = timedelta(minutes=15)


class Throughput:
    """Jobs completed and failed (for good) in each of the last minutes, the current,
    unfinished minute last.

    A refresh counts the events of the minutes not yet settled only: a settled minute
    no longer changes, so it is counted once and kept (those older than the chart
    dropped, and those not settled by the clock as it now reads, should it have gone
    back): counting the whole hour at each refresh read every event of the hour.
    A job purged by retention later leaves the kept counts alone: the chart shows what
    happened in each minute."""

    def __init__(self, service: JobService, minutes: int = 60) -> None:
        self._service = service
        self._minutes = minutes
        self._settled: dict[datetime, MinuteCounts] = {}

    async def slots(self) -> list[MinuteCounts]:
        now = self._service.clock.now()
        until = now.replace(second=0, microsecond=0) + MINUTE
        since = until - self._minutes * MINUTE
        starts = [since + i * MINUTE for i in range(self._minutes)]
        # This refresh's own view: another one may change what is kept meanwhile.
        kept = {s: c for s, c in self._settled.items() if s >= since and self._settles(s, now)}
        unsettled = [s for s in starts if s not in kept]
        counted = await self._count(unsettled[0], until) if unsettled else {}
        settled = {s: c for s, c in counted.items() if self._settles(s, now)}
        self._settled = kept | settled
        # Copies: a page's slots are its own, whatever the next refresh keeps.
        return [replace(kept[s] if s in kept else counted[s]) for s in starts]

    @staticmethod
    def _settles(start: datetime, now: datetime) -> bool:
        return start + MINUTE + SETTLED_AFTER <= now

    async def _count(self, since: datetime, until: datetime) -> dict[datetime, MinuteCounts]:
        minutes = int((until - since) / MINUTE)
        slots = {since + i * MINUTE: MinuteCounts(since + i * MINUTE) for i in range(minutes)}
        for count in await self._service.storage.job_event_counts(since, until, 60):
            if count.event == EventKind.COMPLETED:
                slots[count.bucket_start].completed += count.count
            elif count.event == EventKind.FAILED:
                slots[count.bucket_start].failed += count.count
        return slots
