"""Background maintenance: the lease sweeper and the pruner.

Each is a ``run_once()`` that is tested on its own, driven by one loop thread.
"""

from __future__ import annotations

import logging
import threading

from queuelog.service import JobService

log = logging.getLogger("queuelog.maintenance")


class Maintenance:
    """Rescues expired leases every ``sweep_interval`` s and prunes every ``prune_interval`` s."""

    def __init__(
        self, service: JobService, sweep_interval: float = 1.0, prune_interval: float = 60.0
    ) -> None:
        self.service = service
        self.sweep_interval = sweep_interval
        self.prune_every = max(1, round(prune_interval / sweep_interval))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def run_once(self, prune: bool = True) -> tuple[int, int]:
        """One pass; returns (leases rescued, jobs pruned)."""
        rescued = len(self.service.rescue_expired())
        pruned = self.service.prune() if prune else 0
        if rescued or pruned:
            log.info("maintenance: %d expired leases rescued, %d jobs pruned", rescued, pruned)
        return rescued, pruned

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="queuelog-maintenance", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        passes = 0
        while not self._stop.wait(self.sweep_interval):
            passes += 1
            try:
                self.run_once(prune=passes % self.prune_every == 0)
            except Exception:  # keep sweeping: one failed pass must not end maintenance
                log.exception("maintenance pass failed")
