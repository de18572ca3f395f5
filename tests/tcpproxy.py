"""A TCP forwarder on 127.0.0.1 that a test can cut: the database going away.

``cut()`` closes every forwarded connection and the listening socket, so the
port refuses new connections, as a stopped database's would; ``restore()``
listens on the same port again. ``stall()`` keeps the connections open now but
forwards nothing more on them, as a network partition or a dead middlebox would.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from urllib.parse import urlsplit, urlunsplit

from tests.realserver import free_port


class TcpProxy:
    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.port = free_port()
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        self._stalled: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self.restore()

    @classmethod
    def to_database(cls, url: str) -> TcpProxy:
        """A forwarder to the PostgreSQL server ``url`` names."""
        parts = urlsplit(url)
        return cls((parts.hostname or "127.0.0.1", parts.port or 5432))

    def database_url(self, url: str) -> str:
        """``url`` (to the server this forwards to) made to go through the forwarder."""
        parts = urlsplit(url)
        user = f"{parts.username}@" if parts.username else ""
        return urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{self.port}"))

    def restore(self) -> None:
        """Listen (again) on ``port`` and forward what comes."""
        listener = socket.create_server(("127.0.0.1", self.port), reuse_port=False)
        with self._lock:
            self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def cut(self) -> None:
        """Close every connection and stop listening: the port refuses from now on."""
        with self._lock:
            listener, self._listener = self._listener, None
            sockets, self._open = self._open, []
        for sock in [s for s in (listener,) if s is not None] + sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    close = cut

    def stall(self) -> None:
        """Forward nothing more on the connections open now, without closing them;
        connections made later are forwarded."""
        with self._lock:
            self._stalled.update(self._open)

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:  # cut
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                if self._listener is not listener:  # cut meanwhile
                    client.close()
                    upstream.close()
                    return
                self._open += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                pump = threading.Thread(target=_pump, args=(source, sink, self._stalled))
                pump.daemon = True
                pump.start()


def _pump(source: socket.socket, sink: socket.socket, stalled: set[socket.socket]) -> None:
    """Copy bytes one way until either side closes (drop them once ``source`` stalls)."""
    try:
        while data := source.recv(65536):
            if source not in stalled:
                sink.sendall(data)
    except OSError:
        pass
    finally:
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
