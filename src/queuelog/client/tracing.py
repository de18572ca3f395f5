"""The SDK's OpenTelemetry seam: an enqueue is a producer's send, a handler's run a
consumer's process, each in a span, when OpenTelemetry is installed (the ``otel`` extra).

Without it, ``producing`` and ``processing`` do nothing and nothing of OpenTelemetry is
imported: ``client/otel.py``, which holds the spans, is imported at the first traced
call, and only if ``opentelemetry`` can be. With it, the spans go to the process's
tracer provider. Until the application sets one, a span would record nothing and
carry only a trace context it was given, so where there is none (an enqueue outside
any trace, a job enqueued so) no span is made at all.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Protocol, TypeVar

from queuelog.client.calls import Call
from queuelog.client.outcome import Outcome
from queuelog.client.types import Job

T = TypeVar("T")


class Processing(Protocol):
    def ended(self, outcome: Outcome, error: BaseException | None) -> None:
        """The handler's outcome, and what it raised (None: it returned)."""


class _Untraced:
    def ended(self, outcome: Outcome, error: BaseException | None) -> None:
        pass


_UNTRACED = _Untraced()


@functools.cache
def _otel() -> ModuleType | None:
    try:
        from queuelog.client import otel
    except ModuleNotFoundError as missing:
        if missing.name is None or not missing.name.startswith("opentelemetry"):
            raise  # a fault of ours, not an absent extra
        return None
    return otel


@contextmanager
def producing(call: Call[T]) -> Iterator[Call[T]]:
    """``call`` to send within its producer span, carrying the span's trace context in
    its headers; an enqueue's only (``call.produces``)."""
    otel = _otel()
    if otel is None or call.produces is None or not otel.sends_traced():
        yield call  # as with OpenTelemetry's no-op, at none of its cost per call
        return
    with otel.producing(call) as traced:
        yield traced


def in_a_trace() -> bool:
    """Whether the caller has a trace context of its own to send with its enqueue (never,
    without OpenTelemetry): such an enqueue is not sent in another caller's request."""
    otel = _otel()
    return otel is not None and bool(otel.in_a_trace())


@contextmanager
def processing(job: Job) -> Iterator[Processing]:
    """A handler's run of ``job`` within its consumer span, the child of the enqueue's
    span (``job.trace_context``)."""
    otel = _otel()
    if otel is None or not otel.processes_traced(job):
        yield _UNTRACED  # as with OpenTelemetry's no-op, at none of its cost per job
        return
    with otel.processing(job) as span:
        yield span
