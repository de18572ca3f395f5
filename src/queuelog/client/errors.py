"""Errors a client raises: the server's problem+json answers, keyed by their ``type`` slug,
and the client's own (the server could not be reached, or answered something unexpected)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from queuelog.errors import (
    Forbidden,
    IdempotencyKeyReused,
    InvalidState,
    NotFound,
    NotLeaseHolder,
    PayloadTooLarge,
    QueueError,
    RateLimited,
    Unauthenticated,
    UnknownJobType,
    ValidationFailed,
)

if TYPE_CHECKING:
    from queuelog.client.types import Job


class BodyTooLarge(QueueError):
    slug, status, title = "body-too-large", 413, "Request body is too large"


class ServerError(QueueError):
    """The server failed (5xx) or answered with a status this client does not know."""

    slug, status, title = "internal", 500, "Server error"

    def __init__(
        self,
        detail: str = "",
        status: int = 500,
        slug: str = "internal",
        retry_after: int | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.slug = slug
        self.retry_after = retry_after


class ServerUnavailable(QueueError):
    """The server could not be reached, or the connection broke before it answered."""

    slug, status, title = "server-unavailable", 0, "Cannot reach the queuelog server"


class JobNotCompleted(Exception):
    """An awaited job ended without completing; ``job`` is the job as it ended."""

    def __init__(self, job: Job) -> None:
        super().__init__(f"job {job.id} is {job.status.value}")
        self.job = job


class JobFailed(JobNotCompleted):
    """The awaited job failed for good (``job.error`` says why, to admin keys)."""


class JobCancelled(JobNotCompleted):
    """The awaited job was cancelled."""


class JobTimeout(TimeoutError):
    """The awaited job had not finished when the time was up; ``job`` is as it was then."""

    def __init__(self, job: Job) -> None:
        super().__init__(f"job {job.id} is still {job.status.value}")
        self.job = job


ERRORS_BY_SLUG: dict[str, type[QueueError]] = {
    cls.slug: cls
    for cls in (
        Unauthenticated,
        Forbidden,
        NotFound,
        InvalidState,
        NotLeaseHolder,
        ValidationFailed,
        UnknownJobType,
        PayloadTooLarge,
        IdempotencyKeyReused,
        BodyTooLarge,
    )
}


def error_from_problem(status: int, body: Any, retry_after: str | None = None) -> QueueError:
    """The exception for one problem+json answer (or any error answer without one)."""
    problem: dict[str, Any] = body if isinstance(body, dict) else {}
    slug = str(problem.get("type", ""))
    said = [problem.get("detail"), problem.get("title")]
    detail = next((text for text in said if isinstance(text, str) and text), f"HTTP {status}")
    if slug == RateLimited.slug or status == 429:
        wait = _seconds(retry_after)
        return RateLimited(1 if wait is None else wait)
    cls = ERRORS_BY_SLUG.get(slug)
    if cls is None:
        return ServerError(
            detail, status=status, slug=slug or "unknown", retry_after=_seconds(retry_after)
        )
    extra = {k: v for k, v in problem.items() if k not in ("type", "title", "status", "detail")}
    return cls(detail, **extra)


def error_from_item(status: int, slug: str | None) -> QueueError:
    """The exception for one refused item of a batch answer."""
    return error_from_problem(status, {"type": slug or "", "detail": f"item refused ({slug})"})


def _seconds(value: str | None) -> int | None:
    """A ``Retry-After`` of delay-seconds; None without one (no header, or a date)."""
    try:
        return max(0, int(value)) if value is not None else None
    except ValueError:
        return None
