"""ASGI middleware: limits enforced before any work is done, and the last word on an
unexpected failure."""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Mapping

from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from queuelog.api.problems import internal_problem, problem
from queuelog.failures import log_internal_error

log = logging.getLogger("queuelog.api")

_WITH_BODY = {"POST", "PUT", "PATCH"}


class _TooLarge(StarletteHTTPException):
    """Raised while the body streams in; an HTTPException so the app answers it as 413."""

    def __init__(self) -> None:
        super().__init__(413)


async def _send_problem(
    send: Send, status: int, slug: str, title: str, headers: tuple[tuple[bytes, bytes], ...] = ()
) -> None:
    """The app's own problem answer, sent before the app has seen the request."""
    response = problem(status, slug, title)
    raw = [*response.raw_headers, *headers]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": response.body})


def first_headers(scope: Scope) -> dict[bytes, bytes]:
    """A request's headers by name; of repeated ones, the first, as Starlette reads them."""
    headers: dict[bytes, bytes] = {}
    for name, value in scope["headers"]:
        headers.setdefault(name, value)
    return headers


def _encoded(scope: Scope) -> bool:
    """Whether any Content-Encoding header names a coding (gzip, br...): the body would
    not be the JSON it is read as, and a proxy that decodes it would see another request."""
    for name, value in scope["headers"]:
        if name == b"content-encoding":
            codings = {c.strip().lower() for c in value.split(b",")}
            if codings - {b"", b"identity"}:
                return True
    return False


def is_json_media(content_type: bytes) -> bool:
    """True for ``application/json`` and ``application/*+json``, parameters aside."""
    media = content_type.split(b";")[0].strip().lower()
    return media == b"application/json" or (
        media.startswith(b"application/") and media.endswith(b"+json")
    )


class HttpMiddleware(ABC):
    """A pure ASGI middleware of HTTP requests: ``handle`` sees each of them; anything
    else (the lifespan, a websocket) passes straight through."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self.handle(scope, receive, send)

    @abstractmethod
    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one HTTP request through ``self.app``."""


class Answer:
    """Watches the answer the app sends through ``send``: its status once it has begun
    (None before; a middleware may still send an answer of its own then)."""

    def __init__(self, send: Send) -> None:
        self._send = send
        self.status: int | None = None

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
        await self._send(message)


class BodyLimitMiddleware(HttpMiddleware):
    """413 for bodies over ``max_bytes`` (before parsing); 415 for non-JSON bodies and
    content-encoded ones.

    Paths under ``form_prefixes`` (the dashboard) may post HTML forms.
    """

    def __init__(self, app: ASGIApp, max_bytes: int, form_prefixes: tuple[str, ...] = ()):
        super().__init__(app)
        self.max_bytes = max_bytes
        self.form_prefixes = form_prefixes

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] not in _WITH_BODY:
            await self.app(scope, receive, send)
            return
        headers = first_headers(scope)
        length = headers.get(b"content-length")
        if length is not None and (not length.isdigit() or int(length) > self.max_bytes):
            await _send_problem(send, 413, "body-too-large", "Request body is too large")
            return
        has_body = length not in (None, b"0") or b"transfer-encoding" in headers
        if has_body and not self._media_ok(scope["path"], headers.get(b"content-type", b"")):
            await _send_problem(
                send, 415, "unsupported-media-type", "Request body must be application/json"
            )
            return
        if has_body and _encoded(scope):
            # RFC 9110: 415 names an unsupported content coding too, with the codings taken.
            title = "Request body must not be content-encoded (Content-Encoding)"
            await _send_problem(
                send, 415, "unsupported-media-type", title, ((b"accept-encoding", b"identity"),)
            )
            return
        if length is not None and b"transfer-encoding" not in headers:
            # A declared length within the limit is all the server reads of this
            # request (the HTTP parser frames the body by it): nothing left to count.
            # With Transfer-Encoding too, some parsers frame by chunks: count those.
            await self.app(scope, receive, send)
            return
        await self._guarded(scope, receive, send)

    def _media_ok(self, path: str, content_type: bytes) -> bool:
        if is_json_media(content_type):
            return True
        media = content_type.split(b";")[0].strip().lower()
        forms = (b"application/x-www-form-urlencoded", b"multipart/form-data")
        return (
            media in forms and path.startswith(self.form_prefixes) if self.form_prefixes else False
        )

    async def _guarded(self, scope: Scope, receive: Receive, send: Send) -> None:
        received = 0
        answer = Answer(send)

        async def counting_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise _TooLarge
            return message

        try:
            await self.app(scope, counting_receive, answer.send)
        except _TooLarge:
            if answer.status is None:
                await _send_problem(send, 413, "body-too-large", "Request body is too large")


class InternalErrorMiddleware(HttpMiddleware):
    """An unexpected failure becomes the 500 ``internal`` problem here.

    It is logged once, within ``failures.py``'s bounds, and not raised further: raised,
    Starlette's outermost layer would raise it again after answering, and uvicorn would
    log the whole traceback and close the client's keep-alive connection.
    """

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        answer = Answer(send)
        try:
            await self.app(scope, receive, answer.send)
        except Exception as exc:
            log_internal_error(log, exc, scope["method"], scope["path"])
            if answer.status is None:  # else the server ends the half-sent answer
                await internal_problem()(scope, receive, send)


class PathHeadersMiddleware(HttpMiddleware):
    """Adds ``headers`` to every answer under ``prefix`` that lacks them: the dashboard's
    security headers, on its pages and on what the router or the middleware answer there
    (405, 413, 415) alike."""

    def __init__(self, app: ASGIApp, prefix: str, headers: Mapping[str, str]) -> None:
        super().__init__(app)
        self.prefix = prefix
        self.raw = [(name.lower().encode(), value.encode()) for name, value in headers.items()]

    async def handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope["path"]
        if path != self.prefix and not path.startswith(self.prefix + "/"):
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                present = {name.lower() for name, _ in message.get("headers", [])}
                added = [(name, value) for name, value in self.raw if name not in present]
                message = {**message, "headers": [*message.get("headers", []), *added]}
            await send(message)

        await self.app(scope, receive, with_headers)
