from __future__ import annotations

import pytest

from queuelog.clock import FakeClock
from queuelog.dashboard.throughput import throughput
from queuelog.errors import Forbidden
from queuelog.models import JobStatus
from queuelog.service import JobService
from queuelog.specs import EnqueueSpec, FinishSpec
from tests.conftest import KeyMaker

pytestmark = pytest.mark.anyio


async def test_throughput_counts_completed_and_failed_per_minute(
    service: JobService, make_key: KeyMaker, clock: FakeClock
) -> None:
    producer, _ = make_key("shop", "producer")
    worker, _ = make_key("mailer", "worker")
    await service.enqueue_many(producer, [EnqueueSpec("noop", max_retries=0) for _ in range(3)])
    jobs = await service.claim(worker, limit=3, lease_seconds=300)
    await service.finish(worker, FinishSpec(jobs[0].id, jobs[0].lease_token or ""))
    clock.advance(60)
    await service.finish(worker, FinishSpec(jobs[1].id, jobs[1].lease_token or ""))
    await service.finish(worker, FinishSpec(jobs[2].id, jobs[2].lease_token or "", error="boom"))
    slots = await throughput(service, minutes=60)
    assert len(slots) == 60 and slots[-1].start <= clock.now()
    assert [(s.completed, s.failed) for s in slots[-2:]] == [(1, 0), (1, 1)]
    assert sum(s.completed + s.failed for s in slots[:-2]) == 0


async def test_retry_failed_needs_admin_and_records_the_admin(
    service: JobService, make_key: KeyMaker
) -> None:
    producer, _ = make_key("shop", "producer")
    worker, _ = make_key("mailer", "worker")
    admin, _ = make_key("root", "admin")
    ((job, _),) = await service.enqueue_many(producer, [EnqueueSpec("noop", max_retries=0)])
    (held,) = await service.claim(worker)
    await service.finish(worker, FinishSpec(held.id, held.lease_token or "", error="boom"))
    with pytest.raises(Forbidden):
        await service.retry_failed(producer, "noop")
    assert await service.retry_failed(admin, "noop") == 1
    assert (await service.get(admin, job.id)).status == JobStatus.PENDING
    assert (await service.events(admin, job.id))[-1].actor == "root"
