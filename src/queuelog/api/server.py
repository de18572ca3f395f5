"""Runs the app under uvicorn with queuelog's shutdown behaviour."""

from __future__ import annotations

import signal
import socket
from collections.abc import Callable

import uvicorn
from fastapi import FastAPI

GRACEFUL_SHUTDOWN_SECONDS = 10


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
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS,
    )
    server = _Server(config, on_shutdown=app.state.queuelog.wakeup.close)
    # uvicorn re-raises the signal that stopped it once it has shut down; with
    # SIGTERM ignored by then, a graceful stop ends the process with status 0.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    server.run()
