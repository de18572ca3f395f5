"""Retention and workflows, on every backend: a job that another job depends on is kept
until that one is pruned, so a redrive of a dependent that ended finds its dependencies
as they were (to wait for, or to read)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from queuelog.models import JobStatus
from queuelog.storage.protocol import Storage
from tests.storage.test_conformance import T0, claim, finish, new_job
from tests.storage.test_workflows import waiting_on

pytestmark = pytest.mark.anyio

LATER = T0 + timedelta(days=400)


async def test_hardening_53_a_failed_dependency_outlives_its_retention_while_its_dependent_is_kept(
    store: Storage,
) -> None:
    """B was cancelled by A's failure and is kept (cancelled jobs kept for ever here):
    A is kept too, so a redrive of B waits for A instead of running without it."""
    ((a, _),) = await store.job_insert_many([replace(new_job(), max_retries=0)], T0)
    ((b, _),) = await store.job_insert_many([waiting_on(a.id)], T0)
    (held,) = await claim(store)
    await finish(store, held, error="boom", retryable=False)
    assert await store.job_prune({JobStatus.FAILED: LATER}) == 0
    again = await store.job_requeue(b.id, "root", T0)
    assert again.status is JobStatus.WAITING
    assert [job.id for job in await claim(store, limit=10)] == []


async def test_hardening_53_a_completed_dependency_is_kept_for_a_dependent_a_redrive_brings_back(
    store: Storage,
) -> None:
    """C waits for X (completed) and Y (cancelled, which cancelled C): X is kept while C
    is, so once Y is redriven and completes, C runs with both its dependencies there."""
    ((x, _), (y, _)) = await store.job_insert_many([new_job(), new_job("send_email")], T0)
    ((c, _),) = await store.job_insert_many([waiting_on(x.id, y.id)], T0)
    (held,) = await claim(store, types=["noop"])
    await finish(store, held)
    await store.job_cancel(y.id, "shop", T0)
    assert (await store.job_get(c.id)).status is JobStatus.CANCELLED  # type: ignore[union-attr]
    assert await store.job_prune({JobStatus.COMPLETED: LATER}) == 0
    await store.job_requeue(y.id, "root", T0)
    (redriven,) = await claim(store, types=["send_email"])
    await finish(store, redriven)
    (dependent,) = await claim(store)
    assert dependent.id == c.id
    assert {job.id for job in await store.job_get_many([x.id, y.id])} == {x.id, y.id}


async def test_hardening_53_a_chain_of_completed_jobs_is_pruned_in_one_pass(
    store: Storage,
) -> None:
    """Each job waits for the one before (jobs run in order): a completed dependent never
    runs again, so it keeps nothing; only the link the pending tail waits for is kept."""
    ((first, _),) = await store.job_insert_many([new_job()], T0)
    chain = [first.id]
    for _ in range(49):
        ((link, _),) = await store.job_insert_many([waiting_on(chain[-1])], T0)
        (held,) = await claim(store)
        await finish(store, held)
        chain.append(link.id)
    (held,) = await claim(store)
    await finish(store, held)  # the 50th link
    ((tail, _),) = await store.job_insert_many([waiting_on(chain[-1])], T0)
    assert tail.status is JobStatus.PENDING
    assert await store.job_prune({JobStatus.COMPLETED: LATER}) == 49
    assert [job.id for job in await store.job_get_many(chain)] == [chain[-1]]
