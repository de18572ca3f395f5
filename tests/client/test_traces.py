"""One trace from the request that enqueued a job to the handler that ran it: the SDK's
producer span, the W3C context through a real server, the Worker's consumer span, with
OpenTelemetry's SDK recording in memory. Without OpenTelemetry nothing of it happens."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import threading
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from queuelog.client import AsyncClient, Client, Fail, Job, Snooze, Worker
from tests.client.test_worker import running, settled
from tests.realserver import RealServer, wait_until
from tests.spans import InMemorySpanExporter, named

tracer = trace.get_tracer("tests")


def _attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def _id_outcome(span: ReadableSpan) -> tuple[str, str]:
    attributes = _attributes(span)
    return attributes["messaging.message.id"], attributes["messaging.queuelog.job.outcome"]


def _parent_id(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def test_a_handler_runs_in_a_child_span_of_the_enqueue_s_producer_span(
    server: RealServer, spans: InMemorySpanExporter
) -> None:
    worker = Worker(concurrency=1, wait_seconds=1)

    @worker.handler("noop")
    def handle(job: Job) -> None:
        with tracer.start_as_current_span("send the mail"):
            pass

    shop = Client(server.url, server.keys["shop"])
    with shop, tracer.start_as_current_span("POST /checkout") as request:
        job = shop.enqueue("noop", {"order": 42})
    with running(worker, server):
        wait_until(settled(server, job.id), "the job to complete")
        wait_until(lambda: bool(named(spans, "send the mail")), "the handler's span")
    (send,) = named(spans, "send noop")
    (process,) = named(spans, "process noop")
    (inner,) = named(spans, "send the mail")
    trace_id = request.get_span_context().trace_id
    assert {s.context.trace_id for s in (send, process, inner)} == {trace_id}
    assert _parent_id(send) == request.get_span_context().span_id
    assert _parent_id(process) == send.context.span_id  # through the server, in headers
    assert _parent_id(inner) == process.context.span_id  # current while the handler runs
    assert (send.kind, process.kind) == (SpanKind.PRODUCER, SpanKind.CONSUMER)
    assert _attributes(send) == {
        "messaging.system": "queuelog",
        "messaging.operation.name": "send",
        "messaging.operation.type": "send",
        "messaging.destination.name": "noop",
        "messaging.message.id": str(job.id),
    }
    attributes = _attributes(process)
    assert attributes.pop("messaging.client.id").startswith("mailer")
    assert attributes == {
        "messaging.system": "queuelog",
        "messaging.operation.name": "process",
        "messaging.operation.type": "process",
        "messaging.destination.name": "noop",
        "messaging.message.id": str(job.id),
        "messaging.queuelog.job.attempt": 1,
        "messaging.queuelog.job.outcome": "completed",
    }
    assert process.status.status_code is StatusCode.UNSET and not process.events


def test_enqueues_made_at_once_in_different_traces_each_keep_their_own(
    server: RealServer, spans: InMemorySpanExporter
) -> None:
    shop = Client(server.url, server.keys["shop"])
    barrier = threading.Barrier(8)
    traces: dict[int, int] = {}

    def request(number: int) -> None:
        with tracer.start_as_current_span(f"request {number}") as span:
            barrier.wait(timeout=10)
            job = shop.enqueue("noop", {"request": number})
        traces[job.id] = span.get_span_context().trace_id

    with shop:
        threads = [threading.Thread(target=request, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
        with Client(server.url, server.keys["mailer"]) as mailer:
            claimed = mailer.claim(["noop"], limit=8)
    assert len(traces) == len(claimed) == 8
    for job in claimed:
        assert job.trace_context is not None
        assert int(job.trace_context["traceparent"].split("-")[1], 16) == traces[job.id]


def test_a_failing_handler_s_span_records_the_exception_and_the_error(
    server: RealServer, spans: InMemorySpanExporter
) -> None:
    worker = Worker(concurrency=2, wait_seconds=1)
    snoozed: list[int] = []

    @worker.handler("noop")
    def handle(job: Job) -> None:
        if job.payload["kind"] == "fail":
            raise Fail("no such mailbox")
        if job.retry_count == 0:
            raise ConnectionError("smtp down")
        if not snoozed:  # the second attempt is given back once, then runs
            snoozed.append(job.id)
            raise Snooze(0)

    with Client(server.url, server.keys["shop"]) as shop, tracer.start_as_current_span("batch"):
        fail, crash = shop.enqueue("noop", {"kind": "fail"}), shop.enqueue("noop", {"kind": "x"})
    with running(worker, server):
        wait_until(settled(server, fail.id, crash.id), "both jobs to settle")
    by_outcome = {_id_outcome(s): s for s in named(spans, "process noop")}
    failed = by_outcome[str(fail.id), "failed"]
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.status.description == "no such mailbox"
    assert _attributes(failed)["error.type"] == "queuelog.client.outcome.Fail"
    retried = by_outcome[str(crash.id), "retry"]
    assert retried.status.status_code is StatusCode.ERROR
    assert _attributes(retried)["error.type"] == "ConnectionError"
    assert _attributes(retried)["messaging.queuelog.job.attempt"] == 1
    (event,) = retried.events
    assert event.name == "exception"
    assert dict(event.attributes or {})["exception.type"] == "ConnectionError"
    assert dict(event.attributes or {})["exception.message"] == "smtp down"
    snoozed = by_outcome[str(crash.id), "snoozed"]  # given back unrun: not a failure
    assert snoozed.status.status_code is StatusCode.UNSET and not snoozed.events
    completed = by_outcome[str(crash.id), "completed"]
    assert _attributes(completed)["messaging.queuelog.job.attempt"] == 2  # a snooze spends none
    assert all(s.parent is not None for s in by_outcome.values())


def test_an_async_batch_is_one_send_span_and_each_job_its_child(
    server: RealServer, spans: InMemorySpanExporter
) -> None:
    worker = Worker(concurrency=2, wait_seconds=1)

    @worker.handler("noop")
    async def handle(job: Job) -> None:
        await asyncio.sleep(0)
        assert trace.get_current_span().get_span_context().span_id != 0

    async def enqueue() -> list[int]:
        async with AsyncClient(server.url, server.keys["shop"]) as shop:
            made = await shop.enqueue_many([{"type": "noop"}, {"type": "noop"}])
            return [m.job.id for m in made]

    ids = asyncio.run(enqueue())
    with running(worker, server):
        wait_until(settled(server, *ids), "the batch to complete")
    (send,) = named(spans, "send noop")
    assert _attributes(send)["messaging.batch.message_count"] == 2
    assert "messaging.message.id" not in _attributes(send)
    processes = named(spans, "process noop")
    assert sorted(int(_attributes(p)["messaging.message.id"]) for p in processes) == ids
    assert {_parent_id(p) for p in processes} == {send.context.span_id}
    assert send.parent is None  # enqueued outside any span: the send starts the trace


# Run in a process where OpenTelemetry cannot be imported, as where it is not installed.
WITHOUT_OTEL = """
import json, sys, threading
sys.modules["opentelemetry"] = None
from queuelog import Client, Worker
url, shop, mailer = sys.argv[1:]
worker = Worker(concurrency=1, wait_seconds=1)
seen = []
@worker.handler("noop")
def handle(job):
    seen.append(job.trace_context)
    worker.stop()
with Client(url, shop) as client:
    job = client.enqueue("noop", {})
with Client(url, mailer) as client:
    worker.run(client)
loaded = [m for m, module in sys.modules.items() if "opentelemetry" in m and module is not None]
print(json.dumps({"seen": seen, "otel": loaded}))
"""


def _run_apart(script: str, server: RealServer) -> Any:
    """What ``script``, run in a Python process of its own against ``server`` with the
    shop's and the mailer's keys, printed last, as JSON."""
    keys = (server.keys["shop"], server.keys["mailer"])
    done = subprocess.run(
        [sys.executable, "-c", script, server.url, *keys],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_without_opentelemetry_jobs_run_untraced(server: RealServer) -> None:
    assert _run_apart(WITHOUT_OTEL, server) == {"seen": [None], "otel": []}


# Run in a process where OpenTelemetry is installed but no tracer provider is set: a
# context given to the process (by a request's headers, say) still travels with its
# jobs, and a job enqueued outside any context runs in none.
WITHOUT_PROVIDER = """
import json, sys
from opentelemetry import context, trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, TraceFlags
from queuelog import Client, Worker
url, shop, mailer = sys.argv[1:]
worker = Worker(concurrency=1, wait_seconds=1)
seen = {}
@worker.handler("noop")
def handle(job):
    current = trace.get_current_span().get_span_context()
    seen[job.payload["n"]] = [bool(job.trace_context), f"{current.trace_id:032x}", current.is_valid]
    if len(seen) == 2:
        worker.stop()
given = SpanContext(0xABC, 0xDEF, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))
with Client(url, shop) as client:
    client.enqueue("noop", {"n": "outside"})
    token = context.attach(trace.set_span_in_context(NonRecordingSpan(given)))
    client.enqueue("noop", {"n": "given"})
    context.detach(token)
with Client(url, mailer) as client:
    worker.run(client)
print(json.dumps(seen))
"""


def test_without_a_tracer_provider_a_given_trace_context_still_reaches_the_handler(
    server: RealServer,
) -> None:
    assert _run_apart(WITHOUT_PROVIDER, server) == {
        "outside": [False, "0" * 32, False],
        "given": [True, f"{0xABC:032x}", True],
    }
