"""Awaiting a job's end: the reads ``Client.wait`` and ``AsyncClient.wait`` send, and
what ``result`` makes of the finished job. Pure: no I/O."""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from queuelog.client import calls
from queuelog.client.calls import Call, JobRef
from queuelog.client.errors import JobCancelled, JobFailed, JobTimeout
from queuelog.client.types import Job, JsonObject
from queuelog.models import TERMINAL, JobStatus

# The longest wait the server holds one read for.
MAX_WAIT_SECONDS = 30.0


class Awaiting:
    """One wait: reads of the job, each held by the server until the job finishes or up
    to ``MAX_WAIT_SECONDS``, until it has finished or ``timeout`` seconds have passed
    (None: no limit)."""

    def __init__(
        self,
        job: JobRef,
        timeout: float | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._job_id = job.id if isinstance(job, Job) else int(job)
        self._clock = clock
        self._deadline = math.inf if timeout is None else clock() + max(0.0, timeout)
        self._job: Job | None = None

    def next_call(self) -> Call[Job] | None:
        """The next read to send, or None once the wait is over."""
        remaining = self._deadline - self._clock()
        if self._job is not None and (self._job.status in TERMINAL or remaining <= 0):
            return None
        return calls.get(self._job_id, wait_seconds=min(max(remaining, 0.0), MAX_WAIT_SECONDS))

    def take(self, job: Job) -> None:
        """The answer to the last read."""
        self._job = job

    def finished(self) -> Job:
        """The finished job; JobTimeout (with the job as it is) if the time ran out first."""
        assert self._job is not None, "no read was answered"
        if self._job.status not in TERMINAL:
            raise JobTimeout(self._job)
        return self._job


def result_of(job: Job) -> JsonObject | None:
    """A finished job's result; JobFailed or JobCancelled (with the job) if it did not
    complete."""
    if job.status == JobStatus.FAILED:
        raise JobFailed(job)
    if job.status == JobStatus.CANCELLED:
        raise JobCancelled(job)
    return job.result
