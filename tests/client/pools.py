"""Stand-ins for the blocking client's connection pool (``Client(transport=...)``): a real
pool that notes what it sends, and a pool that answers from a script, with no server."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import urllib3


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


class Noting(urllib3.PoolManager):
    """A real pool that notes every request before ``forward`` sends it; a test overrides
    ``forward`` to hold a request back, lose its answer or refuse it."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[Sent] = []
        self._lock = threading.Lock()

    def urlopen(
        self, method: str, url: str, redirect: bool = True, **kw: Any
    ) -> urllib3.BaseHTTPResponse:
        sent = Sent(method, urlsplit(url).path, dict(kw.get("headers") or {}), kw.get("body"))
        with self._lock:
            self.sent.append(sent)
        return self.forward(sent, lambda: super(Noting, self).urlopen(method, url, redirect, **kw))

    def forward(
        self, sent: Sent, send: Callable[[], urllib3.BaseHTTPResponse]
    ) -> urllib3.BaseHTTPResponse:
        return send()

    def paths(self) -> list[str]:
        with self._lock:
            return [f"{s.method} {s.path}" for s in self.sent]


def answer(status: int, body: Any = None, headers: dict[str, str] | None = None) -> Any:
    """A scripted answer: ``body`` as JSON (``None``: no body)."""
    content = b"" if body is None else json.dumps(body).encode()
    return urllib3.HTTPResponse(content, headers=headers or {}, status=status)


class Scripted(Noting):
    """A pool that sends nothing: ``script`` answers each request (see ``answer``)."""

    def __init__(self, script: Callable[[Sent], urllib3.BaseHTTPResponse]) -> None:
        super().__init__()
        self.script = script

    def forward(
        self, sent: Sent, send: Callable[[], urllib3.BaseHTTPResponse]
    ) -> urllib3.BaseHTTPResponse:
        return self.script(sent)
