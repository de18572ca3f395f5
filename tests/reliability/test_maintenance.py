"""Maintenance: the sweeper rescues expired leases, the pruner applies retention."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest

from queuelog.auth import KeyRing
from queuelog.clock import FakeClock
from queuelog.config import Settings
from queuelog.maintenance import Maintenance
from queuelog.models import ApiKey, DependencyFailure, JobStatus, Priority, Role
from queuelog.service import JobService
from queuelog.specs import EnqueueSpec, FinishSpec
from queuelog.storage.protocol import JobListParams
from queuelog.storage.sqlite.store import SqliteStorage
from tests.conftest import make_settings

pytestmark = pytest.mark.anyio

DAY = 86_400.0
ALL = JobListParams(limit=5000)
RUN = DependencyFailure.RUN


async def _enqueue(service: JobService, shop: ApiKey, key: str | None = None) -> int:
    ((job, _),) = await service.enqueue_many(shop, [EnqueueSpec(type="noop", idempotency_key=key)])
    return job.id


async def _complete(service: JobService, mailer: ApiKey) -> int:
    (job,) = await service.claim(mailer)
    assert job.lease_token is not None
    return (await service.finish(mailer, FinishSpec(job.id, job.lease_token))).id


async def _fail(service: JobService, mailer: ApiKey) -> int:
    (job,) = await service.claim(mailer)
    assert job.lease_token is not None
    spec = FinishSpec(job.id, job.lease_token, error="boom", retryable=False)
    return (await service.finish(mailer, spec)).id


async def _cancel(service: JobService, shop: ApiKey) -> int:
    job_id = await _enqueue(service, shop)
    return (await service.cancel(shop, job_id)).id


async def test_run_once_rescues_expired_leases_and_prunes(
    service: JobService, clock: FakeClock, shop: ApiKey, mailer: ApiKey
) -> None:
    maintenance = Maintenance(service)
    await _enqueue(service, shop)
    old = await _complete(service, mailer)
    clock.advance(7 * DAY + 1)
    await _enqueue(service, shop)
    (held,) = await service.claim(mailer, lease_seconds=5)
    assert await maintenance.run_once() == (0, 1)
    assert await service.storage.job_get(old) is None
    clock.advance(5)
    assert await maintenance.run_once() == (1, 0)
    rescued = await service.storage.job_get(held.id)
    assert rescued is not None and rescued.status == JobStatus.PENDING
    assert await maintenance.run_once(prune=False) == (0, 0)


async def test_maintenance_loop_rescues_without_any_claim(
    service: JobService, clock: FakeClock, shop: ApiKey, mailer: ApiKey
) -> None:
    maintenance = Maintenance(service, sweep_interval=0.02, prune_interval=0.04)
    job_id = await _enqueue(service, shop)
    await service.claim(mailer, lease_seconds=5)
    clock.advance(5)
    maintenance.start()
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            job = await service.storage.job_get(job_id)
            assert job is not None
            if job.status == JobStatus.PENDING:
                break
            await asyncio.sleep(0.02)
        assert job.status == JobStatus.PENDING and job.error == "lease expired"
    finally:
        await maintenance.stop()


async def test_maintenance_loop_survives_a_failing_pass(service: JobService) -> None:
    calls: list[int] = []

    async def broken() -> list[object]:
        calls.append(1)
        raise RuntimeError("database unavailable")

    service.rescue_expired = broken  # type: ignore[method-assign]
    maintenance = Maintenance(service, sweep_interval=0.01)
    maintenance.start()
    try:
        deadline = time.monotonic() + 20
        while len(calls) < 3 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
    finally:
        await maintenance.stop()
    assert len(calls) >= 3


# -- retention ------------------------------------------------------------------

Finisher = Callable[[JobService, ApiKey, ApiKey], Awaitable[int]]


async def _completed(s: JobService, shop: ApiKey, w: ApiKey) -> int:
    await _enqueue(s, shop)
    return await _complete(s, w)


async def _cancelled(s: JobService, shop: ApiKey, w: ApiKey) -> int:
    return await _cancel(s, shop)


async def _failed(s: JobService, shop: ApiKey, w: ApiKey) -> int:
    await _enqueue(s, shop)
    return await _fail(s, w)


FINISHERS: dict[str, tuple[Finisher, float]] = {
    "completed": (_completed, 7 * DAY),
    "cancelled": (_cancelled, 7 * DAY),
    "failed": (_failed, 30 * DAY),
}


@pytest.mark.parametrize("status", list(FINISHERS))
async def test_finished_jobs_are_kept_for_their_retention_then_pruned(
    service: JobService, clock: FakeClock, shop: ApiKey, mailer: ApiKey, status: str
) -> None:
    finish, keep = FINISHERS[status]
    job_id = await finish(service, shop, mailer)
    job = await service.storage.job_get(job_id)
    assert job is not None and job.status == JobStatus(status)
    assert await service.storage.job_events(job_id)
    clock.advance(keep)
    assert await service.prune() == 0, "kept for the whole retention period"
    clock.advance(1e-6)
    assert await service.prune() == 1
    assert await service.storage.job_get(job_id) is None
    assert await service.storage.job_events(job_id) == [], "events go with their job"


async def test_pending_and_running_jobs_are_never_pruned(
    service: JobService, clock: FakeClock, shop: ApiKey, mailer: ApiKey
) -> None:
    await _enqueue(service, shop)
    await _enqueue(service, shop)
    await service.claim(mailer, lease_seconds=3600)
    for _ in range(10):
        # The lease runs out too, but pruning never touches a job that is not finished.
        clock.advance(40 * DAY)
        assert await service.prune() == 0
    assert len((await service.storage.job_list(ALL)).jobs) == 2


@pytest.fixture
def keep_forever(tmp_path: Path, clock: FakeClock) -> Iterator[JobService]:
    retention = {"completed_seconds": 0, "cancelled_seconds": 0, "failed_seconds": 0}
    settings: Settings = make_settings(tmp_path / "forever", retention=retention)
    assert settings.sqlite_path is not None
    store = SqliteStorage(settings.sqlite_path)
    yield JobService(store, settings, clock)
    store.close()


async def test_zero_retention_keeps_finished_jobs_forever(
    keep_forever: JobService, clock: FakeClock
) -> None:
    ring = KeyRing(keep_forever.storage, clock)
    shop, _ = await ring.create("shop", frozenset({Role.PRODUCER}), Priority.MEDIUM)
    mailer, _ = await ring.create("mailer", frozenset({Role.WORKER}), Priority.MEDIUM)
    ids = [await finish(keep_forever, shop, mailer) for finish, _ in FINISHERS.values()]
    clock.advance(3650 * DAY)
    assert await keep_forever.prune() == 0
    assert all([[await keep_forever.storage.job_get(i) is not None for i in ids]])


async def test_pruning_a_job_frees_its_idempotency_key(
    service: JobService, clock: FakeClock, shop: ApiKey, mailer: ApiKey
) -> None:
    first = await _enqueue(service, shop, key="order-1")
    assert await _enqueue(service, shop, key="order-1") == first, "same key: same job while kept"
    await _complete(service, mailer)
    clock.advance(7 * DAY + 1)
    assert await service.prune() == 1
    ((again, created),) = await service.enqueue_many(
        shop, [EnqueueSpec(type="noop", idempotency_key="order-1")]
    )
    assert created and again.id != first


async def test_retention_counts_from_when_the_job_finished(
    service: JobService, clock: FakeClock, shop: ApiKey, mailer: ApiKey
) -> None:
    await _enqueue(service, shop)
    clock.advance(20 * DAY)  # waited long in the queue before it ran
    job_id = await _complete(service, mailer)
    clock.advance(7 * DAY - 1)
    assert await service.prune() == 0
    clock.advance(2)
    assert await service.prune() == 1
    assert await service.storage.job_get(job_id) is None


async def test_one_prune_pass_catches_up_with_more_jobs_than_one_batch(
    service: JobService, clock: FakeClock, shop: ApiKey, mailer: ApiKey
) -> None:
    # The pruner runs once a minute; a busy queue finishes far more than one
    # batch (1,000 rows) of jobs a minute, so one pass must take them all.
    await service.enqueue_many(shop, [EnqueueSpec(type="noop") for _ in range(2500)])
    for _ in range(25):
        for job in await service.claim(mailer, limit=100):
            assert job.lease_token is not None
            await service.finish(mailer, FinishSpec(job.id, job.lease_token))
    clock.advance(8 * DAY)
    assert await Maintenance(service).run_once() == (0, 2500)
    assert (await service.storage.job_list(ALL)).jobs == []


async def test_a_job_that_a_job_not_completed_depends_on_is_kept_past_its_retention(
    service: JobService, clock: FakeClock, shop: ApiKey, mailer: ApiKey
) -> None:
    done = await _completed(service, shop, mailer)
    failed = await _failed(service, shop, mailer)
    loose = await _completed(service, shop, mailer)  # no job depends on it
    other = await _enqueue(service, shop)
    spec = EnqueueSpec(type="noop", depends_on=(done, other))
    ((waiting, _),) = await service.enqueue_many(shop, [spec])
    ran = EnqueueSpec(type="noop", depends_on=(failed,), on_dependency_failure=RUN)
    ((pending, _),) = await service.enqueue_many(shop, [ran])
    assert (waiting.status, pending.status) == (JobStatus.WAITING, JobStatus.PENDING)
    clock.advance(40 * DAY)
    assert await service.prune() == 1, "only the job no job depends on"
    assert await service.storage.job_get(loose) is None
    kept = await service.storage.job_get_many([done, failed])
    assert sorted(job.id for job in kept) == sorted([done, failed])
    for _ in range(3):  # other, then waiting and pending (in either order): all completed
        await _complete(service, mailer)
    clock.advance(40 * DAY)
    assert await service.prune() == 5
    assert (await service.storage.job_list(ALL)).jobs == []
