"""What the parts of a worker's run share: its options and the jobs it holds.

A job is *busy* from its claim until its handler returns (that is what ``concurrency``
counts) and *held* until the server has its outcome (heartbeats keep its lease alive until
then). The claimer hands each claimed job to a handler thread as a ``Running``; the
acknowledger reports its outcome and the heartbeater renews its lease meanwhile.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Any

from queuelog.client.policy import seconds_ok
from queuelog.client.types import Dependency, Job, JsonObject
from queuelog.errors import InvalidState, NotFound, NotLeaseHolder
from queuelog.models import INSTANCE_PATTERN
from queuelog.plain_json import strict_json

log = logging.getLogger("queuelog.worker")
Handler = Callable[[Job], Any]
LOST = (InvalidState, NotLeaseHolder, NotFound)  # the lease is gone: someone else has the job
# After the shutdown deadline, a run takes about this many seconds more at most, all told
# (a claim still out may take its long poll from the stop, if that is later): abandoned
# jobs are reported within them (in parallel, one try each) or left to their leases, while
# outcomes, heartbeats and threads still going get them too.
LATE_SECONDS = 5.0
# Progress goes out with a heartbeat at most this often.
PROGRESS_SECONDS = 1.0
MAX_PROGRESS_BYTES = 4096  # the server's limit on a heartbeat's progress


@dataclass(frozen=True, slots=True)
class Options:
    """A worker's options, checked when it is made and whenever they change: as the
    server reads a claim, since out of range every claim would be refused at run time,
    naming no option; the times, since a negative or NaN one fails only once waited on."""

    concurrency: int
    prefetch: int | None  # None: as many as the handlers' pace calls for (see Claimer)
    wait_seconds: float
    linger_ms: int
    lease_seconds: int | None
    instance: str | None
    shutdown_seconds: float
    idle_seconds: float

    def __post_init__(self) -> None:
        if problem := _option_problem(self):
            raise ValueError(problem)


def _option_problem(options: Options) -> str | None:
    if not _whole(options.concurrency, 1, None):
        return "concurrency must be a whole number, at least 1"
    if options.prefetch is not None and not _whole(options.prefetch, 0, None):
        return "prefetch must be a whole number, 0 or more"
    if not seconds_ok(options.wait_seconds, 30):
        return "wait_seconds must be from 0 to 30"
    if not _whole(options.linger_ms, 0, 1000):
        return "linger_ms must be a whole number from 0 to 1000"
    if options.lease_seconds is not None and not _whole(options.lease_seconds, 1, 3600):
        return "lease_seconds must be a whole number from 1 to 3600"
    if options.instance is not None and not _instance_ok(options.instance):
        return "instance must be 1-64 of A-Z a-z 0-9 . _ -"
    for name in ("shutdown_seconds", "idle_seconds"):
        if not seconds_ok(getattr(options, name)):
            return f"{name} must be a finite number of seconds, 0 or more"
    return None


def _whole(value: object, least: int, most: int | None) -> bool:
    """A whole number in range, as the server reads one (a bool is none)."""
    if not isinstance(value, int) or isinstance(value, bool):
        return False
    return least <= value and (most is None or value <= most)


def _instance_ok(instance: object) -> bool:
    """An instance as the server reads a claim's (``INSTANCE_PATTERN``)."""
    return isinstance(instance, str) and re.fullmatch(INSTANCE_PATTERN, instance) is not None


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
    lost: bool = False  # the server refused its heartbeat: another worker may hold it now
    # Its outcome was sent and the answer lost: a refusal of a later delivery as no longer
    # running most likely means that one landed.
    unconfirmed: bool = False
    # When the claim that brought it was sent: its lease began no earlier, however late
    # the claim's answer came (None: now).
    claim_sent: float | None = None
    future: Future[Any] | None = None
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    last_beat: float = 0.0
    ran: float | None = None  # seconds its handler took, once it has returned
    progress: JsonObject | None = None  # reported by the handler, not yet sent
    # Reads a job's dependencies from the server (the worker's client).
    dependencies_of: Callable[[int], list[Dependency]] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        leased = self.started if self.claim_sent is None else min(self.claim_sent, self.started)
        self.next_beat = leased + self.lease / 3
        self.last_beat = leased
        # The job the handler gets: its report_progress lands here, its dependencies()
        # asks the server.
        read = self.dependencies_of
        self.job = replace(
            self.job,
            progress_to=self.report_progress,
            dependencies_from=functools.partial(read, self.job.id) if read else None,
        )

    def report_progress(self, progress: JsonObject) -> None:
        """Keep ``progress`` for the next heartbeat, brought forward to a second after the
        last one (sooner progress replaces it unsent)."""
        if not isinstance(progress, dict):
            raise ValueError("progress must be a JSON object (a dict)")
        try:
            # Measured as the server measures it: compact UTF-8 JSON.
            text = json.dumps(progress, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
            size = len(text.encode())
            # A copy of what was measured (the handler may go on changing its own object),
            # read as it travels and as the server reads it (no deeper than it takes):
            # else the heartbeat carrying it would be refused, and the report dropped unsaid.
            sent = strict_json(text)  # keys that JSON writes alike (1 and "1") are refused
        except (TypeError, ValueError, RecursionError) as error:
            raise ValueError(f"progress is not JSON: {error}") from None
        if size > MAX_PROGRESS_BYTES:
            raise ValueError(f"progress is {size} bytes as JSON; at most {MAX_PROGRESS_BYTES}")
        with self.lock:
            self.progress = sent
            soonest = max(self.last_beat + PROGRESS_SECONDS, time.monotonic())
            self.next_beat = min(self.next_beat, soonest)

    def take_progress(self) -> JsonObject | None:
        """The progress to send with the heartbeat going out now (None: none new)."""
        with self.lock:
            progress, self.progress = self.progress, None
            self.last_beat = time.monotonic()
            return progress

    def renewed(self, sent: float) -> None:
        """Its heartbeat sent at ``sent`` landed: the next is due a third of the lease
        later, or a second after that one for progress reported while it travelled
        (which ``report_progress`` brought forward: not to be put back)."""
        with self.lock:
            due = sent + self.lease / 3
            if self.progress is not None:
                due = min(due, self.last_beat + PROGRESS_SECONDS)
            self.next_beat = due

    def keep_progress(self, progress: JsonObject | None) -> None:
        """A heartbeat that did not land: its progress goes with the next, unless newer came."""
        with self.lock:
            if self.progress is None:
                self.progress = progress

    def begin(self) -> bool:
        """True, once started, unless the job was abandoned (at the shutdown deadline) or
        its lease was lost while it waited for a handler."""
        with self.lock:
            self.begun = not (self.abandoned or self.lost)
            return self.begun

    def lose(self) -> bool:
        """Its lease is gone (a heartbeat refused): no handler starts it now. Whether one
        had started it already."""
        with self.lock:
            self.lost = True
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
        (its async handler, if still running, is then ``cancel``led)."""
        with self.lock:
            if self.reported:
                return False
            self.abandoned = True
        return True

    def cancel(self) -> None:
        """Cancel an async handler still running (a sync one cannot be stopped)."""
        if self.future is not None:
            self.future.cancel()


def log_outcome(running: Running, outcome: str, level: int = logging.INFO) -> None:
    if not log.isEnabledFor(level):  # once per job: build nothing for a record never made
        return
    job = running.job
    # The handler's own time: not the wait for the server an outcome may meet after it.
    duration = running.ran if running.ran is not None else time.monotonic() - running.started
    log.log(
        level,
        "job_id=%s type=%s outcome=%s duration=%.3fs attempt=%s",
        job.id, job.type, outcome, duration, job.retry_count + 1,
        extra={"job_id": job.id, "job_type": job.type, "outcome": outcome, "duration": duration},
    )  # fmt: skip
