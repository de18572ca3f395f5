"""Domain errors. The API maps each to a problem+json answer by its slug."""

from __future__ import annotations

import json
import re
from typing import Any


def quoted(text: str) -> str:
    """A caller's text inside a message, as JSON writes a string (``"oth\\u0000er"``):
    what an answer says never depends on how Python shows a value. A lone surrogate,
    which no UTF-8 answer can carry, is escaped as JSON escapes it (``"\\ud800"``)."""
    shown = json.dumps(text, ensure_ascii=False)
    return _LONE_SURROGATE.sub(lambda found: f"\\u{ord(found[0]):04x}", shown)


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


class QueueError(Exception):
    """Base of every error a client may be told about."""

    slug = "error"
    status = 400
    title = "Request failed"
    # Seconds a client should wait before trying again (a Retry-After header), if any.
    retry_after: int | None = None

    def __init__(self, detail: str = "", **extra: Any) -> None:
        super().__init__(detail or self.title)
        self.detail = detail or self.title
        self.extra = extra


class Unauthenticated(QueueError):
    """The API key is missing, unknown or revoked. Nothing was done."""

    slug, status, title = "unauthenticated", 401, "Authentication required"


class Forbidden(QueueError):
    """The key lacks the route's role, or may not use this job type or priority.
    Nothing was done."""

    slug, status, title = "forbidden", 403, "Not allowed for this key"


class NotFound(QueueError):
    """No such job, key, schedule or job type, or none this key may see."""

    slug, status, title = "not-found", 404, "Not found"


class InvalidState(QueueError):
    """Not in a state that allows this: cancelling a running job, retrying one that is
    neither failed nor cancelled, deleting a schedule of the config file."""

    slug, status, title = "invalid-state", 409, "Not in a state that allows this"


class NotLeaseHolder(QueueError):
    """The lease token is not the job's current one: the lease ran out and the job
    was claimed again (or ended), so this worker's outcome is refused."""

    slug, status, title = "not-lease-holder", 409, "Caller does not hold the job's lease"


class ValidationFailed(QueueError):
    """The request breaks a rule of the API (a field out of range, a payload its
    type's schema refuses); ``extra['errors']`` names the fields."""

    slug, status, title = "validation", 422, "Request is not valid"


class UnknownJobType(QueueError):
    """The job type is not in the server's configuration."""

    slug, status, title = "unknown-job-type", 422, "Job type is not configured"


class PayloadTooLarge(QueueError):
    """A payload, result or progress is over its limit once serialised."""

    slug, status, title = "payload-too-large", 422, "Payload or result is too large"


class IdempotencyKeyReused(QueueError):
    """The idempotency key was already used, by the same key's holder, for a
    different request; in a batch nothing was inserted and ``extra['index']`` names
    the item."""

    slug, status, title = (
        "idempotency-key-reused",
        422,
        "Idempotency key was already used for a different request",
    )


class StorageUnavailable(QueueError):
    """The database cannot take the request now (unreachable, an I/O error, read-only,
    locked by another process past the busy timeout, or a write that lost to others on
    each of its tries); nothing was done, or its outcome is unknown. ``reason`` names
    the cause for logs and metrics."""

    slug, status, title = "unavailable", 503, "Database unavailable"
    retry_after = 1
    reason = "unreachable"

    def __init__(self, detail: str = "", reason: str | None = None) -> None:
        super().__init__(detail)
        if reason is not None:
            self.reason = reason


class StorageFull(StorageUnavailable):
    """The database has no space left to store the request; nothing was stored."""

    slug, status, title = "insufficient-storage", 507, "Database storage is full"
    retry_after = 5
    reason = "no-space"


class RateLimited(QueueError):
    """Too many requests from this key: try again after ``retry_after`` seconds."""

    slug, status, title = "rate-limited", 429, "Too many requests"
    retry_after: int

    def __init__(self, retry_after: int) -> None:
        super().__init__(f"Rate limit exceeded; retry after {retry_after} s")
        self.retry_after = retry_after
