"""Stand-ins for the blocking client's transport (``Client(transport=...)``): a real one
that notes what it sends, and one that answers from a script, with no server."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from queuelog.client.transport import Answer, CurlTransport, Outgoing


@dataclass(frozen=True)
class Sent:
    """One request as the client sent it."""

    method: str
    path: str
    headers: dict[str, str]
    body: bytes | None

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers.items() if k.lower() == name.lower()), None)

    def json(self) -> Any:
        return json.loads(self.body or b"null")


class Noting:
    """A real transport that notes every request before ``forward`` sends it; a test
    overrides ``forward`` to hold a request back, lose its answer or refuse it."""

    def __init__(self) -> None:
        self.sent: list[Sent] = []
        self._lock = threading.Lock()
        self._inner: CurlTransport | None = None

    def send(self, request: Outgoing) -> Answer:
        sent = Sent(request.method, urlsplit(request.url).path, request.headers, request.body)
        with self._lock:
            self.sent.append(sent)
            inner = self._inner = self._inner or CurlTransport(request.url)
        return self.forward(sent, lambda: inner.send(request))

    def forward(self, sent: Sent, send: Callable[[], Answer]) -> Answer:
        return send()

    def close(self) -> None:
        if self._inner is not None:
            self._inner.close()

    def paths(self) -> list[str]:
        with self._lock:
            return [f"{s.method} {s.path}" for s in self.sent]


def answer(status: int, body: Any = None, headers: dict[str, str] | None = None) -> Answer:
    """A scripted answer: ``body`` as JSON (``None``: no body)."""
    content = b"" if body is None else json.dumps(body).encode()
    return Answer(status, content, (headers or {}).get("Retry-After"))


class Scripted(Noting):
    """A transport that sends nothing: ``script`` answers each request (see ``answer``)."""

    def __init__(self, script: Callable[[Sent], Answer]) -> None:
        super().__init__()
        self.script = script

    def forward(self, sent: Sent, send: Callable[[], Answer]) -> Answer:
        return self.script(sent)
