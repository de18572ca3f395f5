"""The SDK's spans, in OpenTelemetry's messaging conventions: ``send <type>`` (PRODUCER)
around an enqueue, ``process <type>`` (CONSUMER) around a handler's run. Imported only
by ``client/tracing.py``, and only where OpenTelemetry is installed."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from opentelemetry import propagate, trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

from queuelog._version import __version__
from queuelog.client.calls import Call, Produces
from queuelog.client.outcome import Outcome
from queuelog.client.types import Job

T = TypeVar("T")
SYSTEM = "queuelog"
MESSAGE_ID = "messaging.message.id"
ERROR_TYPE = "error.type"
# What the conventions have no name for is named under messaging.queuelog.
ATTEMPT = "messaging.queuelog.job.attempt"
OUTCOME = "messaging.queuelog.job.outcome"


@functools.cache
def _tracer() -> trace.Tracer:
    # A proxy until the application sets its provider: safe to keep from the first call.
    return trace.get_tracer("queuelog", __version__)


def _operation(name: str, destination: str | None) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "messaging.system": SYSTEM,
        "messaging.operation.name": name,
        "messaging.operation.type": name,
    }
    if destination is not None:
        attributes["messaging.destination.name"] = destination
    return attributes


def _send_span(produces: Produces) -> tuple[str, dict[str, Any]]:
    """The name and attributes of a send: of one job type, or of several (a batch)."""
    types = set(produces.types)
    destination = produces.types[0] if len(types) == 1 else None
    attributes = _operation("send", destination)
    if produces.batch:
        attributes["messaging.batch.message_count"] = len(produces.types)
    return (f"send {destination}" if destination else "send"), attributes


@contextmanager
def producing(call: Call[T]) -> Iterator[Call[T]]:
    """``call`` with the producer span's context in its headers (W3C ``traceparent``,
    ``tracestate``), sent within the span; a single enqueue's job id is noted on it."""
    assert call.produces is not None
    name, attributes = _send_span(call.produces)
    producer = _tracer().start_as_current_span(name, kind=SpanKind.PRODUCER, attributes=attributes)
    with producer as span:
        headers = dict(call.headers)
        propagate.inject(headers)
        read = call.read

        def read_noting_the_id(data: Any) -> T:
            value = read(data)
            if isinstance(value, Job):
                span.set_attribute(MESSAGE_ID, str(value.id))
            return value

        try:
            yield dataclasses.replace(call, headers=headers, read=read_noting_the_id)
        except Exception as error:
            span.set_attribute(ERROR_TYPE, _error_type(error))
            raise  # recorded, and the status set, by the span as it ends


class _Processing:
    def __init__(self, span: Span) -> None:
        self.span = span

    def ended(self, outcome: Outcome, error: BaseException | None) -> None:
        self.span.set_attribute(OUTCOME, outcome.label)
        if outcome.completed or outcome.snooze_seconds is not None:
            return  # a snooze gives the job back unrun: not a failure
        if error is not None:
            self.span.record_exception(error)
        self.span.set_attribute(ERROR_TYPE, _error_type(error) if error else "_OTHER")
        self.span.set_status(Status(StatusCode.ERROR, outcome.error))


@contextmanager
def processing(job: Job) -> Iterator[_Processing]:
    """A consumer span for one run of ``job``'s handler, the child of the context the
    job was enqueued in (a root span when it carries none), current while it runs."""
    attributes = _operation("process", job.type)
    attributes |= {MESSAGE_ID: str(job.id), ATTEMPT: job.retry_count + 1}
    if job.worker_id is not None:
        attributes["messaging.client.id"] = job.worker_id
    parent = propagate.extract(job.trace_context or {})
    with _tracer().start_as_current_span(
        f"process {job.type}",
        context=parent,
        kind=SpanKind.CONSUMER,
        attributes=attributes,
        # A handler's exception is its outcome, not this block's: ``ended`` records it.
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        yield _Processing(span)


def _error_type(error: BaseException) -> str:
    """The exception's class, named with its module (builtins' without), for ``error.type``."""
    kind = type(error)
    module = "" if kind.__module__ == "builtins" else f"{kind.__module__}."
    return module + kind.__qualname__


def in_a_trace() -> bool:
    """Whether the calling thread is inside a recorded span (its context is one to send)."""
    return trace.get_current_span().get_span_context().is_valid


def _provider_set() -> bool:
    """Whether the application has set a tracer provider: until it does, OpenTelemetry
    records no span, and a span only carries on a trace context it was given."""
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def sends_traced() -> bool:
    """Whether a send's span would record or carry anything: not without a provider
    outside any trace context (its headers would get none)."""
    return _provider_set() or in_a_trace()


def processes_traced(job: Job) -> bool:
    """Whether a run's span of ``job`` would record or carry anything: not without a
    provider for a job enqueued outside any trace (its handler would see no context)."""
    return _provider_set() or bool(job.trace_context)
