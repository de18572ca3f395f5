"""How a handler's return or exception becomes a job's outcome. Pure: no I/O."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from queuelog.client.types import JsonObject
from queuelog.plain_json import strict_json

# The server keeps 2,000 characters of an error; sending far more only risks a refusal.
ERROR_CHARS = 4000
MAX_RETRY_IN_SECONDS = 366 * 86_400  # the server's bound on a failure's retry_in_seconds


class Retry(Exception):
    """Raise from a handler to fail this attempt and run the job again.

    Args:
        reason: Stored as the job's error.
        after: Seconds until the next attempt (``retry_in_seconds``, 0 to 366 days);
            default: the type's backoff. The job still fails for good once it has no
            retries left.
    """

    def __init__(self, reason: str = "retry requested", *, after: float | None = None) -> None:
        # Checked here, as the server checks it: a failure it refused left the job held
        # until its lease ran out, each attempt.
        if after is not None and not 0 <= after <= MAX_RETRY_IN_SECONDS:
            raise ValueError("a retry comes 0 to 31,622,400 seconds (366 days) later")
        super().__init__(reason)
        self.reason = reason
        self.after = after


class Fail(Exception):
    """Raise from a handler to fail the job for good (``retryable=false``): no more attempts."""

    def __init__(self, reason: str = "failed") -> None:
        super().__init__(reason)
        self.reason = reason


class Snooze(Exception):
    """Raise from a handler to give the job back unrun: pending again in ``seconds``
    (0-86,400), its attempt not spent (a partner said 429, the tenant is busy).

    Args:
        seconds: How long from now until the job may be claimed again.
    """

    def __init__(self, seconds: float = 0) -> None:
        if not 0 <= seconds <= 86_400:
            raise ValueError("a snooze lasts 0 to 86,400 seconds")
        super().__init__(f"snoozed for {seconds} s")
        self.seconds = seconds


@dataclass(frozen=True, slots=True)
class Outcome:
    """What to tell the server about one job: complete it, fail it, or snooze it."""

    completed: bool
    result: JsonObject | None = None
    error: str | None = None
    retryable: bool = True
    retry_in_seconds: float | None = None
    snooze_seconds: float | None = None  # set: released unrun, pending again this much later

    @property
    def label(self) -> str:
        """For the log: completed, snoozed, retry or failed."""
        if self.completed:
            return "completed"
        if self.snooze_seconds is not None:
            return "snoozed"
        return "retry" if self.retryable else "failed"


def outcome_of_return(value: Any) -> Outcome:
    """A handler's return value is the job's result: a dict as it is, None as no result,
    anything else wrapped as ``{"value": ...}``. A result that is not JSON fails the job."""
    if value is None:
        return Outcome(completed=True)
    result = value if isinstance(value, dict) else {"value": value}
    try:
        # As it will travel, and as the server reads it (no NaN, no lone surrogate, no
        # deeper than it takes), or it would refuse the whole acknowledgement.
        strict_json(json.dumps(result, ensure_ascii=False, allow_nan=False))
    except (TypeError, ValueError, RecursionError) as exc:
        reason = _sendable(f"result is not JSON: {exc}")
        return Outcome(completed=False, error=reason, retryable=False)
    return Outcome(completed=True, result=result)


def _sendable(text: object) -> str:
    """Error text that can be sent: lone surrogates escaped, cut to ERROR_CHARS."""
    return _text(text).encode("utf-8", "backslashreplace").decode("utf-8")[:ERROR_CHARS]


def _text(value: object) -> str:
    """``value`` as text, whatever it is: a reason given as an exception (``Fail(error)``)
    or an exception whose own ``__str__`` raises still fail the job as asked, where an
    outcome that could not be made left the job to its lease, to run again."""
    if isinstance(value, str):
        return value
    try:
        return str(value)
    except Exception:
        return f"<{type(value).__name__} that cannot be shown as text>"


def outcome_of_error(error: BaseException) -> Outcome:
    """A handler's exception fails the job: ``Fail`` for good, anything else to retry;
    ``Snooze`` gives it back unrun."""
    if isinstance(error, Snooze):
        return Outcome(completed=False, snooze_seconds=error.seconds)
    if isinstance(error, Fail):
        return Outcome(completed=False, error=_sendable(error.reason), retryable=False)
    if isinstance(error, Retry):
        reason = _sendable(error.reason)
        return Outcome(completed=False, error=reason, retry_in_seconds=error.after)
    text = _text(error)
    name = type(error).__name__
    message = f"{name}: {text}" if text else name
    return Outcome(completed=False, error=_sendable(message))
