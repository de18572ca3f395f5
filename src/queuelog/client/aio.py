"""``AsyncClient``: the asyncio client. Every method sends a call built in ``calls``."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Callable, Coroutine
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, TypeVar

import httpx

from queuelog.client import calls
from queuelog.client.calls import Call, answer
from queuelog.client.errors import ServerError
from queuelog.client.policy import Connection, RetryPolicy
from queuelog.client.types import Job
from queuelog.errors import RateLimited

P = ParamSpec("P")
T = TypeVar("T")


def _sends(
    build: Callable[P, Call[T]],
) -> Callable[Concatenate[AsyncClient, P], Coroutine[Any, Any, T]]:
    """A coroutine method that builds a call with ``build`` and sends it."""

    @functools.wraps(build)
    async def method(self: AsyncClient, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self.send(build(*args, **kwargs))

    return method


class AsyncClient:
    """An asyncio queuelog client over httpx; the same methods as ``Client``, awaited.

    Args:
        url: Server address; default ``$QUEUELOG_URL``, else ``http://127.0.0.1:8000``.
        api_key: The key to send; default ``$QUEUELOG_API_KEY``.
        timeout: Seconds per request (a long-poll claim gets its ``wait_seconds`` on top).
        retry_policy: When a send that failed is tried again (see ``RetryPolicy``).
        transport: An httpx async transport to send through (tests, proxies).
    """

    def __init__(
        self,
        url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 10.0,
        retry_policy: RetryPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.connection = Connection.resolve(url, api_key, timeout)
        self.retry_policy = retry_policy or RetryPolicy()
        self._http = httpx.AsyncClient(
            base_url=self.connection.url,
            headers=self.connection.headers(),
            transport=transport,
        )

    async def send(self, call: Call[T]) -> T:
        """Send one call, trying again after connection failures where that is safe."""
        attempt = 1
        while True:
            try:
                response = await self._http.request(
                    call.method,
                    call.path,
                    json=call.json,
                    params=call.params,
                    headers=call.headers,
                    timeout=self.connection.timeout_for(call),
                )
                return answer(call, response)
            except (httpx.HTTPError, ServerError, RateLimited) as error:
                delay = self.retry_policy.retry_or_raise(call, error, attempt, self.connection)
            await asyncio.sleep(delay)
            attempt += 1

    async def list(
        self, status: str | None = None, type: str | None = None, page_size: int = 100
    ) -> AsyncIterator[Job]:
        """Every visible job, newest first, fetched a page at a time as it is iterated."""
        cursor: str | None = None
        while True:
            page = await self.send(calls.list_page(status, type, page_size, cursor))
            for job in page.jobs:
                yield job
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    enqueue = _sends(calls.enqueue)
    enqueue_many = _sends(calls.enqueue_many)
    get = _sends(calls.get)
    list_page = _sends(calls.list_page)
    events = _sends(calls.events)
    cancel = _sends(calls.cancel)
    retry = _sends(calls.retry)
    claim = _sends(calls.claim)
    heartbeat = _sends(calls.heartbeat)
    release = _sends(calls.release)
    complete = _sends(calls.complete)
    complete_many = _sends(calls.complete_many)
    fail = _sends(calls.fail)
    create_key = _sends(calls.create_key)
    list_keys = _sends(calls.list_keys)
    revoke_key = _sends(calls.revoke_key)
    list_types = _sends(calls.list_types)
    pause_type = _sends(calls.pause_type)
    resume_type = _sends(calls.resume_type)

    async def aclose(self) -> None:
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
