"""What callers hand the service: enqueue and finish specs, and list cursors."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from dataclasses import field
from datetime import datetime
from typing import Any

from queuelog.clock import rfc3339
from queuelog.errors import ValidationFailed
from queuelog.models import MAX_ID, JsonObject, Priority, readonly_dataclass


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
    group: str | None = None

    def fingerprint(self, max_retries: int) -> str:
        """Identifies the request apart from its idempotency key.

        Built from resolved values (``max_retries`` after the type's default) and
        canonical numbers (``1.0`` as ``1``), so equal requests match however
        they were spelled.
        """
        body = {
            "type": self.type,
            "payload": _canonical(self.payload),
            "priority": int(self.priority),
            "max_retries": max_retries,
            "run_at": rfc3339(self.run_at) if self.run_at else None,
            "delay_seconds": _canonical(self.delay_seconds),
        }
        if self.group is not None:  # absent when unset: keys taken before groups still match
            body["group"] = self.group
        canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()


def _canonical(value: Any) -> Any:
    """``value`` with integral floats as ints, at any depth.

    A loop over the containers still to convert, not a recursion: how deep a payload
    nests is the caller's choice, the interpreter's stack is not.
    """
    pending: list[dict[str, Any] | list[Any]] = []

    def converted(item: Any) -> Any:
        if isinstance(item, float) and item.is_integer():
            return int(item)
        if isinstance(item, dict | list):
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
    return root


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


def encode_cursor(job_id: int) -> str:
    return base64.urlsafe_b64encode(f"id:{job_id}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> int:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        kind, _, value = raw.partition(":")
        job_id = int(value)
        if kind != "id" or not 1 <= job_id <= MAX_ID:
            raise ValueError(cursor)
        return job_id
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise ValidationFailed(
            "The cursor is not valid", errors=[{"loc": ["query", "cursor"], "msg": "bad cursor"}]
        ) from None
