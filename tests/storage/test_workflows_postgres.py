"""Workflows on PostgreSQL nodes that change the same graph at once: a redrive and the
end (or redrive) of another dependency, interleaved at the worst moment. Another
session holds the lock of the job both change, so the first operation waits there,
after it has read how the dependencies stand, while the second runs. The stores are
driven through the storage protocol; only the interleaving and what is locked are read
with SQL, since nothing else can stop a transaction between two of its statements."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

import psycopg
import pytest

from queuelog.models import Job, JobStatus
from queuelog.storage.postgres.store import PostgresStorage
from queuelog.storage.protocol import Storage
from tests.storage.test_conformance import T0, claim, finish, new_job
from tests.storage.test_workflows import waiting_on

pytestmark = pytest.mark.anyio

WAIT_SECONDS = 10


@asynccontextmanager
async def row_held(url: str, job_id: int) -> AsyncIterator[int]:
    """Hold the job's row lock in a transaction of another session; its backend's pid."""
    async with await psycopg.AsyncConnection.connect(url) as conn:
        await conn.execute("SELECT id FROM jobs WHERE id = %s FOR UPDATE", (job_id,))
        yield conn.info.backend_pid
        await conn.rollback()


async def blocked_by(url: str, pid: int) -> list[int]:
    """The sessions waiting for a lock that session ``pid`` holds."""
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        query = "SELECT pid FROM pg_stat_activity WHERE %s = ANY(pg_blocking_pids(pid))"
        return [row[0] for row in await (await conn.execute(query, (pid,))).fetchall()]


async def until(check: Callable[[], Awaitable[bool]]) -> None:
    for _ in range(WAIT_SECONDS * 50):
        if await check():
            return
        await asyncio.sleep(0.02)
    raise AssertionError("the operation neither ended nor waited for a lock")


async def interleaved(
    url: str, held: int, first: Awaitable[object], second: Awaitable[object]
) -> None:
    """Run ``first`` until it waits for the row of job ``held``; then ``second`` until it
    ends or waits for ``first``; then let both go on."""
    async with row_held(url, held) as holder:
        first_task = asyncio.ensure_future(first)
        await until(lambda: _waits(url, holder))
        (first_pid,) = await blocked_by(url, holder)
        second_task = asyncio.ensure_future(second)

        async def second_settled() -> bool:
            return second_task.done() or bool(await blocked_by(url, first_pid))

        await until(second_settled)
    await asyncio.gather(first_task, second_task)


async def _waits(url: str, pid: int) -> bool:
    return bool(await blocked_by(url, pid))


async def two_held_and_their_dependent(store: Storage) -> tuple[Job, Job, Job]:
    """Two jobs without retries, claimed, and a job waiting for both."""
    made = await store.job_insert_many([new_job(max_retries=0), new_job(max_retries=0)], T0)
    x, y = (job for job, _ in made)
    ((c, _),) = await store.job_insert_many([waiting_on(x.id, y.id)], T0)
    held = {job.id: job for job in await claim(store, limit=2)}
    return held[x.id], held[y.id], c


async def test_hardening_40_a_redrive_meeting_another_dependency_s_failure_leaves_it_cancelled(
    schema: str, nodes: list[PostgresStorage]
) -> None:
    one, other = nodes[:2]
    x, y, c = await two_held_and_their_dependent(one)
    await finish(one, x, error="boom", retryable=False)
    redrive = one.job_requeue(x.id, "admin", T0)
    failure = finish(other, y, error="boom", retryable=False)
    await interleaved(schema, c.id, redrive, failure)
    job = await one.job_get(c.id)
    assert job is not None and job.status is JobStatus.CANCELLED, "y failed for good"


async def test_hardening_40_two_redrives_of_a_job_s_failed_dependencies_at_once_bring_it_back(
    schema: str, nodes: list[PostgresStorage]
) -> None:
    one, other = nodes[:2]
    x, y, c = await two_held_and_their_dependent(one)
    ((g, _),) = await one.job_insert_many([waiting_on(c.id)], T0)
    for job in (x, y):
        await finish(one, job, error="boom", retryable=False)
    first = one.job_requeue(x.id, "admin", T0)
    second = other.job_requeue(y.id, "admin", T0)
    await interleaved(schema, c.id, first, second)
    found = {job.id: job.status for job in await one.job_get_many([c.id, g.id])}
    assert found == {c.id: JobStatus.WAITING, g.id: JobStatus.WAITING}


def generic_plans(url: str) -> str:
    """``url`` whose sessions plan prepared statements once, for any parameters: a plan
    that reads the waiting jobs in the order they lie in the table, not by id."""
    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))
    query["options"] = f"{query.get('options', '')} -cplan_cache_mode=force_generic_plan"
    return urlunsplit(parts._replace(query=urlencode(query, quote_via=quote)))  # %20, not +


async def locked_now(url: str, job_ids: list[int]) -> list[int]:
    """Those of ``job_ids`` whose row another transaction holds now."""
    held = []
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        for job_id in job_ids:
            try:
                async with conn.transaction():
                    query = "SELECT id FROM jobs WHERE id = %s FOR UPDATE NOWAIT"
                    await conn.execute(query, (job_id,))
            except psycopg.errors.LockNotAvailable:
                held.append(job_id)
    return held


async def test_hardening_39_an_ending_job_takes_its_dependents_locks_in_id_order(
    schema: str,
) -> None:
    """Two jobs that end at once and share dependents take their locks in one order, so
    neither holds one that the other waits for (a deadlock, then a 503 after retries)."""
    store = PostgresStorage(generic_plans(schema), pool_size=1)
    try:
        for _ in range(6):  # the release statement is prepared on its fifth run
            ((warm, _),) = await store.job_insert_many([new_job()], T0)
            await store.job_insert_many([waiting_on(warm.id)], T0)
            for _ in range(2):  # the job, then the one it released
                (held,) = await claim(store)
                await finish(store, held)
        made = await store.job_insert_many([new_job(), new_job(), new_job()], T0)
        ending, other, first_only = (job for job, _ in made)
        dependents = [waiting_on(ending.id, other.id) for _ in range(20)]
        dependents[0] = waiting_on(ending.id, other.id, first_only.id)
        ids = [job.id for job, _ in await store.job_insert_many(dependents, T0)]
        # The lowest id's row moves past the others' in the table: its count goes down.
        held_jobs = {job.id: job for job in await claim(store, limit=3)}
        await finish(store, held_jobs[first_only.id])
        async with row_held(schema, ids[0]) as holder:
            completion = asyncio.ensure_future(finish(store, held_jobs[ending.id]))
            await until(lambda: _waits(schema, holder))
            assert await locked_now(schema, ids[1:]) == [], "it waits for the lowest id first"
        await completion
    finally:
        store.close()


async def test_hardening_39_a_failure_takes_its_dependents_locks_in_id_order_too(
    schema: str, nodes: list[PostgresStorage]
) -> None:
    """A failure cancels its `cancel`-mode dependents and counts itself off the others:
    were those two statements to lock each their own rows, it would take a `cancel` join
    before a `run` join of a lower id, which a completion of a sibling takes the other
    way round."""
    store = nodes[0]
    made = await store.job_insert_many([new_job(max_retries=0), new_job()], T0)
    failing, sibling = (job for job, _ in made)
    joins = [waiting_on(failing.id, sibling.id, run=True), waiting_on(failing.id, sibling.id)]
    run_join, cancel_join = (job.id for job, _ in await store.job_insert_many(joins, T0))
    held = {job.id: job for job in await claim(store, limit=2)}
    async with row_held(schema, run_join) as holder:
        failure = asyncio.ensure_future(finish(store, held[failing.id], error="x", retryable=False))
        await until(lambda: _waits(schema, holder))
        assert await locked_now(schema, [cancel_join]) == [], "it waits for the lower id first"
    await failure
    found = {job.id: job.status for job in await store.job_get_many([run_join, cancel_join])}
    assert found == {run_join: JobStatus.WAITING, cancel_join: JobStatus.CANCELLED}


async def test_hardening_40_a_redrive_locks_its_job_with_what_it_reads_in_id_order(
    schema: str, nodes: list[PostgresStorage]
) -> None:
    """Two redrives of dependencies of one job at once: were each to lock its own job
    first, then the others it reads, each could hold one that the other waits for."""
    store = nodes[0]
    made = await store.job_insert_many([new_job(max_retries=0) for _ in range(3)], T0)
    x, y, z = (job for job, _ in made)
    ((c, _),) = await store.job_insert_many([waiting_on(x.id, y.id, z.id, run=True)], T0)
    for job in await claim(store, limit=2):  # x and y fail for good; c waits for z
        await finish(store, job, error="boom", retryable=False)
    async with row_held(schema, x.id) as holder:
        redrive = asyncio.ensure_future(store.job_requeue(y.id, "admin", T0))
        await until(lambda: _waits(schema, holder))
        assert await locked_now(schema, [y.id, z.id]) == [], "it waits for the lowest id first"
    assert (await redrive).status is JobStatus.PENDING
    job = await store.job_get(c.id)
    assert job is not None and job.status is JobStatus.WAITING


async def test_hardening_72_a_batch_with_unique_keys_takes_its_dependencies_locks_in_id_order(
    schema: str, nodes: list[PostgresStorage]
) -> None:
    """A batch with unique keys is made job by job, each job settled before the next (so
    a later job's key meets what an earlier one became); the dependencies all its jobs
    name are held first, in id order: job by job, two batches naming them the other way
    round could each hold one that the other waits for."""
    store = nodes[0]
    made = await store.job_insert_many([new_job(), new_job()], T0)
    x, y = (job for job, _ in made)
    batch = [replace(waiting_on(y.id), unique_key="a"), replace(waiting_on(x.id), unique_key="b")]
    async with row_held(schema, y.id) as holder:
        insert = asyncio.ensure_future(store.job_insert_many(batch, T0))
        await until(lambda: _waits(schema, holder))
        assert await locked_now(schema, [x.id]) == [x.id], "it holds the lower id first"
    statuses = [job.status for job, _ in await insert]
    assert statuses == [JobStatus.WAITING, JobStatus.WAITING]
