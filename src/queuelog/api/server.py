"""Runs the app under uvicorn with queuelog's shutdown behaviour."""

from __future__ import annotations

import asyncio
import gc
import signal
import socket
from collections.abc import Callable
from typing import Any

import uvicorn
from fastapi import FastAPI
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

GRACEFUL_SHUTDOWN_SECONDS = 10
# Python's cyclic collector, tuned for a server (see _tune_gc): the youngest generation
# is collected every 20,000 allocations instead of 700, the middle one after every 20
# of those and the oldest after every 20 of the middle one's (instead of 10 and 10).
GC_THRESHOLDS = (20_000, 20, 20)


class _Corked:
    """A transport that sends an answer's head together with what follows it.

    uvicorn writes an answer's head and body apart: two system calls, and two
    wake-ups of the client, per answer. A write is held until the next one, which
    leaves with it at once, or until the loop's next turn if none comes; a close
    sends what is held first.
    """

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self._held: bytes | None = None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._held is None:
            self._held = bytes(data)
            asyncio.get_running_loop().call_soon(self._flush)
            return
        held, self._held = self._held, None
        self._send(held + bytes(data))

    def _flush(self) -> None:
        if self._held is not None:
            held, self._held = self._held, None
            self._send(held)

    def _send(self, data: bytes) -> None:
        if not self._transport.is_closing():
            self._transport.write(data)

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class _CorkedHttp(HttpToolsProtocol):
    """uvicorn's httptools protocol, writing through ``_Corked``."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.transport = _Corked(transport)  # type: ignore[assignment]


class _Server(uvicorn.Server):
    """Wakes long-polling claims as soon as shutdown begins, so they answer at once
    instead of holding the graceful shutdown for its whole timeout."""

    def __init__(self, config: uvicorn.Config, on_shutdown: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_shutdown = on_shutdown

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self._on_shutdown()
        await super().shutdown(sockets)


def run(app: FastAPI, host: str, port: int, access_log: bool = False) -> None:
    """Serve until SIGINT or SIGTERM; log every request only with ``access_log``.

    On SIGTERM the listening socket closes (new connections are refused),
    requests in flight finish (up to ``GRACEFUL_SHUTDOWN_SECONDS``), waiting
    claims answer ``{"jobs": []}``, the storage is closed, and the process exits 0.
    """
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level="info",
        access_log=access_log,
        http=_CorkedHttp,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
    )
    server = _Server(config, on_shutdown=app.state.queuelog.wakeup.close)
    # uvicorn re-raises the signal that stopped it once it has shut down; with
    # SIGTERM ignored by then, a graceful stop ends the process with status 0.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _tune_gc()
    server.run()


def _tune_gc() -> None:
    """Keep the cyclic collector off what serving never frees.

    Everything alive once the app is built (modules, FastAPI's routes and models,
    pydantic's validators) lives as long as the process, yet every full collection
    walked it again: under load, collections took about a tenth of the event loop's
    time. Frozen, those objects are never scanned; and with the young generation
    collected every 20,000 allocations instead of 700, a request's short-lived
    objects are mostly freed by reference counting before a collection sees them.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
