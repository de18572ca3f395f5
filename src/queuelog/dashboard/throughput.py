"""The overview's chart data: jobs completed and failed per minute."""

from __future__ import annotations

from datetime import timedelta

from queuelog.models import EventKind, MinuteCounts
from queuelog.service import JobService


async def throughput(service: JobService, minutes: int = 60) -> list[MinuteCounts]:
    """Jobs completed and failed (for good) in each of the last ``minutes`` whole minutes.

    The current, unfinished minute is the last one.
    """
    now = service.clock.now()
    until = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
    since = until - timedelta(minutes=minutes)
    slots = [MinuteCounts(since + timedelta(minutes=i)) for i in range(minutes)]
    for count in await service.storage.job_event_counts(since, until, 60):
        index = int((count.bucket_start - since).total_seconds()) // 60
        if count.event == EventKind.COMPLETED:
            slots[index].completed += count.count
        elif count.event == EventKind.FAILED:
            slots[index].failed += count.count
    return slots
