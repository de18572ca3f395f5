"""``Worker``: register a handler per job type, then ``run`` claims and runs jobs.

```python
worker = Worker(concurrency=4)

@worker.handler("send_email")
def send_email(job: Job) -> dict[str, Any]:
    ...  # return the result; raise Retry(after=60) or Fail("reason") to choose the failure,
    ...  # or Snooze(30) to give the job back unrun for 30 s (its attempt not spent)
```
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import os
import re
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from queuelog.client.acknowledger import Acknowledger
from queuelog.client.claimer import Claimer
from queuelog.client.handlers import Handlers
from queuelog.client.heartbeater import Heartbeater
from queuelog.client.running import LATE_SECONDS, Handler, Options
from queuelog.client.signals import stopped_by_signals
from queuelog.client.sync import Client

H = TypeVar("H", bound=Handler)
# While jobs come quickly, a worker's claims linger this long for more by default: with one
# producer enqueueing job by job, fewer claims and acknowledgements per job leave the
# server more time for the producer (docs/performance.md).
LINGER_MS = 10


def _check(handlers: dict[str, Handler], client: object, verb: str) -> None:
    """Refuse a run that could not start, before it takes the process's signals."""
    if not handlers:
        raise ValueError(f"register at least one handler before {verb}()")
    if client is not None and not isinstance(client, Client):
        # The worker's threads block on their client: an AsyncClient hands back coroutines.
        raise TypeError(f"a Worker runs on a Client, not {type(client).__name__}")


def default_instance() -> str:
    """``<host>-<pid>``, cut to what the API accepts: ``[A-Za-z0-9._-]{1,64}``."""
    host = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname()) or "host"
    pid = str(os.getpid())
    return f"{host[: 63 - len(pid)]}-{pid}"


def _on_a_thread(
    loop: asyncio.AbstractEventLoop, target: Callable[[], None]
) -> asyncio.Future[None]:
    """``target`` run on a thread of its own (in this context, as ``asyncio.to_thread``
    would); a future on ``loop`` of its end. Not on the loop's default executor: a run
    holds its thread as long as it runs, so with the executor's few threads taken (by
    other runs, or a handler's ``to_thread``) a run would never start, or its async
    handlers would wait for a thread behind it."""
    ended: asyncio.Future[None] = loop.create_future()

    def settle(error: BaseException | None) -> None:
        if ended.done():
            return
        if error is None:
            ended.set_result(None)
        else:
            ended.set_exception(error)

    def run() -> None:
        error: BaseException | None = None
        try:
            target()
        except BaseException as raised:  # the run's own error, raised by arun
            error = raised
        # A loop closed meanwhile (under a program that left its arun) awaits no answer.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(settle, error)

    context = contextvars.copy_context()
    threading.Thread(target=context.run, args=(run,), name="queuelog-run").start()
    return ended


class Run:
    """One ``Worker.run``: the claimer, the handler threads, the acknowledger and the
    heartbeater, started together and wound down in order; ``stop`` ends it gracefully."""

    def __init__(
        self,
        client: Client,
        handlers: dict[str, Handler],
        options: Options,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self.options = options
        self.deadline: float | None = None  # once stopping: when running jobs are handed back
        self._stopped_at: float | None = None  # when stopping began
        self._failed: BaseException | None = None  # by the claimer's thread
        self.leases = Heartbeater(client)
        self.claimer = Claimer(client, sorted(handlers), options, self.leases)
        self.acknowledger = Acknowledger(client, self.leases, self.claimer.hold_room)
        self.handlers = Handlers(handlers, self.claimer, self.acknowledger, self.leases, loop)

    def stop(self, force: bool = False) -> None:
        """Stop claiming; in-flight jobs get ``shutdown_seconds`` (none if ``force``)."""
        if self.deadline is None:
            self._stopped_at = time.monotonic()
            self.deadline = self._stopped_at + self.options.shutdown_seconds
        if force:
            self.deadline = time.monotonic()
        self.claimer.stop()

    def run(self) -> None:
        """Claim and run jobs until stopped; then wind down. Raises a fatal claim error."""
        self.handlers.start(self.options.concurrency)
        self.acknowledger.start()
        self.leases.start()
        # Claims go from a thread of their own: a claim held by a server that does not
        # answer would keep this thread, the one signals are handled on, from stopping.
        claiming = threading.Thread(target=self._claim, name="queuelog-claim", daemon=True)
        claiming.start()
        self.claimer.wait_stopped()  # the claimer also stops by itself, when it cannot claim
        self.stop()
        late = self._wind_down()
        # A long poll in flight gives its jobs back when it ends: wait as long as the server
        # may hold it from when stopping began, and the giving back at least to the end of
        # the late period, no longer (a server that does not answer leaves them to their
        # leases).
        assert self._stopped_at is not None
        held = self.options.wait_seconds + self.options.linger_ms / 1000 + 1
        claiming.join(timeout=max(0.0, max(self._stopped_at + held, late) - time.monotonic()))
        if self._failed is not None:
            raise self._failed
        if self.claimer.fatal is not None:
            raise self.claimer.fatal

    def _claim(self) -> None:
        try:
            self.claimer.run()
        except BaseException as error:  # raised by ``run`` once the worker has wound down
            self._failed = error
        finally:
            self.claimer.stop()

    def _wind_down(self) -> float:
        """Let running jobs finish until the deadline, then hand back the rest; when the
        late period ends."""
        assert self.deadline is not None
        while (left := self.deadline - time.monotonic()) > 0:
            step = min(0.5, max(0.01, left))
            # Done once no job runs and every outcome has reached the server.
            if self.claimer.wait_idle(step) and self.acknowledger.wait_sent(step):
                break
        # One late period for everything left, however many requests hang on the server.
        late = time.monotonic() + LATE_SECONDS
        abandoned = self.acknowledger.abandon(self.leases.unreported())
        # No outcome comes after that: the last ones go while the late reports do.
        self.acknowledger.close()
        self.claimer.close()
        self.acknowledger.hand_back(abandoned, until=late)
        self.acknowledger.finish(until=late)
        self.leases.finish(until=late)
        self.handlers.finish(until=late)
        return late


class Worker:
    """Runs handlers for claimed jobs, keeps their leases alive and reports their outcome.

    Args:
        concurrency: Jobs run at once, each on its own thread (``async def`` handlers share
            one event loop). Claims fetch up to the free slots in one request.
        prefetch: Jobs claimed ahead, waiting for a free handler. The next claim's round
            trip then overlaps the handlers' work, and claims are bigger. By default the
            worker claims ahead what its handlers would start within ``AHEAD_SECONDS``
            (``queuelog.client.claimer``) at the pace they have been finishing jobs, up
            to a claim of 100 jobs: many ahead for short jobs, none for long ones (and
            none until the first jobs have finished). A number fixes it (0: none). While
            jobs wait, the next claim waits until half of the room (``concurrency`` and
            the jobs ahead) is free. Waiting jobs hold their leases (kept alive by
            heartbeats); on stopping they run within ``shutdown_seconds`` like the
            others, and those not started by then are released unrun, their attempt
            unspent.
        wait_seconds: How long a claim may wait on the server for a job (long-poll, 0 to 30).
        linger_ms: Once a claim holds a job but has room for more, how long the server
            goes on taking jobs for it as they become ready (0 to 1,000): a stream of
            jobs then comes in fewer claims and acknowledgements, each job starting at
            most that much later. Claims linger only while the last claim shows jobs
            coming faster than that, so a slow trickle's jobs are not delayed. 0 never
            lingers.
        lease_seconds: Lease to claim with (1 to 3600); default the job type's. Heartbeats renew it
            every third of the lease while the handler runs.
        instance: Names this process in ``worker_id`` (``<key name>/<instance>``); default
            ``<host>-<pid>``.
        shutdown_seconds: After SIGTERM/SIGINT or ``stop``, how long running jobs may take
            to finish. Those still running then are failed as retryable; the run returns
            about ``LATE_SECONDS`` (``queuelog.client.running``) after this deadline at
            most, or once a claim still out has had its long poll, even if the server hangs.
        idle_seconds: Longest pause between claims when the server answers at once with
            nothing to do.
    """

    def __init__(
        self,
        *,
        concurrency: int = 4,
        prefetch: int | None = None,
        wait_seconds: float = 5.0,
        linger_ms: int = LINGER_MS,
        lease_seconds: int | None = None,
        instance: str | None = None,
        shutdown_seconds: float = 30.0,
        idle_seconds: float = 1.0,
    ) -> None:
        self.handlers: dict[str, Handler] = {}
        self.options = Options(
            concurrency=concurrency,
            prefetch=prefetch,
            wait_seconds=wait_seconds,
            linger_ms=linger_ms,
            lease_seconds=lease_seconds,
            instance=instance or default_instance(),
            shutdown_seconds=shutdown_seconds,
            idle_seconds=idle_seconds,
        )
        self._run: Run | None = None
        self._stop_requested = threading.Event()
        self._signals_seen = 0

    def handler(self, job_type: str) -> Callable[[H], H]:
        """Decorator: run the function (sync or ``async def``) for jobs of ``job_type``."""

        def register(function: H) -> H:
            if job_type in self.handlers:
                raise ValueError(f"a handler for {job_type!r} is already registered")
            self.handlers[job_type] = function
            return function

        return register

    def configure(self, **changes: Any) -> None:
        """Change options after construction (the CLI's ``--concurrency``, for example)."""
        self.options = dataclasses.replace(self.options, **changes)

    def run(
        self, client: Client | None = None, *, url: str | None = None, api_key: str | None = None
    ) -> None:
        """Claim and run jobs until ``stop``, SIGTERM or SIGINT; returns once wound down.

        Raises the claim's error if this worker cannot claim at all (bad key, forbidden or
        unknown job type).
        """
        _check(self.handlers, client, "run")
        with stopped_by_signals(self._on_signal):
            self._serve(client, url, api_key)

    def _serve(
        self,
        client: Client | None,
        url: str | None,
        api_key: str | None,
        loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        own = client is None
        client = client or Client(url, api_key, timeout=30.0)
        self._run = Run(client, self.handlers, self.options, loop)
        try:
            if self._stop_requested.is_set():
                self._run.stop()
            self._run.run()
        finally:
            self._run = None
            self._stop_requested.clear()
            self._signals_seen = 0
            if own:
                client.close()

    async def arun(
        self, client: Client | None = None, *, url: str | None = None, api_key: str | None = None
    ) -> None:
        """``run`` from asyncio: ``async def`` handlers run on the caller's event loop, so
        they may use its resources; the rest of the worker runs on threads meanwhile.
        SIGTERM and SIGINT stop it as in ``run``; so does cancelling the awaiting task."""
        _check(self.handlers, client, "arun")
        loop = asyncio.get_running_loop()
        # Acted on by the loop, not inside whatever the signal interrupted.
        with stopped_by_signals(lambda: loop.call_soon_threadsafe(self._on_signal)):
            serving = _on_a_thread(loop, lambda: self._serve(client, url, api_key, loop))
            try:
                await asyncio.shield(serving)
            except asyncio.CancelledError:
                await self._wound_down(serving)
                raise

    async def _wound_down(self, serving: asyncio.Future[None]) -> None:
        """``arun`` cancelled: stop, and await the run's end (running jobs may finish on
        this loop within ``shutdown_seconds``). Cancelled again, it stops at once, as on a
        second signal, and is still awaited: returned earlier, arun would leave its threads
        reporting without it, and its jobs' async handlers to the end of the loop."""
        self.stop()
        while not serving.done():
            try:
                await asyncio.shield(serving)
            except asyncio.CancelledError:
                self.stop(force=True)
        serving.result()  # the run's own error, if it failed as it stopped

    def _on_signal(self) -> None:
        self._signals_seen += 1
        self.stop(force=self._signals_seen > 1)  # a second signal: do not wait any longer

    def stop(self, force: bool = False) -> None:
        """Stop claiming and let running jobs finish (``force``: fail them now)."""
        self._stop_requested.set()
        if self._run is not None:
            self._run.stop(force)
