"""Workflows in the storage, on every backend: waiting jobs are made in their insert's
transaction and released in the transaction that ends their last dependency."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import datetime, timedelta

import pytest

from queuelog.errors import ValidationFailed
from queuelog.models import DependencyFailure, EventKind, Finished, Job, JobStatus
from queuelog.storage.protocol import FinishParams, JobListParams, NewJob, Storage
from tests.storage.test_conformance import T0, claim, finish, new_job

pytestmark = pytest.mark.anyio

FAN_OUT = 10_000


def waiting_on(*ids: int, items: tuple[int, ...] = (), run: bool = False) -> NewJob:
    mode = DependencyFailure.RUN if run else DependencyFailure.CANCEL
    return replace(new_job(), depends_on=ids, depends_on_items=items, on_dependency_failure=mode)


async def test_a_job_with_dependencies_is_made_waiting_and_never_claimed(store: Storage) -> None:
    ((a, _),) = await store.job_insert_many([new_job()], T0)
    ((b, created),) = await store.job_insert_many([waiting_on(a.id)], T0)
    assert created and b.status is JobStatus.WAITING and b.depends_on == (a.id,)
    assert b.on_dependency_failure is DependencyFailure.CANCEL
    assert [j.id for j in await claim(store, limit=10)] == [a.id]
    events = await store.job_events(b.id)
    assert [(e.event, e.to_status) for e in events] == [(EventKind.ENQUEUED, JobStatus.WAITING)]


async def test_an_insert_naming_a_missing_job_stores_nothing(store: Storage) -> None:
    jobs = [new_job(), waiting_on(10_000)]
    with pytest.raises(ValidationFailed) as refused:
        await store.job_insert_many(jobs, T0)
    assert refused.value.extra["index"] == 1
    assert (await store.job_list(JobListParams(limit=10))).jobs == []


async def test_items_name_earlier_items_of_the_same_insert(store: Storage) -> None:
    jobs = [new_job(), waiting_on(items=(0,)), waiting_on(items=(0, 1))]
    made = await store.job_insert_many(jobs, T0)
    a, b, c = (job for job, _ in made)
    assert (b.depends_on, c.depends_on) == ((a.id,), (a.id, b.id))
    listed = (await store.job_list(JobListParams(limit=10, depends_on=a.id))).jobs
    assert [job.id for job in listed] == [c.id, b.id]


async def test_the_end_of_a_job_releases_its_dependents_in_its_transaction(
    store: Storage,
) -> None:
    ((a, _), (b, _)) = await store.job_insert_many([new_job(), new_job()], T0)
    jobs = [waiting_on(a.id), waiting_on(a.id, b.id, run=True), waiting_on(a.id, b.id)]
    made = await store.job_insert_many(jobs, T0)
    only_a, both_run, both = (job.id for job, _ in made)
    first, second = await claim(store, limit=2)
    await finish(store, first)
    await finish(store, second, error="boom", retryable=False)
    found = {job.id: job.status for job in await store.job_get_many([only_a, both_run, both])}
    assert found == {
        only_a: JobStatus.PENDING,
        both_run: JobStatus.PENDING,
        both: JobStatus.CANCELLED,
    }


async def test_a_released_job_is_ready_from_its_release_not_from_its_enqueue(
    store: Storage,
) -> None:
    """A job that waited an hour for its dependency reads as just ready: its ``run_at``
    (and the oldest ready age) starts at its release, as a retried job's does, while a
    ``run_at`` still to come is kept."""
    ((a, _),) = await store.job_insert_many([new_job()], T0)
    later, much_later = T0 + timedelta(hours=1), T0 + timedelta(hours=2)
    jobs = [waiting_on(a.id), replace(waiting_on(a.id), run_at=much_later)]
    made = await store.job_insert_many(jobs, T0)
    (held,) = await claim(store, now=later)
    await finish(store, held, now=later)
    now_ready, scheduled = await store.job_get_many([job.id for job, _ in made])
    assert (now_ready.status, now_ready.run_at) == (JobStatus.PENDING, later)
    assert (scheduled.status, scheduled.run_at) == (JobStatus.PENDING, much_later)
    stats = await store.job_stats(later + timedelta(seconds=5))
    assert stats.oldest_ready_at == later


@pytest.mark.parametrize("with_jobs", [True, False])
async def test_a_worker_s_batch_completion_releases_the_dependents(
    store: Storage, with_jobs: bool
) -> None:
    """Completions acknowledged in one statement, with or without the jobs answered,
    release their dependents in their transaction as a completion of one job does."""
    ((a, _), (b, _), (c, _)) = await store.job_insert_many([new_job()] * 3, T0)
    made = await store.job_insert_many([waiting_on(a.id, b.id), waiting_on(c.id)], T0)
    both, only_c = (job.id for job, _ in made)
    held = await claim(store, limit=3)
    items = [FinishParams(j.id, j.lease_token or "", "w", T0) for j in held if j.id != c.id]
    done = await store.job_finish_many(items, with_jobs=with_jobs)
    assert [(d.id, d.status) for d in done] == [
        (a.id, JobStatus.COMPLETED),
        (b.id, JobStatus.COMPLETED),
    ]
    assert all(isinstance(d, Job if with_jobs else Finished) for d in done)
    found = {job.id: job.status for job in await store.job_get_many([both, only_c])}
    assert found == {both: JobStatus.PENDING, only_c: JobStatus.WAITING}


async def test_completing_a_job_with_ten_thousand_dependents_is_one_call(
    store: Storage, record_property: pytest.RecordProperty
) -> None:
    ((a, _),) = await store.job_insert_many([new_job()], T0)
    await store.job_insert_many([waiting_on(a.id)] * FAN_OUT, T0)
    (held,) = await claim(store)
    started = time.perf_counter()
    await finish(store, held)  # one transaction: the completion and every release
    seconds = time.perf_counter() - started
    # Recorded, never asserted: a shared machine's speed says nothing of the code.
    record_property("fan_out_release_seconds", round(seconds, 3))
    print(f"\ncompleting a job with {FAN_OUT:,} dependents took {seconds:.3f} s")
    stats = await store.job_stats(T0)
    assert stats.counts.get(("pending", "noop")) == FAN_OUT
    assert stats.counts.get(("waiting", "noop")) is None
    counts = await store.job_event_counts(T0, T0.replace(year=2027), 86_400 * 365)
    assert {c.event: c.count for c in counts}[EventKind.READY] == FAN_OUT


DEEP = 2_000


async def deep_chain(store: Storage) -> list[int]:
    """A chain of ``DEEP`` jobs, each waiting for the one before it: one root and every
    other job a level further from it."""
    jobs = [replace(new_job(), max_retries=0)] + [waiting_on(items=(i,)) for i in range(DEEP - 1)]
    return [job.id for job, _ in await store.job_insert_many(jobs, T0)]


async def statuses(store: Storage, ids: list[int]) -> list[JobStatus]:
    by_id = {job.id: job.status for job in await store.job_get_many(ids)}
    return [by_id[job_id] for job_id in ids]


async def events_at(store: Storage, at: datetime) -> dict[EventKind, int]:
    counts = await store.job_event_counts(at, at + timedelta(seconds=1), 1)
    return {count.event: count.count for count in counts}


async def test_cancelling_the_root_of_a_deep_chain_cancels_every_level_and_a_retry_brings_all_back(
    store: Storage,
) -> None:
    ids = await deep_chain(store)
    cancelled_at, retried_at = T0 + timedelta(hours=1), T0 + timedelta(hours=2)
    await store.job_cancel(ids[0], "admin", cancelled_at)
    assert set(await statuses(store, ids)) == {JobStatus.CANCELLED}
    assert (await events_at(store, cancelled_at))[EventKind.DEPENDENCY_FAILED] == DEEP - 1
    last = (await store.job_events(ids[-1]))[-1]
    assert (last.event, last.detail) == (EventKind.DEPENDENCY_FAILED, f"job {ids[-2]} cancelled")
    root = await store.job_requeue(ids[0], "admin", retried_at)
    assert root.status is JobStatus.PENDING
    assert await statuses(store, ids[1:]) == [JobStatus.WAITING] * (DEEP - 1)
    assert (await events_at(store, retried_at))[EventKind.REQUEUED] == DEEP


async def test_an_admin_retry_of_a_deep_chain_s_failed_root_makes_every_level_wait_for_it_again(
    store: Storage,
) -> None:
    ids = await deep_chain(store)
    (held,) = await claim(store)
    await finish(store, held, error="boom", retryable=False)
    assert await statuses(store, ids) == [JobStatus.FAILED] + [JobStatus.CANCELLED] * (DEEP - 1)
    first = (await store.job_events(ids[1]))[-1]
    assert (first.event, first.detail) == (EventKind.DEPENDENCY_FAILED, f"job {ids[0]} failed")
    await store.job_requeue(ids[0], "admin", T0)
    assert await statuses(store, ids[1:]) == [JobStatus.WAITING] * (DEEP - 1)
    # Each waits for the one before it again: the root's completion frees the next alone.
    (held,) = await claim(store)
    await finish(store, held)
    after = await statuses(store, ids)
    assert after[:3] == [JobStatus.COMPLETED, JobStatus.PENDING, JobStatus.WAITING]
    assert set(after[2:]) == {JobStatus.WAITING}
