"""LISTEN on a dedicated connection; wake this node when any node made a job ready, or
finished jobs whose results requests here await."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import psycopg

from queuelog.storage.postgres.transactions import Q

log = logging.getLogger("queuelog.storage.postgres")

CHANNEL = "queuelog_ready"
FINISHED_CHANNEL = "queuelog_finished"
APPLICATION = "queuelog-listener"
# A connection that goes silent (a network partition, a middlebox that died, a failover
# to another host at the same address) raises nothing of itself while it is only read:
# after this long without a notification the listener asks it a question, and one not
# answered within as long again is taken for dead.
PING_SECONDS = 5.0


class ReadyListener:
    """Calls its callbacks for each notification on this schema's queue.

    A notification sent while the connection was down is lost, so every
    (re)connection also calls the callbacks once: claimers look again, and the
    long poll's periodic re-check covers the rest; every request awaiting a result
    (finish callbacks called with None) looks at its job again. A connection that
    stays silent for ``ping_seconds`` is asked ``SELECT 1``; without an answer within
    ``ping_seconds`` more it is dropped and the listener reconnects.
    """

    def __init__(
        self,
        url: str,
        node: str,
        poll_seconds: float = 0.1,
        retry_seconds: float = 1.0,
        ping_seconds: float = PING_SECONDS,
    ) -> None:
        self._url = url
        self._node = node  # this node's enqueues: its service woke its own long polls
        self._poll_seconds = poll_seconds
        self._retry_seconds = retry_seconds
        self._ping_seconds = ping_seconds
        self._callbacks: list[Callable[[], None]] = []
        self._finish_callbacks: list[Callable[[Iterable[int] | None], None]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="queuelog-pg-listener", daemon=True)
        self.listening = threading.Event()

    def add(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` on each notification; once now if already listening, since
        what was notified before it came is as lost to it as a reconnection's gap."""
        self._callbacks.append(callback)
        if self.listening.is_set():
            callback()

    def add_finished(self, callback: Callable[[Iterable[int] | None], None]) -> None:
        """Call ``callback`` with the ids of the jobs each notification says finished
        (with None once now if already listening, as on each reconnection)."""
        self._finish_callbacks.append(callback)
        if self.listening.is_set():
            callback(None)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self._poll_seconds + self._ping_seconds + 5)

    def _fire(self) -> None:
        for callback in list(self._callbacks):
            try:
                callback()
            except Exception:  # one failing callback must not stop the listener
                log.exception("ready callback failed")

    def _fire_finished(self, ids: list[int] | None) -> None:
        for callback in list(self._finish_callbacks):
            try:
                callback(ids)
            except Exception:  # one failing callback must not stop the listener
                log.exception("finish callback failed")

    def _heard(self, channel: str, payload: str, schema: str | None) -> None:
        if channel == CHANNEL:
            of, _, node = payload.rpartition(":")
            if payload == schema or (of == schema and node != self._node):
                self._fire()
            return
        of, _, ids = payload.rpartition(":")
        if of == schema:
            self._fire_finished([int(i) for i in ids.split(",") if i])

    def _loop(self) -> None:
        # Said once when the connection goes (or its first try fails), not at each failed
        # try after that, and once when it is up: what to say then.
        said_when_up: str | None = None
        while not self._stop.is_set():
            try:
                self._listen(said_when_up)
            except psycopg.Error as exc:
                failure = type(exc).__name__
                if self.listening.is_set():
                    log.warning("LISTEN connection lost (%s); reconnecting", failure)
                    said_when_up = "LISTEN connection back"
                elif said_when_up is None:
                    log.warning("LISTEN connection failed (%s); trying again", failure)
                    said_when_up = "LISTEN connection made"
                self.listening.clear()
                self._stop.wait(self._retry_seconds)

    def _listen(self, said_when_up: str | None) -> None:
        with psycopg.connect(
            self._url, autocommit=True, application_name=APPLICATION, connect_timeout=10
        ) as conn:
            with self._answered(conn):  # a connection may go silent from its start
                row = conn.execute(Q["current_schema"]).fetchone()
                conn.execute(f"LISTEN {CHANNEL}")
                conn.execute(f"LISTEN {FINISHED_CHANNEL}")
            schema = row[0] if row else None
            self._fire()
            self._fire_finished(None)
            self.listening.set()
            if said_when_up is not None:
                log.warning(said_when_up)
            heard = time.monotonic()
            while not self._stop.is_set():
                for note in conn.notifies(timeout=self._poll_seconds):
                    heard = time.monotonic()
                    self._heard(note.channel, note.payload, schema)
                if time.monotonic() - heard >= self._ping_seconds:
                    with self._answered(conn):
                        conn.execute("SELECT 1")
                    heard = time.monotonic()

    @contextlib.contextmanager
    def _answered(self, conn: psycopg.Connection[Any]) -> Iterator[None]:
        """Shut the connection's socket if what runs inside has no answer within
        ``ping_seconds``, so that its wait fails (psycopg.Error) and the loop reconnects.
        A notification that comes meanwhile is kept for the next ``notifies()``."""
        # A socket of its own on the connection's: libpq may close its descriptor (a
        # broken connection) before the timer is cancelled, and the number be reused.
        with socket.socket(fileno=os.dup(conn.pgconn.socket)) as sock:
            watchdog = threading.Timer(self._ping_seconds, _shut, args=(sock,))
            watchdog.start()
            try:
                yield
            finally:
                watchdog.cancel()
                watchdog.join()


def _shut(sock: socket.socket) -> None:
    """Shut down the connection's socket (libpq still owns and closes it)."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
