"""Group commit on the client: ``Client.enqueue`` calls made at once by threads of one
process (a web app's pool) travel together as one ``POST /jobs/batch``.

A call that finds no enqueue of its client on the way sends its job alone
(``POST /jobs``), as a single call always did; so does a call made inside a trace
(OpenTelemetry), since a request carries one trace context, and a call that names
items of its own batch. Calls made while one is on the way
queue up; when it is answered, the first of them sends the whole queue (up to 500
jobs) as one batch for all, and the next queue waits for that one. Every call is
answered only once the request holding its job is answered: its own job, stored.

A batch is all or nothing, but each call keeps its own answer: a batch the server
refuses as a whole (one job of a type it does not know, a priority the key may not
use, too large a body) is sent again job by job, so each call gets its own job or its
own error; so is a batch with a body that is not JSON (nothing of it was sent). Each job
carries its own idempotency key, so a job whose batch was stored after all is found by
that resend, never made twice. A server that cannot take it for now (unreachable, 502,
503, 504, 507, 429), after the client's own tries, is the error of every call of the
batch.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from queuelog.client import calls, tracing
from queuelog.client.calls import Call
from queuelog.client.policy import unreachable
from queuelog.client.types import Job, JsonObject
from queuelog.errors import QueueError

BATCH_LIMIT = 500  # the API's most jobs per batch
# What serialising a body that is not JSON raises (NaN, a set, a lone surrogate).
NOT_JSON = (TypeError, ValueError)


class _Call:
    """One caller's job, and its answer once it is in."""

    def __init__(self, body: JsonObject) -> None:
        self.body = body
        self.job: Job | None = None
        self.error: BaseException | None = None
        self.batch: list[_Call] | None = None  # set when this caller sends for a queue
        self.woken = threading.Event()  # answered, or given a batch to send

    def answer(self) -> Job:
        if self.error is not None:
            raise self.error
        assert self.job is not None
        return self.job


class Coalescer:
    """Sends the enqueues of one client, alone or together (see the module)."""

    def __init__(self, send: Callable[[Call[Any]], Any]) -> None:
        self._send = send
        self._lock = threading.Lock()
        self._queue: list[_Call] = []
        self._on_the_way = False  # a request of these enqueues is being sent

    def enqueue(self, body: JsonObject) -> Job:
        """Enqueue the job of ``body`` (from ``calls.enqueue_body``); the stored job."""
        me = _Call(body)
        # Indices into its own batch, or a trace context of its own (a batch carries one,
        # its sender's): such a job never travels in another caller's request.
        if "depends_on_items" in body or tracing.in_a_trace():
            self._send_alone(me)
            return me.answer()
        with self._lock:
            if self._on_the_way:
                self._queue.append(me)
            else:
                self._on_the_way = True
                me.batch = [me]
        if me.batch is None:
            self._await_turn(me)
        if me.batch is not None:
            try:
                self._send_batch(me.batch)
            finally:
                self._hand_over()
        return me.answer()

    def _await_turn(self, me: _Call) -> None:
        """Wait until answered, or given a batch to send. A caller interrupted meanwhile
        (a signal's exception, Ctrl-C) leaves its queue, or hands on the batch it was
        just given, so that no other call waits for it; one already in another caller's
        batch is answered there, though no one hears it."""
        try:
            me.woken.wait()
        except BaseException:
            with self._lock:
                queued = me in self._queue
                if queued:
                    self._queue.remove(me)
                batch, me.batch = me.batch, None
            if not queued and batch is not None:
                self._pass_on([c for c in batch if c is not me])
            raise

    def _pass_on(self, batch: list[_Call]) -> None:
        """``batch`` goes to its first caller to send; none left: the next queue does."""
        if not batch:
            self._hand_over()
            return
        with self._lock:
            batch[0].batch = batch
        batch[0].woken.set()

    def _hand_over(self) -> None:
        """The next queue goes to its first caller to send, or nothing is on the way."""
        with self._lock:
            if not self._queue:
                self._on_the_way = False
                return
            batch, self._queue = self._queue[:BATCH_LIMIT], self._queue[BATCH_LIMIT:]
            batch[0].batch = batch
        batch[0].woken.set()

    def _send_batch(self, batch: list[_Call]) -> None:
        try:
            if len(batch) == 1:
                self._send_alone(batch[0])
                return
            try:
                answers = self._send(calls.enqueue_many(c.body for c in batch))
            except QueueError as error:
                if unreachable(error):
                    # Not now, after the client's own tries: alone, each would try again.
                    for c in batch:
                        c.error = error
                else:  # refused as a whole, or its answer not read: each alone, its own
                    self._send_each_alone(batch)  # (their keys find jobs stored)
            except NOT_JSON:  # a body that is not JSON: each alone, its own error
                self._send_each_alone(batch)
            else:
                for c, answer in zip(batch, answers, strict=True):
                    c.job = answer.job
        except BaseException as error:  # never leave a caller waiting
            for c in batch:
                if c.job is None and c.error is None:
                    c.error = error
            raise
        finally:
            for c in batch:
                c.woken.set()

    def _send_each_alone(self, batch: list[_Call]) -> None:
        for c in batch:
            self._send_alone(c)

    def _send_alone(self, caller: _Call) -> None:
        try:
            caller.job = self._send(calls.enqueue_job(caller.body))
        except (QueueError, *NOT_JSON) as error:
            caller.error = error
