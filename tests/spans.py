"""Spans recorded in memory by OpenTelemetry's SDK, for the trace tests.

A process has one tracer provider, set here at the first ``recording()``. It samples
only while a test records, so the other tests' enqueues and handlers make no spans
that would pile up in memory; the spans a test records are cleared when it ends.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF, ALWAYS_ON, Sampler, SamplingResult
from opentelemetry.trace import Link, SpanKind, TraceState

_exporter = InMemorySpanExporter()
_recording = threading.Event()
_installed = threading.Lock()
_provider: list[TracerProvider] = []


class _WhileRecording(Sampler):
    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Any = None,
        links: Sequence[Link] | None = None,
        trace_state: TraceState | None = None,
    ) -> SamplingResult:
        sampler = ALWAYS_ON if _recording.is_set() else ALWAYS_OFF
        return sampler.should_sample(
            parent_context, trace_id, name, kind, attributes, links, trace_state
        )

    def get_description(self) -> str:
        return "while a trace test records"


def _install() -> None:
    with _installed:
        if not _provider:
            provider = TracerProvider(sampler=_WhileRecording())
            provider.add_span_processor(SimpleSpanProcessor(_exporter))
            trace.set_tracer_provider(provider)
            _provider.append(provider)


@contextmanager
def recording() -> Iterator[InMemorySpanExporter]:
    """Every span ended in this process while the block runs, in ``get_finished_spans()``."""
    _install()
    _exporter.clear()
    _recording.set()
    try:
        yield _exporter
    finally:
        _recording.clear()
        _exporter.clear()


def named(spans: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in spans.get_finished_spans() if s.name == name]
