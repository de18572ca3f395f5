"""The acknowledger: reports every outcome to the server. Completions go in batches from a
thread of its own, failures at once from the handler's thread, and at the shutdown
deadline the jobs still running are handed back.

An outcome the server could not be reached for (down, restarting, answering 503) is sent
again from the acknowledger's thread, after a pause that grows, until the server has it,
answers that the lease is gone, or the run ends: its job stays held meanwhile, so its
lease is renewed as soon as the server answers again, and a finished job is not run a
second time because the server was away for longer than one send's own retries."""

from __future__ import annotations

import dataclasses
import json
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from queuelog.client import calls
from queuelog.client.calls import Call
from queuelog.client.errors import BodyTooLarge
from queuelog.client.heartbeater import Heartbeater
from queuelog.client.outcome import Outcome
from queuelog.client.policy import RetryPolicy, answer_lost, unreachable
from queuelog.client.running import LATE_SECONDS, LOST, Running, log, log_outcome
from queuelog.client.sync import Client
from queuelog.client.types import Acknowledged
from queuelog.errors import QueueError

ACK_BATCH = 100
# Results in one acknowledgement stay well under the server's 1 MiB request limit; a
# batch refused as too large anyway (a server configured lower) is split and sent again.
ACK_BYTES = 512 * 1024
Done = tuple[Running, Outcome]
# Pauses before outcomes the server could not be reached for are sent again: doubling
# from the first to the last (each send has tried a few times already).
RESEND_PAUSES = (0.5, 5.0)


def _next_pause(pause: float | None) -> float:
    return RESEND_PAUSES[0] if pause is None else min(pause * 2, RESEND_PAUSES[1])


class Acknowledger:
    """Sends outcomes; a job is released from ``leases`` once the server has its own.

    ``hold_room`` is told how many more (or, negative, fewer) jobs have an outcome that
    waits to be sent again: they keep their room in the claimer, so a worker whose
    outcomes cannot reach the server claims no more jobs to hold beside them, and its
    wind-down waits for them as for running jobs.
    """

    def __init__(
        self, client: Client, leases: Heartbeater, hold_room: Callable[[int], None]
    ) -> None:
        self._client = client
        self._leases = leases
        self._hold_room = hold_room
        self._acks: queue.SimpleQueue[Done | None] = queue.SimpleQueue()
        self._closing = threading.Lock()
        self._closed = False  # ``close`` was called: nothing more is queued
        self._sent = threading.Condition()
        self._unsent = 0  # outcomes queued, or waiting to be sent again
        # The thread's batch, sent or waiting behind a send, not yet settled (under
        # ``_sent``): said unreported should the run end first.
        self._unsettled: set[Running] = set()
        self._thread = threading.Thread(target=self._acknowledge, name="queuelog-ack", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        """Queue no more outcomes: the thread sends those still waiting (once more, those
        the server could not be reached for), then ends."""
        with self._closing:
            if not self._closed:
                self._closed = True
                self._acks.put(None)

    def finish(self, until: float) -> None:
        """``close``, and wait for the outcomes still waiting to go until ``until``
        (``time.monotonic``)."""
        self.close()
        self._thread.join(timeout=max(0.0, until - time.monotonic()))
        with self._sent:
            unanswered = list(self._unsettled)
        for running in unanswered:  # a server that takes requests and never answers
            said = "unreported (no answer from the server before the worker stopped)"
            log_outcome(running, said, logging.ERROR)
        for running, _ in self._take_queued():  # behind a send that had no answer
            said = "unreported (queued behind a send the server never answered)"
            log_outcome(running, said, logging.ERROR)
            self._leases.release(running)

    def _take_queued(self) -> list[Done]:
        """The outcomes still queued, taken from the thread (which, should it ever get
        an answer, then finds only the end of the run)."""
        taken: list[Done] = []
        while True:
            try:
                item = self._acks.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                taken.append(item)
        self._acks.put(None)
        self._count_unsent(-len(taken))
        return taken

    def wait_sent(self, timeout: float) -> bool:
        """True once every outcome queued has been sent (or given up); waits up to
        ``timeout``."""
        with self._sent:
            return self._sent.wait_for(lambda: self._unsent <= 0, timeout)

    def report(self, running: Running, outcome: Outcome) -> None:
        """A completion joins the next batch; a failure or a snooze is sent now (and, if
        the server cannot be reached, again from the acknowledger's thread)."""
        if outcome.completed or not self._report_one(running, outcome):
            self._queue(running, outcome)

    def _queue(self, running: Running, outcome: Outcome) -> None:
        with self._closing:
            if not self._closed:
                self._count_unsent(1)
                self._acks.put((running, outcome))
                return
        log_outcome(running, "unreported (the worker has stopped)", logging.ERROR)
        self._leases.release(running)

    def _settled(self, done: list[Done]) -> None:
        """``done``, of the thread's batch, is sent, given up, or deferred to the next."""
        with self._sent:
            self._unsettled.difference_update(running for running, _ in done)

    def _report_one(self, running: Running, outcome: Outcome) -> bool:
        """Send a failure or a snooze; False when the server could not be reached."""
        if outcome.snooze_seconds is not None:
            call: Call[Any] = calls.release(running.job, delay_seconds=outcome.snooze_seconds)
        else:
            error = outcome.error or "failed"
            retry_in = outcome.retry_in_seconds
            call = calls.fail(
                running.job, error, retryable=outcome.retryable, retry_in_seconds=retry_in
            )
        try:
            self._client.send(dataclasses.replace(call, again=lambda: _unconfirmed([running])))
            log_outcome(running, outcome.label)
        except LOST as error:
            self._said_lost(running, outcome, error.slug)
        except QueueError as error:
            if unreachable(error):
                if answer_lost(error):
                    _unconfirmed([running])
                return False
            log_outcome(running, f"unreported ({error.detail})", logging.ERROR)
        self._leases.release(running)
        return True

    @staticmethod
    def _said_lost(running: Running, outcome: Outcome, slug: str) -> None:
        """Log an outcome the server refused as its job no longer held by this worker."""
        if slug in ("invalid-state", "not-lease-holder") and running.unconfirmed:
            # A delivery whose answer was lost most likely did it (the job may even have
            # been claimed again since: a retry or a snooze without delay).
            log_outcome(running, f"{outcome.label}, unconfirmed (sent again: no longer running)")
        else:
            log_outcome(running, f"lost ({slug})", logging.WARNING)

    # -- completions ------------------------------------------------------------

    def _acknowledge(self) -> None:
        deferred: list[Done] = []  # the server could not be reached for these
        pause: float | None = None  # before they are sent again
        done = False
        while not done:
            batch, done = self._gather(pause)
            batch = deferred + batch
            try:
                unsent = self._send(batch)
            except Exception:  # keep acknowledging; these jobs run again when their leases end
                log.exception("completions could not be reported")
                for running, _ in batch:
                    self._leases.release(running)
                unsent = []
            self._hold_room(len(unsent) - len(deferred))
            self._count_unsent(len(unsent) - len(batch))
            deferred = unsent
            pause = _next_pause(pause) if deferred else None
            if deferred and not done:
                log.warning(
                    "%d outcome(s) could not reach the server; sending them again in %.1f s",
                    len(deferred), pause,
                )  # fmt: skip
        for running, _ in deferred:  # the run is over: left to their leases
            log_outcome(running, "unreported (the server could not be reached)", logging.ERROR)
            self._leases.release(running)
        self._count_unsent(-len(deferred))

    def _count_unsent(self, change: int) -> None:
        with self._sent:
            self._unsent += change
            if self._unsent <= 0:
                self._sent.notify_all()

    def _gather(self, pause: float | None) -> tuple[list[Done], bool]:
        """The outcomes to send next, and whether the run is over: without a ``pause``,
        the next to come and whatever else waits already; with one, all that come within
        it (outcomes wait for the server with those it could not be reached for)."""
        deadline = None if pause is None else time.monotonic() + pause
        batch: list[Done] = []
        while len(batch) < ACK_BATCH:
            if deadline is None:
                timeout = None if not batch else 0.0
            else:
                timeout = max(0.0, deadline - time.monotonic())
            try:
                item = (
                    self._acks.get(timeout=timeout) if timeout != 0.0 else self._acks.get_nowait()
                )
            except queue.Empty:
                break
            if item is None:
                return batch, True
            batch.append(item)
        return batch, False

    def _send(self, batch: list[Done]) -> list[Done]:
        """Report ``batch``: what the server could not be reached for, to send again. Once
        one send finds it away, the rest waits for the next try instead of each trying."""
        with self._sent:
            self._unsettled.update(running for running, _ in batch)
        again: list[Done] = []
        try:
            for done in [done for done in batch if not done[1].completed]:
                if again or not self._report_one(*done):
                    again.append(done)
                self._settled([done])
            for part in _parts([done for done in batch if done[1].completed]):
                again += part if again else self._complete(part)
                self._settled(part)
        finally:  # all settled, unless a surprise (logged) left the batch to its leases
            self._settled(batch)
        return again

    def _complete(self, batch: list[Done]) -> list[Done]:
        """Complete ``batch``; what the server could not be reached for, to send again."""
        held = [r for r, _ in batch]
        try:
            items = [(r.job, o.result) for r, o in batch]
            call = calls.complete_many(items, return_jobs=False)
            call = dataclasses.replace(call, again=lambda: _unconfirmed(held))
            answers = self._client.send(call)
        except BodyTooLarge:
            if len(batch) > 1:  # completing is guarded by the lease token: safe to resend
                half = len(batch) // 2
                return self._complete(batch[:half]) + self._complete(batch[half:])
            self._too_large(batch[0][0])
            return []
        except QueueError as error:
            if unreachable(error):
                if answer_lost(error):
                    _unconfirmed(held)
                return batch
            for running, _ in batch:
                log_outcome(running, f"unreported ({error.detail})", logging.ERROR)
                self._leases.release(running)
            return []
        for (running, outcome), ack in zip(batch, answers, strict=True):
            self._settle(running, outcome, ack)
        return []

    def _settle(self, running: Running, outcome: Outcome, ack: Acknowledged) -> None:
        slug = ack.error.slug if ack.error else "?"
        if ack.ok:
            log_outcome(running, "completed")
        elif slug == "payload-too-large":
            self._too_large(running)
            return
        else:
            self._said_lost(running, outcome, slug)
        self._leases.release(running)

    def _too_large(self, running: Running) -> None:
        self.report(running, Outcome(False, error="result too large", retryable=False))

    # -- at the shutdown deadline -------------------------------------------------

    @staticmethod
    def abandon(late: list[Running]) -> list[Running]:
        """Give up the jobs whose outcome was not reported by the deadline: none of them
        reports one after this."""
        abandoned = [r for r in late if r.abandon()]
        # Every job is given up before any async handler is cancelled: the thread a
        # cancel frees would otherwise start a job claimed ahead not given up yet.
        for running in abandoned:
            running.cancel()
        return abandoned

    def hand_back(self, abandoned: list[Running], until: float) -> None:
        """Hand back the ``abandoned`` jobs, all at once, each reported by ``until``
        (``time.monotonic``) or left to its lease."""
        if not abandoned:
            return
        # The worker's own transport (an application's certificates or routes may be in
        # it), with a short timeout and one try each.
        reporter = self._client.with_options(
            timeout=LATE_SECONDS, retry_policy=RetryPolicy(attempts=1)
        )
        threads = [
            threading.Thread(target=self._report_late, args=(reporter, r), daemon=True)
            for r in abandoned
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=max(0.0, until - time.monotonic()))

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
        self._leases.release(running)


def _unconfirmed(held: list[Running]) -> None:
    """``held``'s outcomes were sent and the answer lost: they may have landed."""
    for running in held:
        running.unconfirmed = True


def _parts(batch: list[Done]) -> list[list[Done]]:
    """``batch`` cut into parts the server takes in one acknowledgement: at most ACK_BATCH
    outcomes (outcomes sent again join the next ones, so a batch may hold more), whose
    results add up to at most ACK_BYTES."""
    parts: list[list[Done]] = []
    size = 0
    for item in batch:
        result = item[1].result
        weight = 200 + (len(json.dumps(result, ensure_ascii=False).encode()) if result else 0)
        if not parts or size + weight > ACK_BYTES or len(parts[-1]) == ACK_BATCH:
            parts.append([])
            size = 0
        parts[-1].append(item)
        size += weight
    return parts
