"""Lease expiry, heartbeats and stale holders, on a fake clock (no sleeps)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from queuelog.clock import FakeClock
from queuelog.errors import InvalidState, NotLeaseHolder
from queuelog.models import ApiKey, EventKind, Job, JobStatus
from queuelog.service import JobService
from queuelog.specs import EnqueueSpec, FinishSpec
from tests.conftest import Api, claim_one, enqueue

pytestmark = pytest.mark.anyio

MICROSECOND = 1e-6


async def _held(service: JobService, shop: ApiKey, mailer: ApiKey, **spec: Any) -> Job:
    """Enqueue one noop job and claim it with a 10 s lease."""
    await service.enqueue_many(shop, [EnqueueSpec(type="noop", **spec)])
    (job,) = await service.claim(mailer, lease_seconds=10)
    return job


async def test_lease_is_not_expired_just_before_its_deadline(
    service: JobService, clock: FakeClock, shop: ApiKey, mailer: ApiKey
) -> None:
    job = await _held(service, shop, mailer)
    clock.advance(10 - MICROSECOND)
    assert await service.rescue_expired() == []
    assert await service.claim(mailer) == []
    current = await service.storage.job_get(job.id)
    assert current is not None and current.status == JobStatus.RUNNING


@pytest.mark.parametrize("past_deadline", [0.0, MICROSECOND, 5.0])
async def test_lease_expires_at_and_after_its_deadline(
    service: JobService, clock: FakeClock, shop: ApiKey, mailer: ApiKey, past_deadline: float
) -> None:
    job = await _held(service, shop, mailer)
    clock.advance(10 + past_deadline)
    (rescued,) = await service.rescue_expired()
    assert rescued.id == job.id
    assert rescued.status == JobStatus.PENDING
    assert rescued.retry_count == 1
    assert rescued.error == "lease expired"
    assert rescued.lease_token is None and rescued.worker_id is None
    # noop: base 2 s, so the first retry waits 2 s +-20 %.
    delay = (rescued.run_at - clock.now()).total_seconds()
    assert 1.6 <= delay <= 2.4
    events = await service.storage.job_events(job.id)
    assert events[-1].event == EventKind.LEASE_EXPIRED
    assert (events[-1].from_status, events[-1].to_status) == (JobStatus.RUNNING, JobStatus.PENDING)


async def test_expired_lease_with_no_retries_left_fails_the_job(
    service: JobService, clock: FakeClock, shop: ApiKey, mailer: ApiKey
) -> None:
    job = await _held(service, shop, mailer, max_retries=1)
    clock.advance(10)
    (rescued,) = await service.rescue_expired()
    assert rescued.status == JobStatus.PENDING and rescued.retry_count == 1
    clock.advance(60)
    (again,) = await service.claim(mailer, lease_seconds=10)
    assert again.id == job.id
    clock.advance(10)
    (final,) = await service.rescue_expired()
    assert final.status == JobStatus.FAILED
    assert final.retry_count == 1, "the final failure leaves retry_count as it was"
    assert final.error == "lease expired"
    kinds = [e.event for e in await service.storage.job_events(job.id)]
    assert kinds == [
        EventKind.ENQUEUED,
        EventKind.CLAIMED,
        EventKind.LEASE_EXPIRED,
        EventKind.CLAIMED,
        EventKind.LEASE_EXPIRED,
    ]
    assert await service.rescue_expired() == []


async def test_claim_rescues_expired_leases_without_the_sweeper(
    service: JobService, clock: FakeClock, shop: ApiKey, mailer: ApiKey
) -> None:
    job = await _held(service, shop, mailer)
    clock.advance(10)
    assert await service.claim(mailer) == []
    rescued = await service.storage.job_get(job.id)
    assert rescued is not None
    assert rescued.status == JobStatus.PENDING and rescued.retry_count == 1
    clock.advance(3)  # past the 2 s +-20 % backoff
    (again,) = await service.claim(mailer)
    assert again.id == job.id and again.retry_count == 1
    assert again.lease_token != job.lease_token


async def test_heartbeat_extends_the_lease(
    service: JobService, clock: FakeClock, shop: ApiKey, mailer: ApiKey
) -> None:
    job = await _held(service, shop, mailer)
    assert job.lease_token is not None
    clock.advance(8)
    beat = await service.heartbeat(mailer, job.id, job.lease_token, lease_seconds=10)
    assert beat.lease_expires_at == clock.now() + timedelta(seconds=10)
    clock.advance(10 - MICROSECOND)  # 18 s after the claim: the original lease is long gone
    assert await service.rescue_expired() == []
    clock.advance(MICROSECOND)
    assert [j.id for j in await service.rescue_expired()] == [job.id]


@pytest.mark.parametrize(("claimed", "renewed"), [(10, 10), (None, 30)])
async def test_heartbeat_without_lease_seconds_renews_for_the_lease_last_asked_for(
    service: JobService,
    clock: FakeClock,
    shop: ApiKey,
    mailer: ApiKey,
    claimed: int | None,
    renewed: int,
) -> None:
    """The claim's lease, else the type's; then a heartbeat's own, once it gave one."""
    await service.enqueue_many(shop, [EnqueueSpec(type="noop")])
    (job,) = await service.claim(mailer, lease_seconds=claimed)
    assert job.lease_token is not None
    clock.advance(5)
    beat = await service.heartbeat(mailer, job.id, job.lease_token)
    assert beat.lease_expires_at == clock.now() + timedelta(seconds=renewed)
    await service.heartbeat(mailer, job.id, job.lease_token, lease_seconds=20)
    clock.advance(5)
    beat = await service.heartbeat(mailer, job.id, job.lease_token)
    assert beat.lease_expires_at == clock.now() + timedelta(seconds=20)


async def test_heartbeat_keeps_the_job_and_token(
    service: JobService, clock: FakeClock, shop: ApiKey, mailer: ApiKey
) -> None:
    job = await _held(service, shop, mailer)
    assert job.lease_token is not None
    for _ in range(5):
        clock.advance(9)
        beat = await service.heartbeat(mailer, job.id, job.lease_token, lease_seconds=10)
        assert beat.status == JobStatus.RUNNING and beat.lease_token == job.lease_token
        assert await service.rescue_expired() == []
    done = await service.finish(mailer, FinishSpec(job.id, job.lease_token, result={"ok": True}))
    assert done.status == JobStatus.COMPLETED and done.retry_count == 0


# -- the old holder after its lease expired, over HTTP ------------------------


def _expire_and_reclaim(other: Api, clock: FakeClock, job_id: int) -> dict[str, Any]:
    clock.advance(10)
    # This claim rescues the expired lease: the job waits out its backoff (2 s +-20 %).
    assert other.post("/jobs/claim", json={}).json() == {"jobs": []}
    clock.advance(3)
    again = claim_one(other)
    assert again["id"] == job_id
    return again


_STALE_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("heartbeat", {}),
    ("complete", {"result": {"late": True}}),
    ("fail", {"error": "late"}),
]


@pytest.mark.parametrize(("route", "extra"), _STALE_CALLS)
async def test_old_holder_is_refused_after_its_job_was_reclaimed_by_another_worker(
    producer: Api,
    worker: Api,
    as_key: Any,
    admin: Api,
    clock: FakeClock,
    route: str,
    extra: dict[str, Any],
) -> None:
    job = enqueue(producer)
    old = claim_one(worker, lease_seconds=10)
    other = as_key("resizer", "worker")
    new = _expire_and_reclaim(other, clock, job["id"])
    before = admin.get(f"/jobs/{job['id']}").json()
    response = worker.post(
        f"/jobs/{job['id']}/{route}", json={"lease_token": old["lease_token"], **extra}
    )
    assert response.status_code == 409, response.text
    assert response.json()["type"] == "not-lease-holder"
    assert admin.get(f"/jobs/{job['id']}").json() == before, "nothing changes on a 409"
    ok = other.post(f"/jobs/{job['id']}/complete", json={"lease_token": new["lease_token"]})
    assert ok.status_code == 200


@pytest.mark.parametrize(("route", "extra"), _STALE_CALLS)
async def test_old_lease_token_is_refused_when_the_same_worker_reclaimed(
    producer: Api, worker: Api, clock: FakeClock, route: str, extra: dict[str, Any]
) -> None:
    job = enqueue(producer)
    old = claim_one(worker, lease_seconds=10)
    _expire_and_reclaim(worker, clock, job["id"])
    response = worker.post(
        f"/jobs/{job['id']}/{route}", json={"lease_token": old["lease_token"], **extra}
    )
    assert response.status_code == 409
    assert response.json()["type"] == "not-lease-holder"


@pytest.mark.parametrize(("route", "extra"), _STALE_CALLS)
async def test_old_holder_gets_invalid_state_when_its_expired_job_is_pending(
    producer: Api,
    worker: Api,
    admin: Api,
    client: Any,
    clock: FakeClock,
    route: str,
    extra: dict[str, Any],
) -> None:
    job = enqueue(producer)
    old = claim_one(worker, lease_seconds=10)
    clock.advance(10)
    await client.app.state.maintenance.run_once()
    assert admin.get(f"/jobs/{job['id']}").json()["status"] == "pending"
    response = worker.post(
        f"/jobs/{job['id']}/{route}", json={"lease_token": old["lease_token"], **extra}
    )
    assert response.status_code == 409
    assert response.json()["type"] == "invalid-state"


@pytest.mark.parametrize(("route", "extra"), _STALE_CALLS)
async def test_old_holder_gets_invalid_state_when_its_expired_job_has_failed(
    producer: Api,
    worker: Api,
    admin: Api,
    client: Any,
    clock: FakeClock,
    route: str,
    extra: dict[str, Any],
) -> None:
    job = enqueue(producer, max_retries=0)
    old = claim_one(worker, lease_seconds=10)
    clock.advance(10)
    await client.app.state.maintenance.run_once()
    assert admin.get(f"/jobs/{job['id']}").json()["status"] == "failed"
    response = worker.post(
        f"/jobs/{job['id']}/{route}", json={"lease_token": old["lease_token"], **extra}
    )
    assert response.status_code == 409
    assert response.json()["type"] == "invalid-state"
    events = admin.get(f"/jobs/{job['id']}/events").json()["events"]
    assert [e["event"] for e in events][-1] == "lease_expired"


async def test_stale_holder_errors_in_the_service(
    service: JobService, clock: FakeClock, shop: ApiKey, mailer: ApiKey
) -> None:
    job = await _held(service, shop, mailer)
    assert job.lease_token is not None
    clock.advance(10)
    await service.rescue_expired()
    clock.advance(3)
    (again,) = await service.claim(mailer)
    with pytest.raises(NotLeaseHolder):
        await service.heartbeat(mailer, job.id, job.lease_token)
    with pytest.raises(NotLeaseHolder):
        await service.finish(mailer, FinishSpec(job.id, job.lease_token))
    assert again.lease_token is not None
    await service.finish(mailer, FinishSpec(job.id, again.lease_token))
    with pytest.raises(InvalidState):
        await service.finish(mailer, FinishSpec(job.id, again.lease_token, error="again"))
