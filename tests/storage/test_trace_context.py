"""A job's trace context on every backend: stored with the job by every insert (one job,
a batch sharing one, a batch of keyed jobs each with its own), read back and handed to
the claimer; a job enqueued without one has none."""

from __future__ import annotations

from dataclasses import replace

import pytest

from queuelog.models import OnDuplicate, TraceContext
from queuelog.storage.protocol import NewJob, Storage
from tests.storage.test_conformance import T0, claim, new_job

pytestmark = pytest.mark.anyio

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
OTHER = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"
TRACE = TraceContext(PARENT, "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7")


def traced(trace: TraceContext | None = TRACE, **kw: object) -> NewJob:
    return replace(new_job(**kw), trace_context=trace)  # type: ignore[arg-type]


async def test_a_job_keeps_its_trace_context_from_insert_to_claim(store: Storage) -> None:
    ((job, created),) = await store.job_insert_many([traced()], T0)
    assert created and job.trace_context == TRACE
    stored = await store.job_get(job.id)
    assert stored is not None and stored.trace_context == TRACE
    (claimed,) = await claim(store)
    assert claimed.id == job.id and claimed.trace_context == TRACE


async def test_a_job_without_a_trace_context_has_none(store: Storage) -> None:
    ((job, _),) = await store.job_insert_many([new_job()], T0)
    ((bare, _),) = await store.job_insert_many([traced(TraceContext(OTHER))], T0)
    claimed = {j.id: j for j in await claim(store, limit=2)}
    assert claimed[job.id].trace_context is None
    assert claimed[bare.id].trace_context == TraceContext(OTHER, None)


async def test_a_batch_stores_its_one_trace_context_with_every_job(store: Storage) -> None:
    results = await store.job_insert_many([traced(), traced(job_type="send_email")], T0)
    for job, _ in results:
        stored = await store.job_get(job.id)
        assert stored is not None and stored.trace_context == TRACE


async def test_keyed_jobs_of_one_batch_each_keep_their_own(store: Storage) -> None:
    batch = [
        traced(key="a", fingerprint="f"),
        traced(TraceContext(OTHER), key="b", fingerprint="f"),
        traced(None, key="c", fingerprint="f"),
    ]
    results = await store.job_insert_many(batch, T0)
    for (job, _), new in zip(results, batch, strict=True):
        stored = await store.job_get(job.id)
        assert stored is not None and stored.trace_context == new.trace_context


async def test_a_repeated_or_replacing_enqueue_leaves_the_job_its_first_context(
    store: Storage,
) -> None:
    ((first, _),) = await store.job_insert_many([traced(key="k", fingerprint="f")], T0)
    again = traced(TraceContext(OTHER), key="k", fingerprint="f")
    ((repeat, created),) = await store.job_insert_many([again], T0)
    assert not created and repeat.id == first.id and repeat.trace_context == TRACE
    holder = replace(traced(), unique_key="u")
    ((held, _),) = await store.job_insert_many([holder], T0)
    replacing = replace(holder, trace_context=None, on_duplicate=OnDuplicate.REPLACE)
    ((replaced, created),) = await store.job_insert_many([replacing], T0)
    assert not created and replaced.id == held.id and replaced.trace_context == TRACE
