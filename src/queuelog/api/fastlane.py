"""``POST /jobs`` served straight from ASGI, with the same rules and the same answers.

Enqueueing one job is the call producers make most, and FastAPI's per-request
machinery (dependency solving, the request object, the thread pool's capacity
limiter) cost more server time than the enqueue itself. This lane does only
what the route does: parse and validate the body with the route's own model,
authenticate with the key ring, take a rate-limit token, check the role, and
call the service.

Only a request that passes every check before the service is served here; any
other is handed, body and all, to the FastAPI route, so every validation and
authentication error keeps coming from one place. The service's own refusals
(unknown type, payload too large, idempotency key reused) are rendered by the
same problem handler the app uses.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import ValidationError
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from queuelog.api.deps import AppState
from queuelog.api.problems import from_error
from queuelog.api.responses import JSONResponse
from queuelog.api.routes.jobs import enqueue_answer, enqueue_spec
from queuelog.api.schemas import EnqueueRequest
from queuelog.errors import QueueError
from queuelog.models import ApiKey, Role


class _Unserved(Exception):
    """The request needs the full route (it fails a check there, with the canonical answer)."""


class FastLane:
    def __init__(self, app: ASGIApp, state: AppState, route: BaseRoute) -> None:
        self.app = app
        self.state = state
        self.route = route

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] != "/jobs":
            await self.app(scope, receive, send)
            return
        body, disconnected = await _read_body(receive)
        if disconnected:
            return
        try:
            caller, spec = self._checked(scope, body)
        except _Unserved:
            await self.app(scope, _replay(body, receive), send)
            return
        scope["route"] = self.route
        try:
            job, created = await self.state.service.enqueue(caller, spec)
        except QueueError as exc:
            await from_error(exc)(scope, receive, send)
            return
        status, headers, content = enqueue_answer(job, created, caller)
        await JSONResponse(content, status_code=status, headers=headers)(scope, receive, send)

    def _checked(self, scope: Scope, body: bytes) -> tuple[ApiKey, Any]:
        header_key = authorization = None
        for name, value in scope["headers"]:
            # The first of repeated headers counts, as in Starlette's Headers.get.
            if name == b"authorization" and authorization is None:
                authorization = value
            elif name == b"idempotency-key" and header_key is None:
                header_key = value
        if authorization is None:
            raise _Unserved
        scheme, _, token = authorization.decode("latin-1").partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise _Unserved
        try:
            # The standard parser, as the route's: orjson reads integers beyond 64 bits as
            # floats, which would store a different payload than the route does.
            request = EnqueueRequest.model_validate(json.loads(body))
            key = self.state.keys.authenticate(token)
            if not key.has(Role.PRODUCER):
                raise _Unserved
            header = header_key.decode("latin-1") if header_key is not None else None
            spec = enqueue_spec(request, header)
        except (ValueError, RecursionError, ValidationError, QueueError):
            raise _Unserved from None
        try:
            self.state.limiter.check(key.id)
        except QueueError:
            raise _Unserved from None
        return key, spec


async def _read_body(receive: Receive) -> tuple[bytes, bool]:
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return b"", True
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks), False


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
