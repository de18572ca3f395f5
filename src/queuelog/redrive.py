"""Dead-letter redrive (admin): failed or cancelled jobs back to pending, one job at a
time or every failed job of a type."""

from __future__ import annotations

from collections.abc import Callable

from queuelog.clock import Clock
from queuelog.config import Settings
from queuelog.errors import Forbidden, UnknownJobType, quoted
from queuelog.models import ApiKey, Job, JobStatus, Role
from queuelog.storage.protocol import Storage

# One redrive of a type moves at most this many chunks of 500 (a type failing as fast ends too).
_MAX_CHUNKS = 10_000


class Redrive:
    def __init__(
        self, storage: Storage, settings: Settings, clock: Clock, on_ready: Callable[[], None]
    ) -> None:
        """Args:
        storage: the backend.
        settings: the job types this node's workers may claim.
        clock: the source of ``now``.
        on_ready: wakes long polls once jobs are pending again.
        """
        self.storage = storage
        self.settings = settings
        self.clock = clock
        self._on_ready = on_ready

    async def job(self, caller: ApiKey, job_id: int) -> Job:
        """A failed or cancelled job back to pending (409 for any other state)."""
        found = await self.storage.job_get(job_id)
        if found is not None and found.status in (JobStatus.FAILED, JobStatus.CANCELLED):
            self._check_type(found.type)  # any other state is the requeue's 409
        job = await self.storage.job_requeue(job_id, caller.name, self.clock.now())
        self._on_ready()
        return job

    async def failed_of_type(self, caller: ApiKey, job_type: str) -> int:
        """Every failed job of ``job_type`` back to pending; how many moved."""
        if not caller.has(Role.ADMIN):
            raise Forbidden("Only an admin may retry jobs")
        self._check_type(job_type)
        # A transaction a chunk, in id order: the server serves between two (SQLite's
        # writer runs on the event loop), and a job failing again meanwhile stays failed.
        moved, after = 0, 0
        for _ in range(_MAX_CHUNKS):
            chunk = await self.storage.job_requeue_failed(
                job_type, caller.name, self.clock.now(), after_id=after
            )
            if not chunk:
                break
            moved, after = moved + len(chunk), chunk[-1]
            self._on_ready()
        return moved

    def _check_type(self, job_type: str) -> None:
        """422 for a type no longer in the config: its jobs, pending again, would wait
        there forever, as no worker may claim them."""
        if self.settings.job_type(job_type) is None:
            raise UnknownJobType(
                f"Job type {quoted(job_type)} is not configured: a retried job would never run"
            )
