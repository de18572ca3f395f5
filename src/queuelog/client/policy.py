"""What both transports share besides the calls: where the server is, which key to send,
and when a failed send is tried again."""

from __future__ import annotations

import json
import math
import os
import random
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

import httpx

from queuelog._version import __version__
from queuelog.client.calls import Call
from queuelog.client.errors import ServerError, ServerUnavailable
from queuelog.client.transport import NoAnswer, NotSent, Outgoing
from queuelog.errors import QueueError, RateLimited

DEFAULT_URL = "http://127.0.0.1:8000"
# Answers that mean "not now": from a proxy, a server that is starting or stopping, or
# one whose database cannot take the request for now (503, or 507 for lack of space).
TRANSIENT_STATUS = frozenset({502, 503, 504, 507})
# Seconds of a 429's Retry-After the client waits out before sending again; a longer
# wait is the caller's to decide: RateLimited is raised, with its retry_after.
LONGEST_RATE_WAIT = 300
# The failures of either client's HTTP library (libcurl's for ``Client``, httpx for
# ``AsyncClient``) where the request never reached the server...
NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout, NotSent)
# ... and every failure of the connection (those above, and those after which it may
# have reached it).
BROKEN = (httpx.TransportError, NoAnswer)


def unreachable(error: QueueError) -> bool:
    """Whether ``error`` says the server could not take the request for now (down, busy,
    restarting, its database away), so the same request may be sent again later."""
    if isinstance(error, ServerError):
        return error.status in TRANSIENT_STATUS
    return isinstance(error, ServerUnavailable | RateLimited)


def server_url(url: str) -> str:
    """``url``, if it can name a queuelog server: http:// or https:// with a host (and a
    port within range), and no query or fragment; ValueError otherwise. libcurl would
    speak FTP, or read a local file, for a URL of another scheme."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises for a port out of range or not a number
    except ValueError:
        parts = None
    if parts is None or parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise ValueError("the server URL must be an http:// or https:// URL with a host")
    if "?" in url or "#" in url:  # each call's path and query would follow it
        raise ValueError("the server URL must not carry a query (?) or a fragment (#)")
    if not _visible_ascii(url):  # libcurl takes ASCII only, and a line break splits a request
        raise ValueError(
            "the server URL must be visible ASCII, with no space or line break: percent-encode "
            "the other characters (an international host name in its xn-- form)"
        )
    return url


def api_key_of(key: str | None) -> str | None:
    """``key``, if an ``Authorization`` header can carry it: visible ASCII, with no space
    or line break (one would split the header, or add another). ValueError otherwise,
    quoting none of it: it is a secret."""
    if key is not None and not _visible_ascii(key):
        raise ValueError("the API key must be visible ASCII, with no space or line break")
    return key


def seconds_ok(value: object, most: float | None = None) -> bool:
    """Whether ``value`` is a finite number of seconds from 0 (to ``most``): what the
    SDK's times take (a bool is none; a negative or NaN one fails only once waited on)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return False
    return math.isfinite(value) and value >= 0 and (most is None or value <= most)


def timeout_of(timeout: float) -> float:
    """``timeout`` if it is seconds to wait, more than none and finite; else ValueError
    (libcurl takes whole milliseconds: nan and inf failed each call, 0 gave it one)."""
    if not seconds_ok(timeout) or timeout == 0:
        raise ValueError(f"timeout must be a finite number of seconds above 0, not {timeout!r}")
    return timeout


def _visible_ascii(text: str) -> bool:
    return text.isascii() and text.isprintable() and " " not in text


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
        url = server_url(url or os.environ.get("QUEUELOG_URL") or DEFAULT_URL)
        api_key = api_key_of(api_key or os.environ.get("QUEUELOG_API_KEY") or None)
        return cls(url.rstrip("/"), api_key, timeout_of(timeout))

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

    def request_of(self, call: Call[Any]) -> Outgoing:
        """The request that sends ``call`` to this server with this key."""
        headers = {"User-Agent": f"queuelog-python/{__version__}", **call.headers}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        body = None
        if call.json is not None:
            body = json.dumps(call.json, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
            headers["Content-Type"] = "application/json"
        params = call.params
        if call.remaining is not None and "wait_seconds" in params:
            # Sent again, a wait's read is held no longer than the wait has left.
            left = max(0.0, min(call.wait_seconds, call.remaining()))
            params = {**params, "wait_seconds": round(left, 3)}
        query = f"?{urlencode(params)}" if params else ""
        # A long-poll claim is answered up to wait_seconds late by design.
        return Outgoing(
            call.method,
            f"{self.url}{call.path}{query}",
            headers,
            body.encode() if body is not None else None,
            connect_timeout=self.timeout,
            read_timeout=self.timeout + call.wait_seconds,
            resend=call.resend,
        )


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """Sends tried again after a connection failure, a 429 or an answer that means "not
    now" (``TRANSIENT_STATUS``): ``attempts`` in all, with exponential backoff and jitter up
    to ``max_delay`` seconds. The answer's ``Retry-After`` is the least wait: a 429's as it
    is (up to ``LONGEST_RATE_WAIT``, past which it is raised), another's up to
    ``max_delay`` (a proxy may ask for an hour)."""

    attempts: int = 4
    base_delay: float = 0.2
    max_delay: float = 5.0

    def __post_init__(self) -> None:
        # Checked here: a policy is read only once a send fails, and then a negative or
        # NaN delay made the client's sleep raise from inside the call.
        if not (isinstance(self.attempts, int) and not isinstance(self.attempts, bool)):
            raise ValueError(f"attempts must be a whole number, not {self.attempts!r}")
        if self.attempts < 1:
            raise ValueError("attempts must be 1 or more (1: no second try)")
        for name in ("base_delay", "max_delay"):
            if not seconds_ok(getattr(self, name)):
                raise ValueError(f"{name} must be a finite number of seconds, 0 or more")

    def delay(self, attempt: int) -> float:
        """Seconds to wait before attempt ``attempt + 1`` (``attempt`` counts from 1)."""
        ceiling = min(self.max_delay, self.base_delay * 2 ** (attempt - 1))
        return random.uniform(ceiling / 2, ceiling)

    def should_retry(self, call: Call[Any], error: Exception, attempt: int) -> bool:
        if attempt >= self.attempts:
            return False
        if isinstance(error, RateLimited):
            # Refused before the server did anything: safe for every call, after the wait
            # it asks for, unless that is longer than a call should hang (a proxy's hour).
            return error.retry_after <= LONGEST_RATE_WAIT
        if isinstance(error, NOT_SENT):
            return True  # the request never reached the server
        if isinstance(error, BROKEN):
            # It may have reached the server and been acted on; or it was held for as
            # long as the server could hold it: a wait's read, after the wait's time.
            return call.resend and not (call.remaining is not None and call.remaining() <= 0)
        return isinstance(error, ServerError) and error.status in TRANSIENT_STATUS and call.resend

    def retry_or_raise(
        self, call: Call[Any], error: Exception, attempt: int, conn: Connection
    ) -> float:
        """Seconds to wait before sending ``call`` again; raises when it must not be."""
        if self.should_retry(call, error, attempt):
            pause = self._pause(error, attempt)
            # A wait's read is not sent after its wait is over: the wait reads again.
            if call.remaining is None or pause < call.remaining():
                if call.again is not None and answer_lost(error):
                    call.again()
                return pause
        if isinstance(error, QueueError):
            raise error
        reason = type(error).__name__
        raise ServerUnavailable(
            f"cannot reach the queuelog server at {conn.shown_url} ({reason}: {error})"
        ) from error

    def _pause(self, error: Exception, attempt: int) -> float:
        """Seconds to wait before attempt ``attempt + 1``: the backoff, or the answer's
        Retry-After if longer (a 5xx's up to ``max_delay``)."""
        if isinstance(error, RateLimited):
            return max(float(error.retry_after), self.delay(attempt))
        if isinstance(error, ServerError) and error.retry_after is not None:
            return max(min(float(error.retry_after), self.max_delay), self.delay(attempt))
        return self.delay(attempt)


def answer_lost(error: BaseException) -> bool:
    """Whether the request may have been acted on with no answer back: a connection that
    broke once it was on its way (an answer, even a 503, says what was done), also as
    the cause of the ServerUnavailable a client raises once its tries are spent."""
    cause = error.__cause__ if isinstance(error, ServerUnavailable) else error
    return isinstance(cause, BROKEN) and not isinstance(cause, NOT_SENT)
