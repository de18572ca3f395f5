from __future__ import annotations

import asyncio
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace

import pytest

from queuelog.clock import FakeClock
from queuelog.dashboard.throughput import MINUTE, SETTLED_AFTER, Throughput
from queuelog.errors import Forbidden, UnknownJobType
from queuelog.models import ApiKey, EventKind, Job, JobStatus
from queuelog.service import JobService
from queuelog.specs import EnqueueSpec, FinishSpec
from queuelog.storage.protocol import ClaimParams, EventCount, FinishParams, Storage
from tests.conftest import KeyMaker, make_settings

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
    slots = await Throughput(service, minutes=60).slots()
    assert len(slots) == 60 and slots[-1].start <= clock.now()
    assert [(s.completed, s.failed) for s in slots[-2:]] == [(1, 0), (1, 1)]
    assert sum(s.completed + s.failed for s in slots[:-2]) == 0


class CountedWindows:
    """The service's storage, noting each window of events the chart counts."""

    def __init__(self, storage: Storage) -> None:
        self._storage = storage
        self.windows: list[tuple[datetime, datetime]] = []

    async def job_event_counts(
        self, since: datetime, until: datetime, bucket_seconds: int
    ) -> list[EventCount]:
        self.windows.append((since, until))
        return await self._storage.job_event_counts(since, until, bucket_seconds)


async def test_the_chart_counts_each_settled_minute_once_and_keeps_it(
    service: JobService, make_key: KeyMaker, clock: FakeClock
) -> None:
    """A refresh reads the events of the minutes that may still change, not the hour's:
    a busy queue's hour of events took seconds of a core to count at every refresh."""
    producer, _ = make_key("shop", "producer")
    worker, _ = make_key("mailer", "worker")
    await service.enqueue_many(producer, [EnqueueSpec("noop") for _ in range(3)])
    first, second, third = await service.claim(worker, limit=3, lease_seconds=3600)
    await service.finish(worker, FinishSpec(first.id, first.lease_token or ""))
    counted = CountedWindows(service.storage)
    chart = Throughput(SimpleNamespace(storage=counted, clock=clock), minutes=60)  # type: ignore[arg-type]
    before = await chart.slots()
    assert counted.windows[0][1] - counted.windows[0][0] == 60 * MINUTE
    clock.advance(300)
    await service.finish(worker, FinishSpec(second.id, second.lease_token or ""))
    after = await chart.slots()
    since, until = counted.windows[1]
    assert until - since == SETTLED_AFTER + 6 * MINUTE  # those not settled before, and 5 new
    assert [s.completed for s in after] == [s.completed for s in before[5:]] + [0] * 4 + [1]
    assert sum(s.completed for s in after) == 2
    assert await chart.slots() == after
    since, until = counted.windows[2]
    assert until - since == SETTLED_AFTER + MINUTE  # the minutes that may still change
    # The clock set back into minutes kept as settled: one that a job now finishes in
    # shows it (what the clock no longer reads as settled is counted again).
    clock.advance(-1200)
    await service.finish(worker, FinishSpec(third.id, third.lease_token or ""))
    assert (await chart.slots())[-1].completed == 1
    minute = clock.now().replace(second=0, microsecond=0)
    clock.advance(1200)  # and once the clock has caught up, that minute still shows it
    assert [s.completed for s in await chart.slots() if s.start == minute] == [1]


class SlowFirstCount:
    """Storage whose second count waits until the test lets it answer."""

    def __init__(self) -> None:
        self.counts = 0
        self.answer = asyncio.Event()

    async def job_event_counts(
        self, since: datetime, until: datetime, bucket_seconds: int
    ) -> list[EventCount]:
        self.counts += 1
        if self.counts == 2:
            await self.answer.wait()
        return []


async def test_two_refreshes_at_once_across_a_minute_each_answer_their_hour(
    clock: FakeClock,
) -> None:
    """A refresh whose count is slow, overtaken by one in the next minute, still answers
    every minute of its own hour (the later one drops the minute the earlier one shows
    first)."""
    storage = SlowFirstCount()
    chart = Throughput(SimpleNamespace(storage=storage, clock=clock), minutes=60)  # type: ignore[arg-type]
    await chart.slots()
    clock.advance(60 - clock.now().second - 10)  # ten seconds before a new minute
    slow = asyncio.ensure_future(chart.slots())
    await asyncio.sleep(0)
    clock.advance(15)
    assert len(await chart.slots()) == 60
    storage.answer.set()
    assert len(await slow) == 60


async def _failed_job(service: JobService, make_key: KeyMaker) -> tuple[ApiKey, ApiKey, Job]:
    """An admin, a producer, and a job of the producer's that failed for good."""
    producer, _ = make_key("shop", "producer")
    worker, _ = make_key("mailer", "worker")
    admin, _ = make_key("root", "admin")
    ((job, _),) = await service.enqueue_many(producer, [EnqueueSpec("noop", max_retries=0)])
    (held,) = await service.claim(worker)
    await service.finish(worker, FinishSpec(held.id, held.lease_token or "", error="boom"))
    return admin, producer, job


async def test_retry_failed_needs_admin_and_records_the_admin(
    service: JobService, make_key: KeyMaker
) -> None:
    admin, producer, job = await _failed_job(service, make_key)
    with pytest.raises(Forbidden):
        await service.redrive.failed_of_type(producer, "noop")
    assert await service.redrive.failed_of_type(admin, "noop") == 1
    assert (await service.get(admin, job.id)).status == JobStatus.PENDING
    assert (await service.events(admin, job.id, 500))[0][-1].actor == "root"


async def test_retry_failed_of_a_type_that_left_the_config_is_refused(
    tmp_path: Path, service: JobService, make_key: KeyMaker, clock: FakeClock
) -> None:
    admin, _, job = await _failed_job(service, make_key)
    # A node whose config no longer has the type: its jobs would never be claimed again.
    restarted = JobService(service.storage, make_settings(tmp_path, types={"x": {}}), clock)
    with pytest.raises(UnknownJobType):
        await restarted.redrive.failed_of_type(admin, "noop")
    with pytest.raises(UnknownJobType):
        await restarted.redrive.job(admin, job.id)
    assert (await service.get(admin, job.id)).status == JobStatus.FAILED
    assert await service.redrive.failed_of_type(admin, "noop") == 1


async def test_retry_failed_moves_every_failed_job_of_the_type_a_chunk_at_a_time(
    service: JobService, make_key: KeyMaker, clock: FakeClock
) -> None:
    """More failed jobs than one transaction moves (500): every one comes back, with its
    event, and a failed job of another type stays failed."""
    producer, _ = make_key("shop", "producer")
    admin, _ = make_key("root", "admin")
    kinds = ["noop"] * 1_100 + ["resize_image"]
    for start in range(0, len(kinds), 500):
        specs = [EnqueueSpec(kind, max_retries=0) for kind in kinds[start : start + 500]]
        await service.enqueue_many(producer, specs)
    held = await service.storage.job_claim(
        ClaimParams(
            "mailer", "mailer/1", limit=len(kinds), now=clock.now(), types=["noop", "resize_image"]
        )
    )
    failures = [
        FinishParams(j.id, j.lease_token or "", "mailer", clock.now(), error="boom") for j in held
    ]
    await service.storage.job_finish_many(failures)
    assert await service.redrive.failed_of_type(admin, "noop") == 1_100
    counts = (await service.stats()).counts
    assert counts[("pending", "noop")] == 1_100 and counts[("failed", "noop")] == 0
    assert counts.get(("failed", "resize_image")) == 1
    last, _ = await service.events(admin, held[-2].id, 500)
    assert (last[-1].event, last[-1].actor) == (EventKind.REQUEUED, "root")
    assert await service.redrive.failed_of_type(admin, "noop") == 0
