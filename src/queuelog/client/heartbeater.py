"""The heartbeater: keeps the lease of every held job alive until the server has its
outcome, from threads of its own: one finds the heartbeats due, a few send them."""

from __future__ import annotations

import queue
import threading
import time

from queuelog.client.errors import BodyTooLarge
from queuelog.client.running import LOST, Running, log
from queuelog.client.sync import Client
from queuelog.errors import PayloadTooLarge, QueueError, ValidationFailed

TICK_SECONDS = 0.1  # how often due heartbeats are looked for
# Heartbeats sent at once, so that one whose answer is slow, or that waits out a 429's
# Retry-After, holds up no other job's renewal (whose lease would run out meanwhile).
SENDERS = 8
# A heartbeat refused for its progress (larger than the server takes): sent again as it
# is, it would be refused again until the lease ran out.
REFUSED_FOR_WHAT_IT_CARRIED = (ValidationFailed, PayloadTooLarge, BodyTooLarge)


class Heartbeater:
    """The jobs a run holds, each renewed every third of its lease until released."""

    def __init__(self, client: Client) -> None:
        self._client = client
        self._lock = threading.Lock()
        self._held: dict[int, Running] = {}
        self._sending: set[Running] = set()  # whose heartbeat is on its way
        self._due: queue.SimpleQueue[Running | None] = queue.SimpleQueue()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._beat, name="queuelog-heartbeat", daemon=True)
        self._senders = [
            threading.Thread(target=self._send_due, name=f"queuelog-heartbeat-{n}", daemon=True)
            for n in range(SENDERS)
        ]

    def hold(self, running: Running) -> None:
        """Keep ``running``'s lease alive from now on."""
        with self._lock:
            self._held[running.job.id] = running

    def release(self, running: Running) -> None:
        """Stop renewing ``running``'s lease: its outcome reached the server, or it is lost.
        Only that claim's: the same job claimed again since (its lease had run out while
        the outcome waited for the server) keeps its heartbeats."""
        with self._lock:
            if self._held.get(running.job.id) is running:
                del self._held[running.job.id]

    def unreported(self) -> list[Running]:
        """The held jobs whose outcome is not on its way to the server yet."""
        with self._lock:
            return [r for r in self._held.values() if not r.reported]

    def start(self) -> None:
        self._thread.start()
        for sender in self._senders:
            sender.start()

    def finish(self, until: float) -> None:
        """Stop renewing leases (heartbeats queued are not sent); wait for those in
        flight until ``until`` (``time.monotonic``)."""
        self._done.set()
        self._thread.join(timeout=max(0.0, until - time.monotonic()))
        for _ in self._senders:
            self._due.put(None)
        for sender in self._senders:
            sender.join(timeout=max(0.0, until - time.monotonic()))

    def _beat(self) -> None:
        while not self._done.wait(TICK_SECONDS):
            now = time.monotonic()
            with self._lock:
                due = [r for r in self._held.values() if r.next_beat <= now]
                due = [r for r in due if r not in self._sending]
                self._sending.update(due)
            for running in due:
                self._due.put(running)

    def _send_due(self) -> None:
        while (running := self._due.get()) is not None:
            try:
                if self._still_held(running):
                    self._beat_one(running)
            except Exception:  # a surprise must not end heartbeats for every other job
                log.exception("job_id=%s heartbeat failed", running.job.id)
                running.next_beat = time.monotonic() + min(1.0, running.lease / 6)
            finally:
                with self._lock:
                    self._sending.discard(running)

    def _still_held(self, running: Running) -> bool:
        """Whether ``running``'s lease is still to be renewed: not released since its
        heartbeat was queued, and the run not finishing."""
        with self._lock:
            return not self._done.is_set() and self._held.get(running.job.id) is running

    def _beat_one(self, running: Running) -> None:
        progress = running.take_progress()
        # The server renews the lease when it takes the heartbeat, no earlier than now:
        # the next one is timed from here, not from the answer, which may come late.
        sent = time.monotonic()
        try:
            lease = max(1, round(running.lease))
            self._client.heartbeat(running.job, lease_seconds=lease, progress=progress)
            running.renewed(sent)
        except LOST as error:
            # Once its outcome is on its way the lease ends with it: the acknowledger says
            # what became of the outcome. A job no handler has started is not started now:
            # the server gives it to another worker.
            begun = running.lose()
            if not running.reported:
                said = "lost its lease" if begun else "lost its lease before it ran: not run"
                log.warning("job_id=%s %s (%s)", running.job.id, said, error.slug)
            self.release(running)
        except QueueError as error:
            log.warning("job_id=%s heartbeat failed: %s", running.job.id, error.detail)
            if not isinstance(error, REFUSED_FOR_WHAT_IT_CARRIED):
                running.keep_progress(progress)
            # else the lease is renewed soon, without that progress
            running.next_beat = time.monotonic() + min(1.0, running.lease / 6)
