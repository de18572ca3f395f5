"""problem+json (RFC 9457) answers, and the handlers that turn every failure into one."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from queuelog.api.schemas import PATTERNS_SAY
from queuelog.errors import QueueError
from queuelog.schema_messages import field_message

log = logging.getLogger("queuelog.api")

PROBLEM_JSON = "application/problem+json"

_HTTP_SLUGS = {
    401: ("unauthenticated", "Authentication required"),
    403: ("forbidden", "Not allowed for this key"),
    404: ("not-found", "Not found"),
    405: ("method-not-allowed", "Method not allowed"),
    413: ("body-too-large", "Request body is too large"),
    415: ("unsupported-media-type", "Request body must be application/json"),
}


def problem(
    status: int,
    slug: str,
    title: str,
    detail: str | None = None,
    retry_after: int | None = None,
    **extra: Any,
) -> JSONResponse:
    body: dict[str, Any] = {"type": slug, "title": title, "status": status}
    body["detail"] = detail or title
    body.update(extra)
    headers = {}
    if retry_after is not None:
        headers["Retry-After"] = str(retry_after)
    if status == 401:
        headers["WWW-Authenticate"] = 'Bearer realm="queuelog"'

    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON, headers=headers)


def from_error(exc: QueueError) -> JSONResponse:
    return problem(exc.status, exc.slug, exc.title, exc.detail, exc.retry_after, **exc.extra)


def _validation_errors(exc: RequestValidationError) -> list[dict[str, Any]]:
    errors = []
    for error in exc.errors()[:50]:
        # Only the location and message: never the input, which may be large or secret.
        message = field_message(error, PATTERNS_SAY)
        errors.append({"loc": list(error.get("loc", ())), "msg": message})
    return errors


# The batch routes' lists of items: a refusal of one item names its ``index``, as the
# service's refusals of a batch item do.
_ITEM_LISTS = ("jobs", "items")


def _item_index(exc: RequestValidationError) -> dict[str, int]:
    """``{"index": n}`` when the first refused field is inside item ``n`` of a batch."""
    errors = exc.errors()
    loc = tuple(errors[0].get("loc", ())) if errors else ()
    if len(loc) >= 3 and loc[0] == "body" and loc[1] in _ITEM_LISTS and isinstance(loc[2], int):
        return {"index": loc[2]}
    return {}


def install_handlers(app: FastAPI) -> None:
    @app.exception_handler(QueueError)
    async def queue_error(_: Request, exc: QueueError) -> JSONResponse:
        return from_error(exc)

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        return problem(
            422,
            "validation",
            "Request is not valid",
            "The request did not pass validation",
            errors=_validation_errors(exc),
            **_item_index(exc),
        )

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400:
            # The only 400 is FastAPI's "error parsing the body" (JSON nested too
            # deep, a number too long): malformed JSON, which the contract makes 422.
            return problem(422, "validation", "Request is not valid", "The body is not valid JSON")
        slug, title = _HTTP_SLUGS.get(exc.status_code, ("error", "Request failed"))
        response = problem(exc.status_code, slug, title)
        if exc.status_code == 405:
            response.headers["Allow"] = _allowed_methods(request)
        return response


def _allowed_methods(request: Request) -> str:
    """Every method some route of this path answers. The router's own 405 names only the
    first route that matched the path, though ``GET /keys`` and ``POST /keys`` are two."""
    allowed = []
    for method in _METHODS:
        scope = {**request.scope, "method": method}
        if any(route.matches(scope)[0] is Match.FULL for route in request.app.router.routes):
            allowed.append(method)
    return ", ".join(allowed)


_METHODS = ("DELETE", "GET", "HEAD", "PATCH", "POST", "PUT")


# The innermost frames say where a failure happened; a failure deep in a recursion
# has a thousand frames, and one request must not write megabytes of log.
def internal_problem() -> JSONResponse:
    """The answer to an unexpected failure: nothing of its cause."""
    return problem(500, "internal", "Internal server error", "The server could not do this")
