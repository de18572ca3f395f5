"""Background maintenance: the lease sweeper, the schedules' fires, the planner's
statistics (PostgreSQL) and the pruner.

Each pass is a ``run_once()`` that is tested on its own, run every sweep
interval by one task on the server's event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from queuelog.errors import StorageUnavailable
from queuelog.scheduler import Scheduler
from queuelog.service import JobService

log = logging.getLogger("queuelog.maintenance")


class Maintenance:
    """Rescues expired leases, fires due schedules and refreshes statistics far behind
    every ``sweep_interval`` s, and prunes every ``prune_interval`` s."""

    def __init__(
        self,
        service: JobService,
        sweep_interval: float = 1.0,
        prune_interval: float = 60.0,
        scheduler: Scheduler | None = None,
    ) -> None:
        self.service = service
        self.scheduler = scheduler
        self.sweep_interval = sweep_interval
        self.prune_every = max(1, round(prune_interval / sweep_interval))
        self._task: asyncio.Task[None] | None = None

    async def run_once(self, prune: bool = True) -> tuple[int, int]:
        """One pass; returns (leases rescued, jobs pruned)."""
        rescued = len(await self.service.rescue_expired())
        if self.scheduler is not None:
            await self.scheduler.fire_due()
        await self.service.storage.statistics_refresh()
        pruned = await self.service.prune() if prune else 0
        if rescued or pruned:
            log.info("maintenance: %d expired leases rescued, %d jobs pruned", rescued, pruned)
        return rescued, pruned

    def start(self) -> None:
        """Start the passes on the running event loop."""
        self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        """Stop the passes; a pass under way is cancelled at its next wait."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _loop(self) -> None:
        passes = 0
        while True:
            await asyncio.sleep(self.sweep_interval)
            passes += 1
            try:
                await self.run_once(prune=passes % self.prune_every == 0)
            except StorageUnavailable:
                pass  # logged once, when the fault began (storage/health.py)
            except Exception:  # keep sweeping: one failed pass must not end maintenance
                log.exception("maintenance pass failed")
