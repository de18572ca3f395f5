"""PostgreSQL: retention on one node while another enqueues a job that depends on the
job being pruned. Nothing can stop the pruner's statement between its snapshot and its
row locks, so the race is run many times over a queue long enough for the pruner to
read for a while."""

from __future__ import annotations

import asyncio
import random
from dataclasses import replace
from datetime import datetime, timedelta

import pytest

from queuelog.errors import ValidationFailed
from queuelog.models import JobStatus
from queuelog.storage.postgres.store import PostgresStorage
from queuelog.storage.protocol import NewJob
from tests.storage.test_conformance import T0, claim, finish, new_job
from tests.storage.test_workflows import waiting_on

pytestmark = pytest.mark.anyio

FILLERS = 3000  # old completed jobs that pending jobs depend on: read, never pruned
ROUNDS = 150
CUTOFFS = {JobStatus.COMPLETED: T0 + timedelta(days=1)}


async def completed(store: PostgresStorage, count: int, at: datetime = T0) -> list[int]:
    """``count`` jobs enqueued, claimed and completed ``at``; their ids."""
    ids: list[int] = []
    while len(ids) < count:
        size = min(500, count - len(ids))
        await store.job_insert_many([new_job() for _ in range(size)], T0)
        for job in await claim(store, at, limit=size, types=["noop"]):
            await finish(store, job, at)
            ids.append(job.id)
    return ids


def dependent_of(job_id: int) -> NewJob:
    """A job of another type than the ones completed here, waiting for ``job_id``."""
    return replace(waiting_on(job_id), type="send_email")


async def _enqueue_dependent(producer: PostgresStorage, target: int) -> int | None:
    """A job depending on ``target``, enqueued a moment later; None if it was refused
    because ``target`` was pruned first."""
    await asyncio.sleep(random.uniform(0, 0.005))
    try:
        ((made, _),) = await producer.job_insert_many([dependent_of(target)], T0)
    except ValidationFailed:
        return None
    return made.id


async def test_hardening_52_an_enqueue_naming_a_job_being_pruned_keeps_it_or_is_refused(
    nodes: list[PostgresStorage],
) -> None:
    """The enqueue commits its dependency while the pruner reads: the pruner must see it
    once it holds the job's row, so the job is kept (the dependent pending) or pruned
    first (the enqueue refused). It pruned it from under a pending dependent."""
    pruner, producer = nodes[0], nodes[1]
    for start in range(0, FILLERS, 500):
        fillers = await completed(pruner, min(500, FILLERS - start))
        await pruner.job_insert_many([dependent_of(i) for i in fillers], T0)
    lost = []
    for _ in range(ROUNDS):
        (target,) = await completed(pruner, 1, T0 + timedelta(hours=1))  # read last
        _, dependent = await asyncio.gather(
            pruner.job_prune(CUTOFFS, limit=FILLERS), _enqueue_dependent(producer, target)
        )
        if dependent is not None and await pruner.job_get(target) is None:
            lost.append((target, dependent))
    assert not lost, f"pruned from under a pending dependent: {lost}"
