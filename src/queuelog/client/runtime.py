"""One run of a ``Worker``: a claiming loop, N handler threads, one heartbeat thread and
one thread that acknowledges completions in batches.

A job is *busy* from its claim until its handler returns (that is what ``concurrency``
counts) and *held* until the server has its outcome (heartbeats keep its lease alive until
then). Async handlers run on one event loop shared by the handler threads: the caller's
loop under ``Worker.arun``, else a loop thread of the run's own.
"""

from __future__ import annotations

import asyncio
import json
import logging
import queue
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from queuelog.client.errors import BodyTooLarge
from queuelog.client.outcome import Outcome, outcome_of_error, outcome_of_return
from queuelog.client.policy import RetryPolicy
from queuelog.client.sync import Client
from queuelog.client.types import Job
from queuelog.errors import InvalidState, NotFound, NotLeaseHolder, QueueError

log = logging.getLogger("queuelog.worker")
Handler = Callable[[Job], Any]
LOST = (InvalidState, NotLeaseHolder, NotFound)  # the lease is gone: someone else has the job
ACK_BATCH = 100
# Results in one acknowledgement stay well under the server's 1 MiB request limit; a
# batch refused as too large anyway (a server configured lower) is split and sent again.
ACK_BYTES = 512 * 1024
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
    """A held job, shared by its handler thread, the heartbeat thread and the acker."""

    job: Job
    lease: float
    started: float = field(default_factory=time.monotonic)
    next_beat: float = 0.0
    reported: bool = False  # its outcome is on its way to the server
    begun: bool = False  # a handler has started it
    abandoned: bool = False  # the shutdown deadline passed: its outcome is dropped
    future: Future[Any] | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)

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


class Run:
    """The threads of one ``Worker.run``; ``stop`` ends it gracefully."""

    RECHECK_SECONDS = 1.0  # longest wait for free slots without being woken

    def __init__(
        self,
        client: Client,
        handlers: dict[str, Handler],
        options: Options,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self.client = client
        self.handlers = handlers
        self.options = options
        self.stopping = threading.Event()
        self.deadline: float | None = None
        self.changed = threading.Condition()
        self.busy = 0
        self.waiting = 0  # claimed jobs no handler has taken yet (part of busy)
        self.held: dict[int, Running] = {}
        self.tasks: queue.SimpleQueue[Running | None] = queue.SimpleQueue()
        self.acks: queue.SimpleQueue[tuple[Running, Outcome] | None] = queue.SimpleQueue()
        self.own_loop = loop is None
        self.loop = loop or asyncio.new_event_loop()  # for async def handlers
        self.loop_thread: threading.Thread | None = None  # runs self.loop when it is its own
        self.acks_done = threading.Event()
        self.fatal: QueueError | None = None

    def stop(self, force: bool = False) -> None:
        """Stop claiming; in-flight jobs get ``shutdown_seconds`` (none if ``force``)."""
        if not self.stopping.is_set():
            self.deadline = time.monotonic() + self.options.shutdown_seconds
            self.stopping.set()
        if force:
            self.deadline = time.monotonic()
        with self.changed:
            self.changed.notify_all()

    # -- the claiming loop ------------------------------------------------------

    def run(self) -> None:
        """Claim and run jobs until stopped; then wind down. Raises a fatal claim error."""
        threads = self._start_threads()
        idle = self.options.idle_seconds / 8
        while not self.stopping.is_set():
            free = self._free_slots()
            if free == 0:
                continue
            started = time.monotonic()
            jobs = self._claim(min(free, 100))
            self._hand_out(jobs)
            if jobs:
                idle = self.options.idle_seconds / 8
            elif time.monotonic() - started < max(0.05, self.options.wait_seconds / 2):
                # The server answered at once with nothing: pause instead of spinning.
                self.stopping.wait(idle)
                idle = min(idle * 2, self.options.idle_seconds)
        self._wind_down(threads)
        if self.fatal is not None:
            raise self.fatal

    def _free_slots(self) -> int:
        """Jobs to claim: free handlers, plus ``prefetch`` jobs waiting for one; 0 to wait."""
        with self.changed:
            free = self._claim_due()
            if not free:
                # Woken when a claim falls due; the timeout is only a safety net.
                self.changed.wait(self.RECHECK_SECONDS)
            return free

    def _claim_due(self) -> int:
        """The free slots, once a claim is worth sending (0 until then); under ``changed``.

        While claimed jobs still wait for a handler, the next claim waits until half the
        room (``concurrency + prefetch``, rounded up) is free: a prefetching worker then
        sends a few large claims instead of one for every job that finishes, and the jobs
        still waiting keep its handlers busy while the claim travels. Once no job waits,
        any free slot is claimed at once. A claim asks for at most 100 jobs (the API's
        limit), so a room over 200 is not filled up.
        """
        room = self.options.concurrency + self.options.prefetch
        free = room - self.busy
        if free <= 0 or (free < (room + 1) // 2 and self.waiting):
            return 0
        return free

    def _claim(self, limit: int) -> list[Job]:
        try:
            return self.client.claim(
                types=sorted(self.handlers),
                limit=limit,
                wait_seconds=self.options.wait_seconds,
                lease_seconds=self.options.lease_seconds,
                instance=self.options.instance,
            )
        except QueueError as error:
            if error.status in (401, 403, 422):  # this worker cannot claim at all
                log.error("cannot claim jobs: %s", error.detail)
                self.fatal = error
                self.stop()
            else:  # the client already tried again (after any Retry-After): pause a bit
                log.warning("claim failed (%s); trying again soon", error.detail)
                self.stopping.wait(self.options.idle_seconds)
        except Exception:  # an answer this client cannot read: keep going, but say so
            log.exception("claim failed")
            self.stopping.wait(self.options.idle_seconds)
        return []

    def _hand_out(self, jobs: list[Job]) -> None:
        claimed = [
            Running(job, float(self.options.lease_seconds or job.lease_seconds or 30))
            for job in jobs
        ]
        with self.changed:
            self.busy += len(claimed)
            self.waiting += len(claimed)
            for running in claimed:
                self.held[running.job.id] = running
        for running in claimed:
            self.tasks.put(running)

    # -- handler threads --------------------------------------------------------

    def _handle_tasks(self) -> None:
        while (running := self.tasks.get()) is not None:
            with self.changed:
                self.waiting -= 1
                if not self.waiting and self._claim_due():  # the last waiting job taken
                    self.changed.notify_all()
            try:
                if not running.begin():  # handed back at the deadline: never run it
                    continue
                outcome = self._execute(running)
                if running.claim_report():
                    self._report(running, outcome)
            except Exception:  # never lose the slot: the lease expires and the job runs again
                log.exception("job_id=%s could not be reported", running.job.id)
                self._release(running)
            finally:
                # Only now: a slot is free once the outcome is reported or queued for the acker.
                with self.changed:
                    self.busy -= 1
                    if self.busy == 0 or self._claim_due():  # what the claimer and stop wait for
                        self.changed.notify_all()

    def _execute(self, running: Running) -> Outcome:
        handler = self.handlers[running.job.type]
        try:
            value = handler(running.job)
            if isinstance(value, Awaitable):
                value = self._await(running, value)
        except BaseException as error:  # whatever a handler raises fails its job, nothing more
            return outcome_of_error(error)
        return outcome_of_return(value)

    def _await(self, running: Running, awaitable: Awaitable[Any]) -> Any:
        async def wrapped() -> Any:
            return await awaitable

        running.future = asyncio.run_coroutine_threadsafe(wrapped(), self.loop)
        return running.future.result()

    def _report(self, running: Running, outcome: Outcome) -> None:
        if outcome.completed:
            self.acks.put((running, outcome))
            return
        try:
            self.client.fail(
                running.job,
                outcome.error or "failed",
                retryable=outcome.retryable,
                retry_in_seconds=outcome.retry_in_seconds,
            )
            log_outcome(running, outcome.label)
        except LOST as error:
            log_outcome(running, f"lost ({error.slug})", logging.WARNING)
        except QueueError as error:
            log_outcome(running, f"unreported ({error.detail})", logging.ERROR)
        self._release(running)

    def _release(self, running: Running) -> None:
        with self.changed:
            self.held.pop(running.job.id, None)

    # -- acknowledgements -------------------------------------------------------

    def _acknowledge(self) -> None:
        done = False
        while not done:
            first = self.acks.get()
            batch = [first] if first is not None else []
            while len(batch) < ACK_BATCH:  # whatever else is already waiting
                try:
                    item = self.acks.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    done = True
                    break
                batch.append(item)
            done = done or first is None
            try:
                if batch:
                    self._complete(batch)
            except Exception:  # keep acknowledging; these jobs run again when their leases end
                log.exception("completions could not be reported")
                for running, _ in batch:
                    self._release(running)

    def _complete(self, batch: list[tuple[Running, Outcome]]) -> None:
        for part in _by_size(batch):
            self._complete_part(part)

    def _complete_part(self, batch: list[tuple[Running, Outcome]]) -> None:
        try:
            items = [(r.job, o.result) for r, o in batch]
            answers = self.client.complete_many(items, return_jobs=False)
        except BodyTooLarge:
            if len(batch) > 1:  # completing is guarded by the lease token: safe to resend
                half = len(batch) // 2
                self._complete_part(batch[:half])
                self._complete_part(batch[half:])
            else:
                running = batch[0][0]
                self._report(running, Outcome(False, error="result too large", retryable=False))
            return
        except QueueError as error:
            for running, _ in batch:
                log_outcome(running, f"unreported ({error.detail})", logging.ERROR)
                self._release(running)
            return
        for (running, _), ack in zip(batch, answers, strict=True):
            if ack.ok:
                log_outcome(running, "completed")
            elif ack.error is not None and ack.error.slug == "payload-too-large":
                self._report(running, Outcome(False, error="result too large", retryable=False))
                continue
            else:
                slug = ack.error.slug if ack.error else "?"
                log_outcome(running, f"lost ({slug})", logging.WARNING)
            self._release(running)

    # -- heartbeats -------------------------------------------------------------

    def _beat(self) -> None:
        while not self.acks_done.wait(0.1):
            now = time.monotonic()
            with self.changed:
                due = [r for r in self.held.values() if r.next_beat <= now]
            for running in due:
                try:
                    self._beat_one(running)
                except Exception:  # a surprise must not end heartbeats for every other job
                    log.exception("job_id=%s heartbeat failed", running.job.id)
                    running.next_beat = time.monotonic() + min(1.0, running.lease / 6)

    def _beat_one(self, running: Running) -> None:
        try:
            self.client.heartbeat(running.job, lease_seconds=max(1, round(running.lease)))
            running.next_beat = time.monotonic() + running.lease / 3
        except LOST as error:
            log.warning("job_id=%s lost its lease (%s)", running.job.id, error.slug)
            self._release(running)
        except QueueError as error:
            log.warning("job_id=%s heartbeat failed: %s", running.job.id, error.detail)
            running.next_beat = time.monotonic() + min(1.0, running.lease / 6)

    # -- start and stop ---------------------------------------------------------

    def _start_threads(self) -> list[threading.Thread]:
        names = [f"queuelog-handler-{i}" for i in range(self.options.concurrency)]
        threads = [threading.Thread(target=self._handle_tasks, name=n, daemon=True) for n in names]
        threads.append(threading.Thread(target=self._acknowledge, name="queuelog-ack", daemon=True))
        threads.append(threading.Thread(target=self._beat, name="queuelog-heartbeat", daemon=True))
        if self.own_loop:
            self.loop_thread = threading.Thread(
                target=self.loop.run_forever, name="queuelog-loop", daemon=True
            )
            self.loop_thread.start()
        for thread in threads:
            thread.start()
        return threads

    def _wind_down(self, threads: list[threading.Thread]) -> None:
        assert self.deadline is not None
        with self.changed:
            while self.busy and time.monotonic() < self.deadline:
                self.changed.wait(min(0.5, max(0.01, self.deadline - time.monotonic())))
            late = [r for r in self.held.values() if not r.reported]
        self._abandon_all(late)
        for _ in range(self.options.concurrency):
            self.tasks.put(None)
        self.acks.put(None)
        acker, beater = threads[-2], threads[-1]
        acker.join(timeout=LATE_SECONDS)
        self.acks_done.set()
        beater.join(timeout=LATE_SECONDS)
        if self.own_loop:
            settled = asyncio.run_coroutine_threadsafe(_settle_pending(), self.loop)
            try:
                settled.result(timeout=LATE_SECONDS)
            except Exception:  # left pending: the loop is closed with it, as before
                settled.cancel()
            self.loop.call_soon_threadsafe(self.loop.stop)
            assert self.loop_thread is not None
            self.loop_thread.join(timeout=LATE_SECONDS)
            if not self.loop_thread.is_alive():
                self.loop.close()  # its own loop: closed with the run, not left to the collector

    def _abandon_all(self, late: list[Running]) -> None:
        """Hand back the jobs still running at the deadline, all at once and briefly."""
        abandoned = [r for r in late if self._abandon(r)]
        if not abandoned:
            return
        connection = self.client.connection
        reporter = Client(
            connection.url,
            connection.api_key,
            timeout=LATE_SECONDS,
            retry_policy=RetryPolicy(attempts=1),
        )
        threads = [
            threading.Thread(target=self._report_late, args=(reporter, r), daemon=True)
            for r in abandoned
        ]
        for thread in threads:
            thread.start()
        stop_at = time.monotonic() + LATE_SECONDS
        for thread in threads:
            thread.join(timeout=max(0.0, stop_at - time.monotonic()))
        reporter.close()

    def _abandon(self, running: Running) -> bool:
        with running.lock:
            if running.reported:
                return False
            running.abandoned = True
        if running.future is not None:
            running.future.cancel()
        return True

    def _report_late(self, reporter: Client, running: Running) -> None:
        try:
            if running.begun:
                reporter.fail(
                    running.job, "worker stopped before the job finished", retry_in_seconds=0
                )
                log_outcome(running, "abandoned", logging.WARNING)
            else:  # claimed ahead and never started: given back with its attempt unspent
                reporter.release(running.job)
                log_outcome(running, "released", logging.INFO)
        except Exception as error:  # left to its lease, which expires as an attempt
            log_outcome(running, f"abandoned, unreported ({error})", logging.WARNING)
        self._release(running)


async def _settle_pending() -> None:
    """On a run's own loop, before it stops: what is still pending there (a handler that
    swallowed its cancellation at the deadline) is cancelled and given until
    ``LATE_SECONDS`` to end its own way, as ``asyncio.run`` does before closing its
    loop, rather than being destroyed pending when the loop is collected."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + LATE_SECONDS
    pending = asyncio.all_tasks(loop) - {asyncio.current_task()}
    for task in pending:
        task.cancel()
    if pending:
        done, _ = await asyncio.wait(pending, timeout=LATE_SECONDS)
        for task in done:  # their outcomes were dropped with their jobs: read, not logged
            if not task.cancelled():
                task.exception()
    generators = loop.create_task(loop.shutdown_asyncgens())
    await asyncio.wait({generators}, timeout=max(0.0, deadline - loop.time()))


def _by_size(batch: list[tuple[Running, Outcome]]) -> list[list[tuple[Running, Outcome]]]:
    """``batch`` cut into parts whose results add up to at most ACK_BYTES each."""
    parts: list[list[tuple[Running, Outcome]]] = [[]]
    size = 0
    for item in batch:
        result = item[1].result
        weight = 200 + (len(json.dumps(result, ensure_ascii=False).encode()) if result else 0)
        if parts[-1] and size + weight > ACK_BYTES:
            parts.append([])
            size = 0
        parts[-1].append(item)
        size += weight
    return parts
