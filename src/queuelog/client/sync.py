"""``Client``: the blocking client. Every method sends a call built in ``calls``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from types import TracebackType
from typing import TypeVar, Unpack

from queuelog.client import calls, tracing
from queuelog.client.calls import Call, EnqueueOptions, JobRef, answer
from queuelog.client.coalesce import Coalescer
from queuelog.client.errors import ServerError
from queuelog.client.policy import BROKEN, RetryPolicy
from queuelog.client.reads import ManyReads
from queuelog.client.transport import CurlTransport, Outgoing, Transport
from queuelog.client.types import Job, JsonObject
from queuelog.client.verbs import Verbs
from queuelog.errors import QueueError, RateLimited

T = TypeVar("T")


# What the retry policy looks at before the error reaches the caller.
_RESENDABLE = (*BROKEN, ServerError, RateLimited)


class Client(Verbs[Transport, Transport]):
    """A blocking queuelog client over libcurl (see ``queuelog.client.transport``)."""

    def _open(self, transport: Transport | None) -> Transport:
        self._enqueues = Coalescer(self.send)
        return transport or CurlTransport(self.connection.url)

    def enqueue(
        self, type: str, payload: JsonObject | None = None, **options: Unpack[EnqueueOptions]
    ) -> Job:
        """Enqueue one job (``POST /jobs``). Returns the new job, or the existing one when
        the idempotency key was already used for the same request, or when an active job
        holds ``unique_key`` (kept, or given this payload with ``on_duplicate="replace"``).

        Calls made at once from several threads of this client travel together as one
        ``POST /jobs/batch``, each answered with its own job or error once it is stored
        (see ``queuelog.client.coalesce``).
        """
        return self._enqueues.enqueue(calls.enqueue_body(type, payload, **options))

    def send(self, call: Call[T]) -> T:
        """Send one call, trying again after connection failures where that is safe (an
        enqueue within its producer span, when OpenTelemetry is installed)."""
        self._check_open()
        with tracing.producing(call) as call:
            attempt = 1
            while True:
                try:
                    return self._exchange(call, self.connection.request_of(call))
                except _RESENDABLE as error:
                    policy = self.retry_policy
                    delay = policy.retry_or_raise(call, error, attempt, self.connection)
                time.sleep(delay)
                attempt += 1

    def _exchange(self, call: Call[T], request: Outgoing) -> T:
        # Resends are the retry policy's (it knows which calls are safe); no redirects.
        got = self._http.send(request)
        return answer(call, got.status, got.body, got.retry_after)

    def follow(self, reads: ManyReads[T]) -> T:
        """Send the reads of a wait (``wait``, ``result``) or a history (``events``) until
        they are over; their answer."""
        while (call := reads.next_call()) is not None:
            try:
                reads.take(self.send(call))
            except QueueError as error:
                time.sleep(reads.pause_after(error))
        return reads.finished()

    def list(
        self,
        status: str | None = None,
        type: str | None = None,
        page_size: int = 100,
        depends_on: JobRef | None = None,
    ) -> Iterator[Job]:
        """Every visible job, newest first, fetched a page at a time as it is iterated
        (with ``depends_on``: every visible job that depends on that one)."""
        cursor: str | None = None
        while True:
            page = self.send(calls.list_page(status, type, page_size, cursor, depends_on))
            yield from page.jobs
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def with_options(self, *, timeout: float, retry_policy: RetryPolicy) -> Client:
        """A client of this one's server and key, sending through this one's transport
        (its own, if it was given one), with another timeout and retry policy. Close this
        one, not the copy: the transport is this one's."""
        url, key, transport = self.connection.url, self.connection.api_key, self._http
        return Client(url, key, timeout=timeout, retry_policy=retry_policy, transport=transport)

    def close(self) -> None:
        self._closed = True
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
