"""The OpenAPI document: exactly what the server accepts and answers.

Routes declare their problems with ``problems()``; ``install`` finishes the document
FastAPI builds: every error answer is ``application/problem+json`` with the problem
schema (FastAPI's own 422 entry included), the lean routes' bodies are in the
components, and the job types a request may name are the configured ones.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from fastapi import FastAPI
from fastapi.routing import APIRoute

from queuelog.api.answers import ProblemOut
from queuelog.api.lean import add_lean_models
from queuelog.api.problems import PROBLEM_JSON
from queuelog.models import MAX_ID

_PROBLEM_REF = "#/components/schemas/ProblemOut"

_DESCRIPTIONS = {
    401: "`unauthenticated`: missing, malformed, unknown or revoked API key, or more than one "
    "`Authorization` header.",
    403: "`forbidden`: the key lacks the role, the job type, or the priority.",
    404: "`not-found`: no such job, or one this key may not see.",
    409: "`invalid-state` (the job's status does not allow this) or "
    "`not-lease-holder` (another worker holds it, or the lease token is stale).",
    413: "`body-too-large`: the request body exceeds `max_request_bytes` (checked before parsing).",
    415: "`unsupported-media-type`: a request body that is not `application/json`.",
    422: "`validation` (a field, a parameter or the JSON itself), or `unknown-job-type`, "
    "`payload-too-large`, `idempotency-key-reused`.",
    429: "`rate-limited`: too many requests for this key; see `Retry-After`.",
    503: "`unavailable`: the database cannot take this now (unreachable, an I/O error, "
    "read-only, locked, or a write that lost to others of the same jobs, keys or schedule "
    "on each of its tries); nothing was done, or its outcome is unknown. `overloaded`: the "
    "server serves as many connections as `limit_concurrency` allows; nothing was done. "
    "See `Retry-After`.",
    507: "`insufficient-storage`: no space is left for the database; nothing was stored. "
    "See `Retry-After`.",
}
# Every documented route reads or writes the database, so any may meet a storage fault.
_STORAGE_FAULTS = (503, 507)
# The answers that say when to send again.
RETRY_AFTER = {
    "Retry-After": {
        "description": "Seconds to wait before sending the request again.",
        "schema": {"type": "integer", "minimum": 1},
    }
}
_SAYS_WHEN = frozenset({429, 503, 507})

AUTHED = (401, 403, 429)
# A POST that takes no fields may have no body, or ``{}``: a body past the size limit is
# 413, one that is not JSON 415, and malformed JSON or anything but ``{}`` 422
# (``lean.NO_FIELDS``).
NO_BODY = (413, 415, 422)

# Where a request names a job type: (component, property). Each admits only the types
# configured when the app was built (others are 422 `unknown-job-type`).
_TYPE_FIELDS = (
    ("EnqueueRequest", "type"),
    ("BatchEnqueueItem", "type"),
    ("ClaimRequest", "types"),
    ("KeyCreateRequest", "types"),
    ("ScheduleCreateRequest", "type"),
)


def problems(
    *statuses: int, described: Mapping[int, str] | None = None
) -> dict[int | str, dict[str, Any]]:
    """The ``responses=`` entry for a route that may answer these problems (and the
    storage faults, which any route may); ``described`` words a status for this route
    alone."""
    said = described or {}
    return {
        status: {"description": said.get(status, _DESCRIPTIONS[status])}
        | ({"headers": RETRY_AFTER} if status in _SAYS_WHEN else {})
        for status in (*statuses, *_STORAGE_FAULTS)
    }


def located(path: str) -> dict[str, Any]:
    """What an answer that names a resource documents: its ``Location`` header."""
    header = {"description": f"The resource's path, `{path}`.", "schema": {"type": "string"}}
    return {"headers": {"Location": header}}


def operation_id(route: APIRoute) -> str:
    """An operation is named after its endpoint (``enqueue``, ``claim``, ``get_job``)."""
    return route.name


def install(app: FastAPI, job_types: Sequence[str]) -> None:
    """Make ``app.openapi()`` the finished document (built once, on first use)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = build()  # FastAPI keeps it as app.openapi_schema
            add_lean_models(document)
            _integer_bounds(document)
            _problems_are_problem_json(document)
            document["components"]["schemas"]["ProblemOut"] = _problem_schema(document)
            if job_types:
                _name_the_types(document["components"]["schemas"], sorted(job_types))
        return app.openapi_schema or build()

    app.openapi = openapi  # type: ignore[method-assign]


def _integer_bounds(node: Any) -> None:
    """Write an integer schema's bounds as integers. FastAPI's OpenAPI model holds them
    as floats: an id's bound, 2^63 - 1, had become 2^63 (an id the server refuses)."""
    if isinstance(node, list):
        for item in node:
            _integer_bounds(item)
    if not isinstance(node, dict):
        return
    if node.get("type") == "integer":
        for bound in ("minimum", "maximum"):
            value = node.get(bound)
            if isinstance(value, float):
                node[bound] = MAX_ID if value == float(MAX_ID) else int(value)
    for child in node.values():
        _integer_bounds(child)


def _responses(document: dict[str, Any]) -> Iterator[tuple[int, dict[str, Any]]]:
    for path_item in document.get("paths", {}).values():
        for operation in path_item.values():
            for status, response in operation.get("responses", {}).items():
                if str(status).isdigit():
                    yield int(status), response


def _problems_are_problem_json(document: dict[str, Any]) -> None:
    for status, response in _responses(document):
        if status >= 400:
            response["content"] = {PROBLEM_JSON: {"schema": {"$ref": _PROBLEM_REF}}}
            if status in _DESCRIPTIONS and response.get("description") == "Validation Error":
                response["description"] = _DESCRIPTIONS[status]  # FastAPI's own 422 entry
    # FastAPI's validation-error schemas describe answers queuelog never gives.
    schemas = document.get("components", {}).get("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        schemas.pop(name, None)


def _problem_schema(document: dict[str, Any]) -> dict[str, Any]:
    schema = ProblemOut.model_json_schema(ref_template="#/components/schemas/{model}")
    document["components"]["schemas"].update(schema.pop("$defs", {}))
    return schema


def _name_the_types(schemas: dict[str, Any], job_types: list[str]) -> None:
    for component, field in _TYPE_FIELDS:
        schema = schemas[component]["properties"][field]
        for string in _strings_in(schema):
            string["enum"] = job_types


def _strings_in(schema: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The string schemas in ``schema``: itself, its array items, its anyOf branches."""
    if schema.get("type") == "string":
        yield schema
    if "items" in schema:
        yield from _strings_in(schema["items"])
    for branch in schema.get("anyOf", ()):
        yield from _strings_in(branch)
