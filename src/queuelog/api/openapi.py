"""Shared OpenAPI documentation: the problem responses a route may give."""

from __future__ import annotations

from typing import Any

from queuelog.api.schemas import ProblemOut

_DESCRIPTIONS = {
    401: "`unauthenticated`: missing, malformed, unknown or revoked API key.",
    403: "`forbidden`: the key lacks the role, the job type, or the priority.",
    404: "`not-found`: no such job, or one this key may not see.",
    409: "`invalid-state` (the job's status does not allow this) or "
    "`not-lease-holder` (another worker holds it, or the lease token is stale).",
    413: "`body-too-large`: the request body exceeds `max_request_bytes` (checked before parsing).",
    415: "`unsupported-media-type`: a request body that is not `application/json`.",
    422: "`validation`, `unknown-job-type`, `payload-too-large` or `idempotency-key-reused`.",
    429: "`rate-limited`: too many requests for this key; see `Retry-After`.",
}

AUTHED = (401, 403, 429)


def problems(*statuses: int, **described: str) -> dict[int | str, dict[str, Any]]:
    """The ``responses=`` entry for a route that may answer these problems; a route
    whose problem means something of its own describes it (``e404="..."``)."""
    return {
        status: {
            "model": ProblemOut,
            "description": described.get(f"e{status}", _DESCRIPTIONS[status]),
            "content": {"application/problem+json": {}},
        }
        for status in statuses
    }
