"""Runs the app under uvicorn with queuelog's shutdown behaviour and connection limits."""

from __future__ import annotations

import asyncio
import gc
import logging
import signal
import socket
from collections.abc import Callable
from types import FrameType
from typing import Any

import httptools
import orjson
import uvicorn
from fastapi import FastAPI
from starlette.types import Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from queuelog.api.problems import PROBLEM_JSON, problem
from queuelog.app_state import AppState

log = logging.getLogger("queuelog.api")

GRACEFUL_SHUTDOWN_SECONDS = 10
# A connection is closed if a request's head (its line and headers) has not all come
# within this long of the connection, or of the answer before it.
HEAD_TIMEOUT_SECONDS = 10
# A longer request head is refused (400) and its connection closed.
MAX_HEAD_BYTES = 64 * 1024
_HEAD_TOO_LARGE = "Request head is too large"
# An idle connection between two requests is closed after this long.
KEEP_ALIVE_SECONDS = 5
# Python's cyclic collector, tuned for a server (see tune_gc): the youngest generation
# is collected far less often than by default, the older ones after twice as many
# collections of the one below.
GC_THRESHOLDS = (20_000, 20, 20)


class _BoundedHeads(HttpToolsProtocol):
    """uvicorn's httptools protocol, bounding a request head in time and in size.

    uvicorn's keep-alive timer stops at a request's first byte, so a client sending a
    byte now and then kept its connection, and its place under ``limit_concurrency``,
    for ever; and its httptools protocol reads a head of any size. This arms a timer
    once an answer is sent and nothing else is being served (or once the connection
    opens) and stops it when the next head is whole; and it refuses a head longer than
    ``MAX_HEAD_BYTES``, counted by its line and headers as parsed (many headers in one
    read) and by the bytes read since the parser last finished anything (an endless
    header or trailer line, which the parser holds until it ends: at most one read
    more than the bound is held).

    Every refusal of the parser is answered 400 as problem+json, after the answers of
    the requests before it on the connection (a client reads answers in order), and
    the connection is then closed.
    """

    head_timer: asyncio.TimerHandle | None = None
    limit: int | None = None  # connections or requests in flight served at once
    unparsed = 0  # bytes read since the parser last finished a head, a body piece or a message
    head_size = 0  # of the head's line and headers parsed so far
    refusal: str | None = None  # the 400 to send once the requests before it are answered

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # uvicorn refuses beyond its limit in plain text: this protocol refuses instead.
        self.limit, self.limit_concurrency = self.limit_concurrency, None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._await_head()

    def data_received(self, data: bytes) -> None:
        if self.refusal is not None:
            return  # refused: nothing more from this connection is read
        self.unparsed += len(data)
        super().data_received(data)
        if self.unparsed > MAX_HEAD_BYTES:
            self.send_400_response(_HEAD_TOO_LARGE)

    def on_message_begin(self) -> None:
        self.head_size = 0
        super().on_message_begin()

    def on_url(self, url: bytes) -> None:
        self._count_head(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count_head(len(name) + len(value) + len(b": \r\n"))
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._stop_head_timer()
        self.unparsed = 0
        if not self._over_limit():
            super().on_headers_complete()
            return
        # The request is served by the refusal instead of the app, on uvicorn's own way.
        self.app, app = _overloaded, self.app
        try:
            super().on_headers_complete()
        finally:
            self.app = app

    def on_body(self, body: bytes) -> None:
        self.unparsed = 0
        super().on_body(body)

    def on_message_complete(self) -> None:
        self.unparsed = 0
        super().on_message_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.transport.is_closing() or not self.cycle.response_complete:
            return  # closed, or a pipelined request is being served now
        if self.refusal is not None:
            self.send_400_response(self.refusal)
        else:  # also after an early answer: what is left of the body must come in time
            self._await_head()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_timer()
        super().connection_lost(exc)

    def send_400_response(self, msg: str) -> None:
        """Refuse what the parser could not take: a problem+json 400, then close."""
        if self.transport.is_closing():
            return
        if self.head_size > MAX_HEAD_BYTES:  # uvicorn names every parser error alike
            msg = _HEAD_TOO_LARGE
        self.refusal = msg
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete and not cycle.more_body:
            # What is refused comes after a whole request still being served: this is
            # sent by on_response_complete, after the answers before it.
            return
        problem = {"type": "bad-request", "title": "Bad request", "status": 400, "detail": msg}
        body = orjson.dumps(problem)
        head = [b"HTTP/1.1 400 Bad Request\r\n"]
        head += [
            name + b": " + value + b"\r\n" for name, value in self.server_state.default_headers
        ]
        head.append(b"content-type: " + PROBLEM_JSON.encode() + b"\r\n")
        head.append(b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body))
        self.transport.write(b"".join(head) + body)
        self.transport.close()

    def _over_limit(self) -> bool:
        """More connections than the limit (this one counted), or the limit's requests in
        flight already (this one's task is not made yet)."""
        limit = self.limit
        return limit is not None and (len(self.connections) > limit or len(self.tasks) >= limit)

    def _count_head(self, size: int) -> None:
        self.head_size += size
        if self.head_size > MAX_HEAD_BYTES:
            # The parser stops at a callback's exception; uvicorn answers it with 400.
            raise httptools.HttpParserError(_HEAD_TOO_LARGE)

    def _await_head(self) -> None:
        self._stop_head_timer()
        if not self.transport.is_closing():
            # uvicorn's own handler for an idle connection: it closes it.
            handler = self.timeout_keep_alive_handler
            self.head_timer = self.loop.call_later(HEAD_TIMEOUT_SECONDS, handler)

    def _stop_head_timer(self) -> None:
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None


async def _overloaded(scope: Scope, receive: Receive, send: Send) -> None:
    """The answer to a request beyond ``[server] limit_concurrency``."""
    log.warning("a request beyond limit_concurrency was refused")
    title = "Server is busy"
    detail = "The server is serving as many connections as it allows; try again shortly"
    await problem(503, "overloaded", title, detail, retry_after=1)(scope, receive, send)


class _Server(uvicorn.Server):
    """Wakes long-polling claims as soon as shutdown begins, so they answer at once
    instead of holding the graceful shutdown for its whole timeout."""

    def __init__(self, config: uvicorn.Config, on_shutdown: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_shutdown = on_shutdown

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self._on_shutdown()
        await super().shutdown(sockets)


def run(app: FastAPI, listening: socket.socket, access_log: bool = False) -> None:
    """Serve on ``listening`` (bound, not yet listening) until SIGINT or SIGTERM; log
    every request only with ``access_log``.

    At most the app's ``[server] limit_concurrency`` connections (or requests in
    flight) are served; a request beyond that is answered 503. On SIGTERM the
    listening socket closes (new connections are refused), requests in flight
    finish (up to ``GRACEFUL_SHUTDOWN_SECONDS``), waiting claims answer
    ``{"jobs": []}``, the storage is closed, and the process exits 0.
    """
    state: AppState = app.state.queuelog
    host, port = listening.getsockname()[:2]
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="info",
        access_log=access_log,
        http=_BoundedHeads,
        limit_concurrency=state.settings.server.limit_concurrency,
        timeout_keep_alive=KEEP_ALIVE_SECONDS,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
    )
    server = _Server(config, on_shutdown=state.close_waits)

    def stop(signum: int, frame: FrameType | None) -> None:
        server.should_exit = True

    # A SIGTERM that comes before uvicorn takes the signals (while the collector runs,
    # the loop starts) stops the server once it has started, instead of being lost;
    # and the one uvicorn raises again once it has shut down lands here too, so a
    # graceful stop ends the process with status 0.
    signal.signal(signal.SIGTERM, stop)
    tune_gc()
    server.run(sockets=[listening])


def tune_gc() -> None:
    """Keep the cyclic collector off what serving never frees.

    Everything alive once the app is built (modules, FastAPI's routes and models,
    pydantic's validators) lives as long as the process, yet every full collection
    walked it again, taking a share of the event loop's time under load. Frozen,
    those objects are never scanned; and with the young generation collected far less
    often (``GC_THRESHOLDS``), a request's short-lived objects are mostly freed by
    reference counting before a collection sees them.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
