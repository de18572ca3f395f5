"""The three hottest routes served straight from ASGI, with the same rules and answers.

``POST /jobs``, ``POST /jobs/claim`` and ``POST /jobs/batch/complete`` are the
calls producers and workers make most, and FastAPI's per-request machinery
(dependency solving, the request object, the thread pool's capacity limiter)
cost more server time than the work itself. A lane does only what its route
does: parse and validate the body with the route's own model, authenticate
with the key ring, check the role, take a rate-limit token, and call the same
service method and answer builder as the route.

Only a request that passes every check before the service is served here; any
other is handed, body and all, to the FastAPI route, so every validation and
authentication error keeps coming from one place. The service's own refusals
(unknown type, payload too large, idempotency key reused, ...) are rendered by
the same problem handler the app uses. The routes stay the documented
operations: the lanes change how a request is served, not what it means.

The lanes sit in front of the app's whole middleware stack (``App`` in
``api/app.py``), so a lane's request skips those layers too; a lane does their
part itself: it serves only a body whose declared length is within the limit
and which has a content type, or none at all (any other is handed over unread,
for the app's own 413 or 415); it counts the request under its route's name;
and it answers an unexpected failure with the app's 500 problem, its cause
logged for operators.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from queuelog.api.metrics import Metrics
from queuelog.api.middleware import first_headers, is_json_media
from queuelog.api.problems import from_error, internal_problem
from queuelog.api.responses import JSONResponse
from queuelog.api.routes.claims import (
    claim_answer,
    claim_or_wait,
    complete_batch_answer,
    prefers_minimal,
)
from queuelog.api.routes.jobs import enqueue_answer, enqueue_spec
from queuelog.api.schemas import BatchCompleteRequest, ClaimRequest, EnqueueRequest
from queuelog.app_state import AppState
from queuelog.errors import QueueError
from queuelog.models import ApiKey, Role
from queuelog.specs import EnqueueSpec

log = logging.getLogger("queuelog.api")


class _Unserved(Exception):
    """The request needs the full route (it fails a check there, with the canonical answer)."""


# A lane's work once every check has passed: (state, caller, checked request, scope,
# receive) -> the answer.
Serve = Callable[[AppState, ApiKey, Any, Scope, Receive], Awaitable[Response]]


@dataclass(frozen=True)
class Lane:
    path: str
    role: Role
    check: Callable[[bytes, Mapping[bytes, bytes]], Any]  # raises to hand over to the route
    serve: Serve


def _json_body(model: type[BaseModel], body: bytes, empty_ok: bool = False) -> Any:
    if empty_ok and not body:
        return model()
    # pydantic's own parser reads every value as the routes' standard parser does
    # (integers of any size, floats to the bit, the last of repeated names), without
    # building the body twice; what it alone refuses (a byte order mark, nesting
    # deeper than its limit) is handed to the route, whose parser decides.
    return model.model_validate_json(body)


def _check_enqueue(body: bytes, headers: Mapping[bytes, bytes]) -> EnqueueSpec:
    header = headers.get(b"idempotency-key")
    request = _json_body(EnqueueRequest, body)
    return enqueue_spec(request, header.decode("latin-1") if header is not None else None)


async def _serve_enqueue(
    state: AppState, caller: ApiKey, spec: EnqueueSpec, scope: Scope, receive: Receive
) -> Response:
    job, created = await state.service.enqueue_async(caller, spec)
    status, headers, content = enqueue_answer(job, created, caller)
    return JSONResponse(content, status_code=status, headers=headers)


async def _serve_claim(
    state: AppState, caller: ApiKey, body: ClaimRequest, scope: Scope, receive: Receive
) -> Response:
    jobs = await claim_or_wait(state.service, state.wakeup, caller, body, receive)
    return JSONResponse(claim_answer(jobs, caller))


async def _serve_complete_batch(
    state: AppState, caller: ApiKey, body: BatchCompleteRequest, scope: Scope, receive: Receive
) -> Response:
    prefer = [value.decode("latin-1") for name, value in scope["headers"] if name == b"prefer"]
    return await complete_batch_answer(state.service, caller, body, prefers_minimal(prefer))


LANES = (
    Lane("/jobs", Role.PRODUCER, _check_enqueue, _serve_enqueue),
    Lane(
        "/jobs/claim",
        Role.WORKER,
        lambda body, _: _json_body(ClaimRequest, body, empty_ok=True),
        _serve_claim,
    ),
    Lane(
        "/jobs/batch/complete",
        Role.WORKER,
        lambda body, _: _json_body(BatchCompleteRequest, body),
        _serve_complete_batch,
    ),
)


class FastLane:
    """ASGI app in front of the app's middleware stack: serves ``POST`` to the lanes'
    paths, hands anything else on to the app."""

    def __init__(
        self,
        app: ASGIApp,
        state: AppState,
        routes: Mapping[str, Route],
        metrics: Metrics,
        max_bytes: int,
    ) -> None:
        self.app = app
        self.state = state
        self.lanes = {lane.path: (lane, routes[lane.path]) for lane in LANES}
        self.metrics = metrics
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        found = (
            self.lanes.get(scope["path"])
            if scope["type"] == "http" and scope["method"] == "POST"
            else None
        )
        if found is None:
            await self.app(scope, receive, send)
            return
        headers = first_headers(scope)
        length = headers.get(b"content-length")
        if (
            length is None
            or b"transfer-encoding" in headers
            or not length.isdigit()
            or int(length) > self.max_bytes
            or (b"content-type" not in headers and length != b"0")
        ):
            await self.app(scope, receive, send)  # the app's limits decide, body unread
            return
        lane, route = found
        started = time.perf_counter()
        body, disconnected = await _read_body(receive)
        if disconnected:  # counted as the app's metrics count a request never answered
            self.metrics.observe("POST", route.path_format, 500, time.perf_counter() - started)
            return
        try:
            caller, checked = self._checked(lane, headers, body)
        except _Unserved:
            await self.app(scope, _replay(body, receive), send)  # the app counts it
            return
        except Exception:  # the key store failing, say
            response = _internal_error(scope)
        else:
            try:
                response = await lane.serve(self.state, caller, checked, scope, receive)
            except QueueError as exc:
                response = from_error(exc)
            except Exception:
                response = _internal_error(scope)
        await self._answer(response, scope, receive, send, route, started)

    async def _answer(
        self,
        response: Response,
        scope: Scope,
        receive: Receive,
        send: Send,
        route: Route,
        started: float,
    ) -> None:
        """Send ``response`` and count the request under its route's name, as the app's
        metrics middleware counts the others (even when sending fails)."""
        try:
            await response(scope, receive, send)
        finally:
            elapsed = time.perf_counter() - started
            self.metrics.observe("POST", route.path_format, response.status_code, elapsed)

    def _checked(
        self, lane: Lane, headers: Mapping[bytes, bytes], body: bytes
    ) -> tuple[ApiKey, Any]:
        content_type = headers.get(b"content-type")
        if content_type is not None and not is_json_media(content_type):
            raise _Unserved  # the route decides what such a body is
        scheme, _, token = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise _Unserved
        try:
            checked = lane.check(body, headers)
            key = self.state.keys.authenticate(token)
            if not key.has(lane.role):
                raise _Unserved
            # Last, so a request handed over takes its token in the route, once.
            self.state.limiter.check(key.id)
        except (ValueError, RecursionError, ValidationError, QueueError):
            raise _Unserved from None
        return key, checked


def _internal_error(scope: Scope) -> Response:
    """The app's answer to an unexpected failure: its cause is logged for operators, the
    client learns nothing of it."""
    log.exception("internal error on POST %s", scope["path"])
    return internal_problem()


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
