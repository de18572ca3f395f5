"""The claimer: claims jobs while the handlers have room and hands them out, counting the
jobs that are busy (claimed, handler not yet returned) and waiting (no handler yet)."""

from __future__ import annotations

import dataclasses
import queue
import threading
import time

from queuelog.client.heartbeater import Heartbeater
from queuelog.client.running import Options, Running, log
from queuelog.client.sync import Client
from queuelog.client.types import Job
from queuelog.errors import QueueError

CLAIM_LIMIT = 100  # the API's most jobs per claim
# Without a fixed prefetch, a worker claims ahead the jobs its handlers would start within
# this many seconds at the pace they have been finishing jobs: short jobs come in large
# claims, and jobs that take longer wait for a free handler on the server, where no lease
# is held for them.
AHEAD_SECONDS = 0.5
_PACE_WEIGHT = 0.2  # of the latest job in the running mean of a job's time in a handler
# The longest pause a claim refused for now makes, whatever the answer asked: a wait
# for longer than a clock can count (a Retry-After of seventeen digits) raised instead,
# and the worker stopped.
LONGEST_PAUSE_SECONDS = 3600.0


class Claimer:
    """Claims for ``types`` until stopped; handler threads take the jobs with ``next_job``
    and give their slot back with ``finished``."""

    def __init__(
        self, client: Client, types: list[str], options: Options, leases: Heartbeater
    ) -> None:
        self._client = client
        self._types = types
        self._options = options
        self._leases = leases
        self._stopping = threading.Event()
        self._changed = threading.Condition()  # busy or waiting changed, or stopping
        self._busy = 0
        self._waiting = 0  # claimed jobs no handler has taken yet (part of busy)
        self._pace: float | None = None  # mean seconds a handler spends on a job
        self._lingering = False  # whether the next claim lingers (see _worth_lingering)
        self._jobs: queue.SimpleQueue[Running | None] = queue.SimpleQueue()
        self.fatal: QueueError | None = None  # why this worker cannot claim at all

    def run(self) -> None:
        """Claim and hand out jobs until ``stop`` (or a fatal claim error, kept in ``fatal``)."""
        idle = self._options.idle_seconds / 8
        while not self._stopping.is_set():
            free = self._room()
            if free == 0:
                continue
            started, limit = time.monotonic(), min(free, CLAIM_LIMIT)
            linger = self._options.linger_ms if self._lingering and limit > 1 else 0
            jobs = self._claim(limit, linger)
            if not self._hand_out(jobs, started):  # the worker winds down without this claim's jobs
                self._give_back(jobs)
                return
            self._lingering = self._worth_lingering(jobs, time.monotonic() - started, linger, limit)
            if jobs:
                idle = self._options.idle_seconds / 8
            elif time.monotonic() - started < max(0.05, self._options.wait_seconds / 2):
                # The server answered at once with nothing: pause instead of spinning.
                self._stopping.wait(idle)
                idle = min(idle * 2, self._options.idle_seconds)

    def stop(self) -> None:
        """Claim no more; the jobs of a claim in flight are given back unrun."""
        with self._changed:  # as ``_hand_out`` decides: a claim's jobs are run or given back
            self._stopping.set()
            self._changed.notify_all()

    def wait_stopped(self) -> None:
        """Return once ``stop`` is called (or the claimer stops itself: ``fatal``)."""
        self._stopping.wait()

    def next_job(self) -> Running | None:
        """The next claimed job for a handler thread, waited for; None once the run ends."""
        running = self._jobs.get()
        if running is not None:
            with self._changed:
                self._waiting -= 1
                if not self._waiting and self._claim_due():  # the last waiting job taken
                    self._changed.notify_all()
        return running

    def finished(self, seconds: float) -> None:
        """A handler is done with its job, after ``seconds``: the outcome is reported or
        queued for sending."""
        with self._changed:
            pace = self._pace
            self._pace = seconds if pace is None else pace + _PACE_WEIGHT * (seconds - pace)
            self._busy -= 1
            if self._busy == 0 or self._claim_due():  # what the claimer and the end wait for
                self._changed.notify_all()

    def hold_room(self, count: int) -> None:
        """``count`` more jobs (negative: fewer) whose outcome waits to be sent again keep
        their room, as busy jobs do, until it is sent."""
        with self._changed:
            self._busy += count
            if self._busy == 0 or self._claim_due():
                self._changed.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        """True once no job is busy (nor waits to have its outcome sent again); waits up
        to ``timeout`` (less if stopped meanwhile)."""
        with self._changed:
            if self._busy:
                self._changed.wait(timeout)
            return self._busy == 0

    def close(self) -> None:
        """No more jobs: each handler thread's ``next_job`` answers None."""
        for _ in range(self._options.concurrency):
            self._jobs.put(None)

    def _room(self) -> int:
        """Jobs to claim: free handlers, plus the jobs to claim ahead; waits until
        a claim falls due (woken by ``next_job``, ``finished`` or ``stop``)."""
        with self._changed:
            self._changed.wait_for(lambda: self._stopping.is_set() or self._claim_due() > 0)
            return 0 if self._stopping.is_set() else self._claim_due()

    def _claim_due(self) -> int:
        """The free slots, once a claim is worth sending (0 until then); under ``_changed``.

        While claimed jobs still wait for a handler, the next claim waits until half the
        room (``concurrency`` plus the jobs claimed ahead, rounded up) is free: a worker then
        sends a few large claims instead of one for every job that finishes, and the jobs
        still waiting keep its handlers busy while the claim travels. Once no job waits,
        any free slot is claimed at once. A claim asks for at most CLAIM_LIMIT jobs, so a
        room over twice that is not filled up.
        """
        room = self._options.concurrency + self._ahead()
        free = room - self._busy
        if free <= 0 or (free < (room + 1) // 2 and self._waiting):
            return 0
        return free

    def _ahead(self) -> int:
        """Jobs to hold beyond the handlers: ``prefetch`` if given, else what the handlers
        would start within AHEAD_SECONDS at their pace (none before a job has finished),
        at most what fills one claim."""
        concurrency, prefetch = self._options.concurrency, self._options.prefetch
        if prefetch is not None:
            return prefetch
        if self._pace is None:
            return 0
        most = max(0, CLAIM_LIMIT - concurrency)
        return min(most, int(concurrency * AHEAD_SECONDS / max(self._pace, 1e-6)))

    def _worth_lingering(self, jobs: list[Job], seconds: float, linger: int, limit: int) -> bool:
        """Whether the next claim lingers: only while jobs come faster than the linger. A
        claim that did not linger shows it by bringing several jobs, or one sooner than
        ``linger_ms``; one that lingered, by coming back full or with jobs it took after
        its first. In a slow trickle a linger would catch nothing and only delay each
        job's start."""
        if linger:
            return len(jobs) == limit or len({job.claimed_at for job in jobs}) > 1
        window = self._options.linger_ms / 1000
        return len(jobs) > 1 or (len(jobs) == 1 and seconds < window)

    def _claim(self, limit: int, linger: int) -> list[Job]:
        options = self._options
        try:
            return self._client.claim(
                types=self._types,
                limit=limit,
                wait_seconds=options.wait_seconds,
                linger_ms=linger,
                lease_seconds=options.lease_seconds,
                instance=options.instance,
            )
        except QueueError as error:
            if error.status == 422 and linger:  # a server from before linger_ms refuses it
                log.warning("claim refused with linger_ms (%s); claiming without", error.detail)
                self._options = dataclasses.replace(options, linger_ms=0)
            elif error.status in (401, 403, 422):  # this worker cannot claim at all
                log.error("cannot claim jobs: %s", error.detail)
                self.fatal = error
                self.stop()
            elif not self._stopping.is_set():  # the client tried again already: pause a bit
                log.warning("claim failed (%s); trying again soon", error.detail)
                # As long as the server asked (a 429 for longer than the client waits out).
                pause = max(options.idle_seconds, error.retry_after or 0)
                self._stopping.wait(min(pause, LONGEST_PAUSE_SECONDS))
        except Exception:  # a surprise: keep going, but say so
            log.exception("claim failed")
            self._stopping.wait(options.idle_seconds)
        return []

    def _give_back(self, jobs: list[Job]) -> None:
        """Release the jobs a claim brought once the worker was stopping: other workers
        take them at once, their attempt unspent. One the server cannot be told of is
        left to its lease."""
        for job in jobs:
            try:
                self._client.release(job)
                log.info("job_id=%s released: the worker stopped before it ran", job.id)
            except QueueError as error:
                log.warning("job_id=%s left to its lease (%s)", job.id, error.detail)

    def _hand_out(self, jobs: list[Job], sent: float) -> bool:
        """Give ``jobs``, claimed by a claim ``sent`` then, to the handlers; False, handing
        out none, once stopping. Decided under the lock ``stop`` takes, so that jobs handed
        out count as busy before the wind-down looks, and none is handed out after."""
        lease = self._options.lease_seconds
        read = self._client.dependencies
        claimed = [
            Running(
                job, float(lease or job.lease_seconds or 30), claim_sent=sent, dependencies_of=read
            )
            for job in jobs
        ]
        with self._changed:
            if self._stopping.is_set():
                return False
            for running in claimed:
                self._leases.hold(running)  # before a handler can report it and release it
            self._busy += len(claimed)
            self._waiting += len(claimed)
        for running in claimed:
            self._jobs.put(running)
        return True
