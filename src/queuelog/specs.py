"""What callers hand the service: enqueue and finish specs, and list cursors."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from dataclasses import field
from datetime import datetime
from json.encoder import c_make_encoder, encode_basestring  # type: ignore[attr-defined]
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
        canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()


def _canonical(value: Any) -> Any:
    """``value`` with integral floats as ints, at any depth."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_canonical(v) for v in value]
    return value


@readonly_dataclass
class FinishSpec:
    """A worker's report on one held job: complete it, or fail it when ``error`` is set."""

    job_id: int
    lease_token: str
    result: JsonObject | None = None
    error: str | None = None
    retryable: bool = True
    retry_in_seconds: float | None = None


# How json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
# writes. json.dumps and JSONEncoder.encode build a new C encoder on every call (6.0
# µs a call for a 100-byte payload; 2.2 from one made once). The one made once keeps
# no state between calls, so it does no circular-reference bookkeeping: a value that
# refers to itself (only the Python API can pass one) overflows the stack, and the
# standard encoder then gives its own error for it.
_STANDARD = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)
_STORED = (
    c_make_encoder(None, _STANDARD.default, encode_basestring, None, ":", ",", False, False, False)
    if c_make_encoder is not None
    else None
)


def stored_json(value: Any) -> str:
    """How both backends store a JSON value (payload, result): compact UTF-8 text, never
    NaN. The size limits measure the UTF-8 bytes of this text."""
    if _STORED is not None:
        try:
            return "".join(_STORED(value, 0))
        except RecursionError:
            pass
    return _STANDARD.encode(value)


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
