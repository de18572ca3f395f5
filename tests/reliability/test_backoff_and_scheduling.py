"""Backoff bounds and jitter, per-type settings, retry_in_seconds, and run_at scheduling."""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from queuelog.auth import KeyRing
from queuelog.clock import FakeClock
from queuelog.models import ApiKey, JobStatus, Priority, Role
from queuelog.retry import backoff_seconds
from queuelog.service import JobService
from queuelog.specs import EnqueueSpec, FinishSpec
from queuelog.storage.sqlite.store import SqliteStorage
from tests.conftest import Api, KeyMaker, claim_one, enqueue, make_settings

pytestmark = pytest.mark.anyio

MICROSECOND = timedelta(microseconds=1)


@pytest.mark.parametrize("retry_count", [0, 1, 2, 5, 10, 11, 12, 40, 62, 63, 1000])
@pytest.mark.parametrize(("base", "cap"), [(2.0, 3600.0), (0.5, 4.0), (10.0, 60.0)])
async def test_backoff_stays_within_twenty_percent_of_the_capped_exponential(
    retry_count: int, base: float, cap: float
) -> None:
    rng = random.Random(retry_count)
    expected = min(cap, base * 2.0 ** min(retry_count, 62))
    delays = [backoff_seconds(retry_count, base, cap, rng=rng) for _ in range(200)]
    assert all(0.8 * expected <= d <= 1.2 * expected for d in delays)


async def test_backoff_jitter_spreads_the_delays() -> None:
    rng = random.Random(7)
    delays = [backoff_seconds(3, 2, 3600, rng=rng) for _ in range(500)]
    assert len(set(delays)) > 450
    assert min(delays) < 16 * 0.85 and max(delays) > 16 * 1.15
    assert 16 * 0.97 < sum(delays) / len(delays) < 16 * 1.03


async def test_backoff_without_jitter_is_exact() -> None:
    assert [backoff_seconds(n, 2, 20, jitter=0) for n in range(6)] == [2, 4, 8, 16, 20, 20]


TYPES: dict[str, Any] = {
    "fast": {"max_retries": 10, "backoff_base_seconds": 0.5, "backoff_cap_seconds": 4},
    "slow": {"max_retries": 10, "backoff_base_seconds": 10, "backoff_cap_seconds": 60},
}


@pytest.fixture
def typed_service(tmp_path: Path, clock: FakeClock) -> Iterator[JobService]:
    settings = make_settings(tmp_path / "typed", types=TYPES)
    assert settings.sqlite_path is not None
    store = SqliteStorage(settings.sqlite_path)
    yield JobService(store, settings, clock, rng=random.Random(3))
    store.close()


async def _keys(service: JobService) -> tuple[ApiKey, ApiKey]:
    ring = KeyRing(service.storage, service.clock)
    shop, _ = await ring.create("shop", frozenset({Role.PRODUCER}), Priority.MEDIUM)
    mailer, _ = await ring.create("mailer", frozenset({Role.WORKER}), Priority.MEDIUM)
    return shop, mailer


@pytest.mark.parametrize("job_type", ["fast", "slow"])
async def test_each_failure_waits_the_types_backoff(
    typed_service: JobService, clock: FakeClock, job_type: str
) -> None:
    shop, mailer = await _keys(typed_service)
    cfg = TYPES[job_type]
    await typed_service.enqueue_many(shop, [EnqueueSpec(type=job_type)])
    for retry_count in range(8):
        (job,) = await typed_service.claim(mailer)
        assert job.lease_token is not None and job.retry_count == retry_count
        failed = await typed_service.finish(
            mailer, FinishSpec(job.id, job.lease_token, error="boom")
        )
        assert failed.status == JobStatus.PENDING and failed.retry_count == retry_count + 1
        delay = (failed.run_at - clock.now()).total_seconds()
        expected = min(cfg["backoff_cap_seconds"], cfg["backoff_base_seconds"] * 2**retry_count)
        assert 0.8 * expected <= delay <= 1.2 * expected, (retry_count, delay)
        # Never claimable before its run_at; claimable at it.
        clock.advance(delay - 1e-6)
        assert await typed_service.claim(mailer) == []
        clock.advance(1e-6)


async def test_retry_in_seconds_overrides_the_backoff(
    service: JobService, clock: FakeClock, make_key: KeyMaker
) -> None:
    shop, _ = make_key("shop", "producer")
    mailer, _ = make_key("mailer", "worker")
    await service.enqueue_many(shop, [EnqueueSpec(type="send_email", payload={"to": "a@b.c"})])
    (job,) = await service.claim(mailer)
    assert job.lease_token is not None
    spec = FinishSpec(job.id, job.lease_token, error="later", retry_in_seconds=90)
    failed = await service.finish(mailer, spec)
    assert failed.run_at == clock.now() + timedelta(seconds=90)
    clock.advance(90 - 1e-6)
    assert await service.claim(mailer) == []
    clock.advance(1e-6)
    assert [j.id for j in await service.claim(mailer)] == [job.id]


async def test_retry_in_seconds_zero_retries_at_once(producer: Api, worker: Api) -> None:
    job = enqueue(producer)
    held = claim_one(worker)
    body = {"lease_token": held["lease_token"], "error": "now", "retry_in_seconds": 0}
    assert worker.post(f"/jobs/{job['id']}/fail", json=body).status_code == 200
    assert claim_one(worker)["retry_count"] == 1


async def test_non_retryable_failure_fails_at_once_without_backoff(
    producer: Api, worker: Api
) -> None:
    job = enqueue(producer)
    held = claim_one(worker)
    body = {"lease_token": held["lease_token"], "error": "bad input", "retryable": False}
    failed = worker.post(f"/jobs/{job['id']}/fail", json=body).json()
    assert failed["status"] == "failed" and failed["retry_count"] == 0


# -- scheduling ---------------------------------------------------------------


async def test_job_with_run_at_is_never_claimable_before_it(
    producer: Api, worker: Api, clock: FakeClock
) -> None:
    run_at = clock.now() + timedelta(hours=1)
    job = enqueue(producer, run_at=run_at.isoformat().replace("+00:00", "Z"))
    assert job["status"] == "pending"
    for step in (0, 1800, 1799, 1 - 1e-6):
        clock.advance(step)
        assert worker.post("/jobs/claim", json={}).json() == {"jobs": []}
    clock.advance(1e-6)
    assert claim_one(worker)["id"] == job["id"]


async def test_job_with_delay_seconds_is_never_claimable_before_it(
    producer: Api, worker: Api, clock: FakeClock
) -> None:
    job = enqueue(producer, delay_seconds=30)
    clock.advance(30 - 1e-6)
    assert worker.post("/jobs/claim", json={}).json() == {"jobs": []}
    clock.advance(1e-6)
    assert claim_one(worker)["id"] == job["id"]


async def test_run_at_in_the_past_is_ready_now(
    producer: Api, worker: Api, clock: FakeClock
) -> None:
    past = clock.now() - timedelta(days=1)
    job = enqueue(producer, run_at=past.isoformat().replace("+00:00", "Z"))
    assert claim_one(worker)["id"] == job["id"]


async def test_scheduled_job_waits_behind_ready_ones_only_until_due(
    producer: Api, worker: Api, clock: FakeClock
) -> None:
    later = enqueue(producer, delay_seconds=10, priority="high")
    now_job = enqueue(producer)
    assert claim_one(worker)["id"] == now_job["id"]
    clock.advance(10)
    assert claim_one(worker)["id"] == later["id"]
