"""What the parts of a worker's run share: its options and the jobs it holds.

A job is *busy* from its claim until its handler returns (that is what ``concurrency``
counts) and *held* until the server has its outcome (heartbeats keep its lease alive until
then). The claimer hands each claimed job to a handler thread as a ``Running``; the
acknowledger reports its outcome and the heartbeater renews its lease meanwhile.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from queuelog.client.types import Job
from queuelog.errors import InvalidState, NotFound, NotLeaseHolder

log = logging.getLogger("queuelog.worker")
Handler = Callable[[Job], Any]
LOST = (InvalidState, NotLeaseHolder, NotFound)  # the lease is gone: someone else has the job
# After the shutdown deadline, abandoned jobs are reported within this many seconds (in
# parallel, one try each) or left to their leases; the threads get as long to finish.
LATE_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class Options:
    concurrency: int
    prefetch: int
    wait_seconds: float
    lease_seconds: int | None
    instance: str | None
    shutdown_seconds: float
    idle_seconds: float


@dataclass(eq=False)
class Running:
    """A held job, shared by its handler thread, the heartbeater and the acknowledger."""

    job: Job
    lease: float
    started: float = field(default_factory=time.monotonic)
    next_beat: float = 0.0
    reported: bool = False  # its outcome is on its way to the server
    begun: bool = False  # a handler has started it
    abandoned: bool = False  # the shutdown deadline passed: its outcome is dropped
    future: Future[Any] | None = None
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        self.next_beat = self.started + self.lease / 3

    def begin(self) -> bool:
        """True, once started, unless the job was abandoned (at the shutdown deadline)."""
        with self.lock:
            self.begun = not self.abandoned
            return self.begun

    def claim_report(self) -> bool:
        """True once for whoever reports the outcome first: the handler or the shutdown."""
        with self.lock:
            if self.reported or self.abandoned:
                return False
            self.reported = True
            return True

    def abandon(self) -> bool:
        """At the shutdown deadline: True if no outcome was reported yet, and none will be
        (an async handler still running is cancelled)."""
        with self.lock:
            if self.reported:
                return False
            self.abandoned = True
        if self.future is not None:
            self.future.cancel()
        return True


def log_outcome(running: Running, outcome: str, level: int = logging.INFO) -> None:
    if not log.isEnabledFor(level):  # once per job: build nothing for a record never made
        return
    job, duration = running.job, time.monotonic() - running.started
    log.log(
        level,
        "job_id=%s type=%s outcome=%s duration=%.3fs attempt=%s",
        job.id, job.type, outcome, duration, job.retry_count + 1,
        extra={"job_id": job.id, "job_type": job.type, "outcome": outcome, "duration": duration},
    )  # fmt: skip
