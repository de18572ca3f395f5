"""Routes that read their own requests: the hottest operations.

``POST /jobs``, ``POST /jobs/claim`` and ``POST /jobs/batch/complete`` are the calls
producers and workers make most, and for them FastAPI's per-request machinery (its
dependency solving and parameter handling) cost more server time than the queue's
own work. Each stays an ordinary route of the app, behind the same middleware and
exception handlers; it is a ``LeanRoute``, whose endpoint takes the request and
reads it with ``read_request``: the same authentication and role check as every
other route (``deps.authenticate``, ``deps.check_role``), the same body model, and
the same problems, in the contract's order. Its OpenAPI entry is written from the
same model by ``lean_openapi``.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Annotated, Any, TypeVar

from fastapi import Depends, HTTPException, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from fastapi.security.utils import get_authorization_scheme_param
from pydantic import BaseModel, ValidationError
from starlette.requests import ClientDisconnect

from queuelog.api.deps import authenticate, check_role
from queuelog.errors import quoted
from queuelog.models import ApiKey, Role
from queuelog.plain_json import RepeatedName, unique_json

Body = TypeVar("Body", bound=BaseModel)
_NO_BODY = object()
_REF = "#/components/schemas/{model}"
# The body models of the lean routes, whose schemas the OpenAPI components must hold.
_MODELS: list[type[BaseModel]] = []


class LeanRoute(APIRoute):
    """A route whose endpoint is called with the request alone."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        endpoint: Callable[[Request], Awaitable[Response]] = self.endpoint

        async def handle(request: Request) -> Response:
            return await endpoint(request)

        return handle


class JsonRoute(APIRoute):
    """A route whose body model FastAPI fills: its body is read here first, as
    ``read_request`` reads a lean route's (a member named twice is refused), then FastAPI
    reads it again from the request, which keeps the bytes. These routes are not the hot
    ones, and the second read is of a small body. A route without a body model (a read,
    a delete) reads no body, as before."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()
        if self.body_field is None:
            return handler

        async def handle(request: Request) -> Response:
            _json(await _body(request))
            return await handler(request)

        return handle


async def read_request(
    request: Request, model: type[Body], roles: Sequence[Role]
) -> tuple[ApiKey, Body]:
    """The caller's key and the checked body, refused in the contract's order: JSON
    syntax (422), API key (401), rate limit (429), role (403), then the fields (422).
    No body is a missing body; ``{}`` is a body of the model's defaults.
    """
    data = _json(await _body(request))
    scheme, credentials = get_authorization_scheme_param(request.headers.get("authorization"))
    presented = credentials if scheme.lower() == "bearer" and credentials else None
    caller = check_role(await authenticate(request, presented), roles)
    if data is _NO_BODY:
        missing = {"type": "missing", "loc": ("body",), "msg": "Field required"}
        raise RequestValidationError([missing])
    try:
        return caller, model.model_validate(data, from_attributes=True)
    except ValidationError as exc:
        errors = [{**error, "loc": ("body", *error["loc"])} for error in exc.errors()]
        raise RequestValidationError(errors) from None


async def json_syntax(request: Request) -> Any:
    """A route dependency of the routes that take no fields: malformed JSON is 422
    before the key is looked at, as on every route. The body's value (FastAPI keeps it
    for the request, so ``_no_fields`` reads it without parsing it again)."""
    return _json(await _body(request))


async def _no_fields(data: Annotated[Any, Depends(json_syntax)]) -> None:
    if data is not _NO_BODY and data != {}:
        error = {"type": "no_fields", "loc": ("body",), "msg": "This route takes no body, or {}"}
        raise RequestValidationError([error])


# The route argument and the last parameter of a POST that takes no fields: no body, or
# ``{}``. Anything else is 422 and the route does nothing, rather than act on a request
# its client meant otherwise; as a field is, it is checked after the key and the role.
# The OpenAPI entry declares no body (a client sends none); the app's description says
# what a body sent anyway gets.
NO_FIELDS: dict[str, Any] = {"dependencies": [Depends(json_syntax)]}
NoFields = Annotated[None, Depends(_no_fields)]


async def _body(request: Request) -> bytes:
    try:
        return await request.body()
    except ClientDisconnect:  # gone before its body was read: no one reads the answer
        raise HTTPException(400, "There was an error parsing the body") from None


def _json(raw: bytes) -> Any:
    """The body's JSON value (``_NO_BODY`` for none), read as every route reads it."""
    if not raw:
        return _NO_BODY
    try:
        return unique_json(raw)
    except json.JSONDecodeError as exc:
        error = {"type": "json_invalid", "loc": ("body", exc.pos), "msg": "JSON decode error"}
        raise RequestValidationError([error]) from exc
    except RepeatedName as exc:
        msg = f"An object names the member {quoted(exc.name[:100])} more than once"
        error = {"type": "json_invalid", "loc": ("body",), "msg": msg}
        raise RequestValidationError([error]) from None
    except (ValueError, RecursionError) as exc:  # not UTF-8, or nested past the parser
        raise HTTPException(400, "There was an error parsing the body") from exc


def lean_openapi(
    model: type[BaseModel], headers: Sequence[tuple[str, str, dict[str, Any]]] = ()
) -> dict[str, Any]:
    """The OpenAPI entry a lean route cannot infer: its body, header parameters and the
    API key it needs (``add_lean_models`` adds the body's schema to the components)."""
    _MODELS.append(model)
    schema = {"$ref": _REF.format(model=model.__name__)}
    return {
        "requestBody": {"required": True, "content": {"application/json": {"schema": schema}}},
        "parameters": header_parameters(headers),
        "security": [{"HTTPBearer": []}],
    }


def header_parameters(headers: Sequence[tuple[str, str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """The OpenAPI parameters of optional request headers: (name, description, schema)."""
    return [
        {"name": name, "in": "header", "required": False, "schema": schema, "description": text}
        for name, text, schema in headers
    ]


def add_lean_models(document: dict[str, Any]) -> None:
    """Put the lean routes' body schemas in an OpenAPI document's components."""
    components = document.setdefault("components", {}).setdefault("schemas", {})
    for model in _MODELS:
        body = model.model_json_schema(ref_template=_REF)
        components.update(body.pop("$defs", {}))
        components.setdefault(model.__name__, body)
