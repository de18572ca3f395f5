"""What callers hand the service: enqueue and finish specs, and list cursors."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from dataclasses import field
from datetime import datetime
from typing import Any, Protocol, TypeVar

import orjson

from queuelog.clock import rfc3339
from queuelog.errors import PayloadTooLarge, ValidationFailed
from queuelog.models import (
    MAX_ID,
    DependencyFailure,
    Job,
    JobStatus,
    JsonObject,
    OnDuplicate,
    Priority,
    TraceContext,
    readonly_dataclass,
)


@readonly_dataclass
class EnqueueSpec:
    """What a producer asks for; validated for shape by the API, for rules here."""

    type: str
    payload: JsonObject = field(default_factory=dict)
    priority: Priority = Priority.LOW
    max_retries: int | None = None
    run_at: datetime | None = None
    delay_seconds: float | None = None
    idempotency_key: str | None = None
    unique_key: str | None = None
    on_duplicate: OnDuplicate = OnDuplicate.KEEP
    group: str | None = None
    trace_context: TraceContext | None = None
    depends_on: tuple[int, ...] = ()  # ids of the producer's own jobs (any, for an admin)
    depends_on_items: tuple[int, ...] = ()  # in a batch: indices of earlier items
    on_dependency_failure: DependencyFailure = DependencyFailure.CANCEL

    def fingerprint(self, max_retries: int) -> str:
        """Identifies the request apart from its idempotency key and its trace context
        (a request sent again is traced anew: it is still the same request).

        Built from resolved values (``max_retries`` after the type's default) and
        canonical numbers (``1.0`` as ``1``), so equal requests match however
        they were spelled.
        """
        payload, fractions = _canonical(self.payload)
        delay, fraction = _canonical(self.delay_seconds)
        body = {
            "type": self.type,
            "payload": payload,
            "priority": int(self.priority),
            "max_retries": max_retries,
            "run_at": rfc3339(self.run_at) if self.run_at else None,
            "delay_seconds": delay,
        }
        # Only when given: the fingerprints of requests without a unique key stay as
        # they were stored before unique keys existed.
        if self.unique_key is not None:
            body["unique_key"] = self.unique_key
            body["on_duplicate"] = self.on_duplicate.value
        if self.group is not None:  # absent when unset: keys taken before groups still match
            body["group"] = self.group
        if self.depends_on or self.depends_on_items:  # absent likewise
            body["depends_on"] = list(self.depends_on)
            body["depends_on_items"] = list(self.depends_on_items)
            body["on_dependency_failure"] = self.on_dependency_failure.value
        return hashlib.sha256(_canonical_text(body, fractions or fraction)).hexdigest()


def _canonical(value: Any) -> tuple[Any, bool]:
    """``value`` with integral floats as ints, at any depth, and whether a float with a
    fraction remains.

    A loop over the containers still to convert, not a recursion: how deep a payload
    nests is the caller's choice, the interpreter's stack is not.
    """
    pending: list[dict[str, Any] | list[Any]] = []
    fractions = False

    def converted(item: Any) -> Any:
        nonlocal fractions
        if isinstance(item, float):
            if item.is_integer():
                return int(item)
            fractions = True
        elif isinstance(item, dict | list | tuple):  # a tuple is written as a list
            copy = dict(item) if isinstance(item, dict) else list(item)
            pending.append(copy)
            return copy
        return item

    root = converted(value)
    while pending:
        container = pending.pop()
        if isinstance(container, dict):
            for key, child in container.items():
                container[key] = converted(child)
        else:
            for index, child in enumerate(container):
                container[index] = converted(child)
    return root, fractions


# orjson's sorted text, refusing (TypeError) what it would write and the standard encoder
# writes otherwise or refuses: datetimes, dataclasses, subclasses of str, int, dict, list.
_SORTED_PLAIN = (
    orjson.OPT_SORT_KEYS
    | orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_SUBCLASS
)


def _canonical_text(body: dict[str, Any], fractions: bool) -> bytes:
    """``body`` as the standard encoder writes it with sorted keys, compact and in
    ASCII: the text every fingerprint stored so far was made of, so a request sent again
    across an upgrade, or to a node of another version, still matches its job.

    orjson writes it several times faster, and to the same bytes unless the body has a
    float with a fraction (written its own way: ``1e-5``, not ``1e-05``), a character
    the standard encoder escapes (past ASCII, and DEL), an integer beyond 64 bits, or a
    value of a type that is not JSON's, or a subclass of one (a request's body is plain
    JSON, but a subclass may write itself another way): those bodies are written by the
    standard encoder.
    """
    if not fractions:
        try:
            text = orjson.dumps(body, option=_SORTED_PLAIN)
        except TypeError:  # an integer beyond 64 bits, a type or subclass of another kind
            pass
        else:
            if text.isascii() and b"\x7f" not in text:
                return text
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


@readonly_dataclass
class FinishSpec:
    """A worker's report on one held job: complete it, or fail it when ``error`` is set."""

    job_id: int
    lease_token: str
    result: JsonObject | None = None
    error: str | None = None
    retryable: bool = True
    retry_in_seconds: float | None = None


def stored_json(value: Any) -> str:
    """How both backends store a JSON value (payload, result): compact UTF-8 text, never
    NaN. The size limits measure the UTF-8 bytes of this text."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


# A page's cursor is the id of its last row, in decimal: the next page of jobs holds the
# older jobs (lower ids), of a job's events the later events. Any id may be one, up to
# MAX_ID (19 digits; more is 422 unread).
CURSOR_PATTERN = r"^[1-9][0-9]{0,18}$"
# A job type named in a list filter: no control characters, which no configured type
# has and PostgreSQL cannot compare (a NUL).
TYPE_FILTER_PATTERN = r"^[^\x00-\x1f\x7f]{1,100}$"

# A heartbeat's progress, as its compact UTF-8 JSON text, is at most this long.
MAX_PROGRESS_BYTES = 4096


def progress_text(progress: JsonObject) -> str:
    """A heartbeat's progress as stored; PayloadTooLarge past ``MAX_PROGRESS_BYTES``."""
    text = stored_json(progress)
    if len(text.encode()) > MAX_PROGRESS_BYTES:
        raise PayloadTooLarge(f"The progress exceeds {MAX_PROGRESS_BYTES} bytes")
    return text


def encode_cursor(job_id: int) -> str:
    return str(job_id)


class _Stored(Protocol):
    @property
    def id(self) -> int | None: ...


Row = TypeVar("Row", bound=_Stored)


def paged(rows: list[Row], limit: int) -> tuple[list[Row], str | None]:
    """A page of ``rows`` (read with one more than ``limit``, to know whether there is
    more) and the cursor of the next page: its last row's id, or None."""
    if len(rows) <= limit:
        return rows, None
    last = rows[limit - 1].id
    assert last is not None  # read from the store: every row there has its id
    return rows[:limit], encode_cursor(last)


def decode_cursor(cursor: str) -> int:
    if not re.fullmatch(CURSOR_PATTERN, cursor) or int(cursor) > MAX_ID:
        raise ValidationFailed(
            "The cursor is not valid", errors=[{"loc": ["query", "cursor"], "msg": "bad cursor"}]
        )
    return int(cursor)


def holds(job: Job | None, worker_name: str, lease_token: str) -> bool:
    """Whether ``worker_name`` holds ``job`` under ``lease_token``, as read."""
    return (
        job is not None
        and job.status == JobStatus.RUNNING
        and job.claimed_by == worker_name
        and job.lease_token is not None
        and hmac.compare_digest(job.lease_token, lease_token)
    )


def held_token(token: str) -> str:
    """The lease token to check a held job against.

    Lease tokens are hexadecimal. One with characters no token has (a lone
    surrogate, NUL) cannot hold a lease, and neither database can store or
    compare it; it is checked as the empty token, which matches no lease, so the
    answer is the one any wrong token gets (404, or 409 by the job's state).
    """
    return token if token.isascii() and token.isprintable() else ""
