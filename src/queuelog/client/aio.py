"""``AsyncClient``: the asyncio client. Every method sends a call built in ``calls``."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator
from types import TracebackType
from typing import TypeVar

import httpx

from queuelog.client import calls, tracing
from queuelog.client.calls import Call, JobRef, answer
from queuelog.client.errors import ServerError
from queuelog.client.reads import ManyReads
from queuelog.client.transport import KEPT_CONNECTIONS, Outgoing, trusted_certificates
from queuelog.client.types import Job
from queuelog.client.verbs import Verbs
from queuelog.errors import QueueError, RateLimited

T = TypeVar("T")
# What ``Client`` asks for: JSON, sent as it is. httpx would ask for gzip or deflate, and
# read an answer in a coding it cannot decode as a broken connection ("cannot reach").
_ASKED = {"Accept": "application/json", "Accept-Encoding": "identity"}


class AsyncClient(Verbs[httpx.AsyncClient, httpx.AsyncBaseTransport]):
    """An asyncio queuelog client over httpx; the same methods as ``Client``, awaited.

    Like the httpx client under it, one belongs to the event loop it is used on: a
    program with several loops (``asyncio.run`` called again, threads each with their
    own) makes one per loop, or uses ``Client``, which any thread may share."""

    def _open(self, transport: httpx.AsyncBaseTransport | None) -> httpx.AsyncClient:
        # As many connections as calls in flight, as ``Client`` opens: a wait holds its
        # connection while the server holds its read (up to 30 s), so httpx's cap of 100
        # would queue every other call behind a crowd of waits, and overrun their timeouts.
        limits = httpx.Limits(max_connections=None, max_keepalive_connections=KEPT_CONNECTIONS)
        # The certificates ``Client`` trusts: ``ssl``'s default store, or both
        # ``SSL_CERT_FILE`` and ``SSL_CERT_DIR``. httpx's own is certifi's bundle alone
        # (the system's store unread), or only the first of the two variables set.
        cafile, capath = trusted_certificates()
        trust = ssl.create_default_context(cafile=cafile or None, capath=capath or None)
        return httpx.AsyncClient(transport=transport, limits=limits, headers=_ASKED, verify=trust)

    async def send(self, call: Call[T]) -> T:
        """Send one call, trying again after connection failures where that is safe (an
        enqueue within its producer span, when OpenTelemetry is installed)."""
        self._check_open()
        with tracing.producing(call) as call:
            attempt = 1
            while True:
                try:
                    return await self._exchange(call, self.connection.request_of(call))
                except (httpx.HTTPError, ServerError, RateLimited) as error:
                    policy = self.retry_policy
                    delay = policy.retry_or_raise(call, error, attempt, self.connection)
                await asyncio.sleep(delay)
                attempt += 1

    async def _exchange(self, call: Call[T], request: Outgoing) -> T:
        # The whole answer within the connect and read timeouts, as libcurl's deadline
        # for ``Client``: httpx's read timeout bounds each read, which every byte of an
        # answer that trickles in starts again.
        deadline = request.connect_timeout + request.read_timeout
        whole = asyncio.timeout(deadline)
        try:
            async with whole:
                outgoing = self._http.build_request(
                    request.method,
                    request.url,
                    content=request.body,
                    headers=request.headers,
                    # Each read may take the whole deadline, as libcurl's does for
                    # ``Client``: an answer that comes late but within it is taken.
                    timeout=httpx.Timeout(deadline, connect=request.connect_timeout),
                )
                response = await self._http.send(outgoing, stream=True)
                try:
                    # The body as it came, as libcurl reads it for ``Client``: one in a
                    # coding (a proxy's gzip) is an answer that is not JSON, not undone.
                    content = b"".join([chunk async for chunk in response.aiter_raw()])
                finally:
                    await response.aclose()
        except TimeoutError:
            if not whole.expired():
                raise
            raise httpx.ReadTimeout(f"no whole answer within {deadline:g} s") from None
        return answer(call, response.status_code, content, response.headers.get("Retry-After"))

    async def follow(self, reads: ManyReads[T]) -> T:
        """Send the reads of a wait (``wait``, ``result``) or a history (``events``) until
        they are over; their answer."""
        while (call := reads.next_call()) is not None:
            try:
                reads.take(await self.send(call))
            except QueueError as error:
                await asyncio.sleep(reads.pause_after(error))
        return reads.finished()

    async def list(
        self,
        status: str | None = None,
        type: str | None = None,
        page_size: int = 100,
        depends_on: JobRef | None = None,
    ) -> AsyncIterator[Job]:
        """Every visible job, newest first, fetched a page at a time as it is iterated
        (with ``depends_on``: every visible job that depends on that one)."""
        cursor: str | None = None
        while True:
            page = await self.send(calls.list_page(status, type, page_size, cursor, depends_on))
            for job in page.jobs:
                yield job
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def aclose(self) -> None:
        self._closed = True
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
