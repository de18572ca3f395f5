"""Awaiting a job's end: the reads ``Client.wait`` and ``AsyncClient.wait`` send, and
what ``result`` makes of the finished job. Pure: no I/O."""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from typing import Generic, TypeVar

from queuelog.client import calls
from queuelog.client.calls import Call, JobRef
from queuelog.client.errors import JobCancelled, JobFailed, JobTimeout
from queuelog.client.policy import unreachable
from queuelog.client.types import Job, JsonObject
from queuelog.errors import QueueError
from queuelog.models import TERMINAL, JobStatus

# The longest wait the server holds one read for.
MAX_WAIT_SECONDS = 30.0
# Between reads the server could not take for now, once the client's own tries are spent.
REREAD_PAUSE_SECONDS = 1.0
R = TypeVar("R")


class Awaiting(Generic[R]):
    """One wait: reads of the job, each held by the server until the job finishes or up
    to ``MAX_WAIT_SECONDS``, until it has finished or ``timeout`` seconds have passed
    (None: no limit)."""

    def __init__(
        self,
        job: JobRef,
        timeout: float | None,
        then: Callable[[Job], R],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """Args:
        job: the job, or its id.
        timeout: seconds to wait in all; None: no limit.
        then: what the wait answers, made of the finished job (the job itself, or
            its result with ``result_of``).
        clock: monotonic seconds; tests pass their own.
        """
        self._job_id = job.id if isinstance(job, Job) else int(job)
        self._then = then
        self._clock = clock
        self._deadline = math.inf if timeout is None else clock() + max(0.0, timeout)
        self._job: Job | None = None

    def next_call(self) -> Call[Job] | None:
        """The next read to send, or None once the wait is over."""
        remaining = self._deadline - self._clock()
        if self._job is not None and (self._job.status in TERMINAL or remaining <= 0):
            return None
        read = calls.get(self._job_id, wait_seconds=min(max(remaining, 0.0), MAX_WAIT_SECONDS))
        return dataclasses.replace(read, remaining=self._remaining)

    def _remaining(self) -> float:
        return self._deadline - self._clock()

    def take(self, job: Job) -> None:
        """The answer to the last read."""
        self._job = job

    def pause_after(self, error: QueueError) -> float:
        """A read the server could not take for now (a restart, a 503, a 429), after the
        client's own tries: the pause before reading again (the answer's Retry-After, at
        least ``REREAD_PAUSE_SECONDS``), while the wait has time left (a wait with a
        timeout outlasts a restart, and ends by its timeout); otherwise ``error`` is
        raised."""
        remaining = self._remaining()
        if not unreachable(error) or math.isinf(remaining) or remaining <= 0:
            raise error
        return min(max(REREAD_PAUSE_SECONDS, error.retry_after or 0), remaining)

    def finished(self) -> R:
        """What the wait answers (``then`` of the finished job); JobTimeout (with the job as
        it is) if the time ran out first."""
        assert self._job is not None, "no read was answered"
        if self._job.status not in TERMINAL:
            raise JobTimeout(self._job)
        return self._then(self._job)


def wait(job: JobRef, timeout: float | None = None) -> Awaiting[Job]:
    """The job once it is completed, failed or cancelled; JobTimeout (a TimeoutError,
    with the job as it is) if ``timeout`` seconds pass first (None: no limit). The
    server holds each read until the job finishes: nothing is polled."""
    return Awaiting(job, timeout, then=_itself)


def result(job: JobRef, timeout: float | None = None) -> Awaiting[JsonObject | None]:
    """The result of the job once it completed; JobFailed or JobCancelled (with the
    job) if it did not; JobTimeout if ``timeout`` seconds pass first."""
    return Awaiting(job, timeout, then=result_of)


def _itself(job: Job) -> Job:
    return job


def result_of(job: Job) -> JsonObject | None:
    """A finished job's result; JobFailed or JobCancelled (with the job) if it did not
    complete."""
    if job.status == JobStatus.FAILED:
        raise JobFailed(job)
    if job.status == JobStatus.CANCELLED:
        raise JobCancelled(job)
    return job.result
