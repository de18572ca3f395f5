"""What both transports share besides the calls: where the server is, which key to send,
and when a failed send is tried again."""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from typing import Any

import httpx

from queuelog._version import __version__
from queuelog.client.calls import Call
from queuelog.client.errors import ServerError, ServerUnavailable
from queuelog.errors import QueueError, RateLimited

DEFAULT_URL = "http://127.0.0.1:8000"
# Answers that mean "not now" from a proxy or a server that is starting or stopping.
_TRANSIENT_STATUS = frozenset({502, 503, 504})


@dataclass(frozen=True, slots=True)
class Connection:
    """Server address and key, from the arguments or ``QUEUELOG_URL``/``QUEUELOG_API_KEY``."""

    url: str
    api_key: str | None
    timeout: float = 10.0

    @classmethod
    def resolve(
        cls, url: str | None = None, api_key: str | None = None, timeout: float = 10.0
    ) -> Connection:
        url = url or os.environ.get("QUEUELOG_URL") or DEFAULT_URL
        api_key = api_key or os.environ.get("QUEUELOG_API_KEY") or None
        return cls(url.rstrip("/"), api_key, timeout)

    def __repr__(self) -> str:
        # Tracebacks with locals, debuggers and error trackers print reprs: no secret in it.
        key = "'***'" if self.api_key else None
        return f"Connection(url={self.shown_url!r}, api_key={key}, timeout={self.timeout!r})"

    @property
    def shown_url(self) -> str:
        """``url`` with any password in it redacted, for messages and reprs."""
        parsed = httpx.URL(self.url)
        if not parsed.password:
            return self.url
        user = parsed.userinfo.partition(b":")[0]
        return str(parsed.copy_with(userinfo=user + b":***"))

    def client_args(self) -> dict[str, Any]:
        """The arguments of an httpx client that sends to this server with this key."""
        headers = {"User-Agent": f"queuelog-python/{__version__}"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        return {"base_url": self.url, "headers": headers}

    def request_of(self, call: Call[Any]) -> dict[str, Any]:
        """The arguments of httpx's ``request`` that send ``call``."""
        return {
            "method": call.method,
            "url": call.path,
            "json": call.json,
            "params": call.params,
            "headers": call.headers,
            # A long-poll claim is answered up to wait_seconds late by design.
            "timeout": httpx.Timeout(self.timeout + call.wait_seconds, connect=self.timeout),
        }


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Sends tried again after a connection failure or a 429: ``attempts`` in all, with
    exponential backoff and jitter up to ``max_delay`` seconds (or ``Retry-After``)."""

    attempts: int = 4
    base_delay: float = 0.2
    max_delay: float = 5.0

    def delay(self, attempt: int) -> float:
        """Seconds to wait before attempt ``attempt + 1`` (``attempt`` counts from 1)."""
        ceiling = min(self.max_delay, self.base_delay * 2 ** (attempt - 1))
        return random.uniform(ceiling / 2, ceiling)

    def should_retry(self, call: Call[Any], error: Exception, attempt: int) -> bool:
        if attempt >= self.attempts:
            return False
        if isinstance(error, RateLimited):
            return True  # refused before the server did anything: safe for every call
        if isinstance(error, httpx.ConnectError | httpx.ConnectTimeout | httpx.PoolTimeout):
            return True  # the request never reached the server
        if isinstance(error, httpx.TransportError):
            return call.resend  # it may have reached the server and been acted on
        return isinstance(error, ServerError) and error.status in _TRANSIENT_STATUS and call.resend

    def retry_or_raise(
        self, call: Call[Any], error: Exception, attempt: int, conn: Connection
    ) -> float:
        """Seconds to wait before sending ``call`` again; raises when it must not be."""
        if self.should_retry(call, error, attempt):
            if isinstance(error, RateLimited):
                return max(float(error.retry_after), self.delay(attempt))
            return self.delay(attempt)
        if isinstance(error, QueueError):
            raise error
        reason = type(error).__name__
        raise ServerUnavailable(
            f"cannot reach the queuelog server at {conn.shown_url} ({reason}: {error})"
        ) from error
