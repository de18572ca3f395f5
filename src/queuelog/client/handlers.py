"""The handler threads of a run: each takes a claimed job, runs its handler and has the
outcome reported. Async handlers run on one event loop shared by the threads: the
caller's loop under ``Worker.arun``, else a loop thread of the run's own."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable
from typing import Any

from queuelog.client import tracing
from queuelog.client.acknowledger import Acknowledger
from queuelog.client.claimer import Claimer
from queuelog.client.heartbeater import Heartbeater
from queuelog.client.outcome import Outcome, outcome_of_error, outcome_of_return
from queuelog.client.running import Handler, Running, log

_MOMENT = 0.1  # seconds an idle event loop surely needs to run what it is sent


class Handlers:
    """``concurrency`` threads running ``handlers`` for the jobs ``claimer`` hands out."""

    def __init__(
        self,
        handlers: dict[str, Handler],
        claimer: Claimer,
        acknowledger: Acknowledger,
        leases: Heartbeater,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self._handlers = handlers
        self._claimer = claimer
        self._acknowledger = acknowledger
        self._leases = leases
        self._own_loop = loop is None
        self._loop = loop or asyncio.new_event_loop()
        self._loop_thread = threading.Thread(
            target=self._loop.run_forever, name="queuelog-loop", daemon=True
        )
        # The jobs a handler of this run is in, each with the event set once it is out:
        # a job claimed again (its lease lost while its handler went on) waits for it.
        self._in_hand: dict[int, threading.Event] = {}
        self._in_hand_lock = threading.Lock()

    def start(self, concurrency: int) -> None:
        if self._own_loop:
            self._loop_thread.start()
        for i in range(concurrency):
            name = f"queuelog-handler-{i}"
            threading.Thread(target=self._handle_jobs, name=name, daemon=True).start()

    def finish(self, until: float) -> None:
        """Close the run's own loop (the caller's is left alone), once what is pending on
        it has ended or at ``until`` (``time.monotonic``)."""
        if not self._own_loop:
            return
        # The loop settles and stops at once unless a handler blocks it: it gets a
        # moment for each even once ``until`` has passed.
        settled = asyncio.run_coroutine_threadsafe(_settle_pending(until), self._loop)
        try:
            settled.result(timeout=max(_MOMENT, until - time.monotonic()))
        except Exception:  # left pending: the loop is closed with it, as before
            settled.cancel()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._loop_thread.join(timeout=max(_MOMENT, until - time.monotonic()))
        if not self._loop_thread.is_alive():
            self._loop.close()  # its own loop: closed with the run, not left to the collector

    def _handle_jobs(self) -> None:
        while (running := self._claimer.next_job()) is not None:
            started = time.monotonic()
            out = self._take_turn(running)
            try:
                if not running.begin():  # handed back at the deadline, or its lease lost
                    continue
                outcome = self._execute(running)
                running.ran = time.monotonic() - started
                if running.claim_report():
                    self._acknowledger.report(running, outcome)
            except Exception:  # never lose the slot: the lease expires and the job runs again
                log.exception("job_id=%s could not be reported", running.job.id)
                self._leases.release(running)
            finally:
                if out is not None:
                    with self._in_hand_lock:
                        del self._in_hand[running.job.id]
                    out.set()
                # Only now: a slot is free once the outcome is reported or queued for sending.
                self._claimer.finished(time.monotonic() - started)

    def _take_turn(self, running: Running) -> threading.Event | None:
        """Wait while another handler of this run is still in ``running``'s job (a claim
        whose lease was lost, the server having given the job out again): the same job
        never runs twice at once here. The event to set once out of it; None if the job
        was given up meanwhile (at the deadline, or its new lease lost too)."""
        job_id = running.job.id
        while True:
            with self._in_hand_lock:
                before = self._in_hand.get(job_id)
                if before is None:
                    out = self._in_hand[job_id] = threading.Event()
                    return out
            if running.abandoned or running.lost:
                return None
            before.wait(_MOMENT)  # its lease is renewed meanwhile, as a waiting job's

    def _execute(self, running: Running) -> Outcome:
        """The handler's outcome; run within its consumer span, when traced."""
        with tracing.processing(running.job) as span:
            outcome, error = self._run(running)
            span.ended(outcome, error)
        return outcome

    def _run(self, running: Running) -> tuple[Outcome, BaseException | None]:
        handler = self._handlers[running.job.type]
        try:
            value = handler(running.job)
            if isinstance(value, Awaitable):
                value = self._await(running, value)
        except BaseException as error:  # whatever a handler raises fails its job, nothing more
            return outcome_of_error(error), error
        return outcome_of_return(value), None

    def _await(self, running: Running, awaitable: Awaitable[Any]) -> Any:
        async def wrapped() -> Any:
            try:
                return await awaitable
            except (SystemExit, KeyboardInterrupt) as raised:
                # asyncio lets these out of its loop, ending it for every async handler:
                # carried out as an ordinary error, they fail this job alone.
                raise _Exited(raised) from None

        running.future = asyncio.run_coroutine_threadsafe(wrapped(), self._loop)
        try:
            return running.future.result()
        except _Exited as exited:
            raise exited.raised from None


class _Exited(Exception):
    """A SystemExit or KeyboardInterrupt an async handler raised, on its way out of the
    loop (see ``Handlers._await``)."""

    def __init__(self, raised: BaseException) -> None:
        super().__init__(raised)
        self.raised = raised


async def _settle_pending(until: float) -> None:
    """On a run's own loop, before it stops: what is still pending there (a handler that
    swallowed its cancellation at the deadline) is cancelled and given until ``until``
    (``time.monotonic``) to end its own way, as ``asyncio.run`` does before closing its
    loop, rather than being destroyed pending when the loop is collected."""
    loop = asyncio.get_running_loop()
    pending = asyncio.all_tasks(loop) - {asyncio.current_task()}
    for task in pending:
        task.cancel()
    if pending:
        done, _ = await asyncio.wait(pending, timeout=max(0.0, until - time.monotonic()))
        for task in done:  # their outcomes were dropped with their jobs: read, not logged
            if not task.cancelled():
                task.exception()
    generators = loop.create_task(loop.shutdown_asyncgens())
    await asyncio.wait({generators}, timeout=max(0.0, until - time.monotonic()))
