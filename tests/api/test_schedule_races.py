"""Schedules changed on several nodes at once: a resume whose write comes after other
nodes resumed, fired and paused the schedule meanwhile (both backends)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from queuelog.clock import FakeClock
from queuelog.config import Settings
from queuelog.errors import StorageUnavailable
from queuelog.scheduler import Scheduler
from queuelog.storage.protocol import FireOutcome, ScheduleSwitch, Storage
from tests.conftest import Api

pytestmark = pytest.mark.anyio

START = datetime(2026, 3, 28, 23, 59, 30, tzinfo=UTC)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


class SlowResumes:
    """Another node's storage, on the same database, whose first resume is written only
    once ``gate`` opens: a request held up between its read and its write (a busy pool,
    a row lock another transaction holds)."""

    def __init__(self, storage: Storage) -> None:
        self._storage = storage
        self.gate = asyncio.Event()
        self.waiting = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._storage, name)

    async def schedule_set_paused(self, switch: ScheduleSwitch) -> Any:
        if not switch.paused and not self.waiting.is_set():
            self.waiting.set()
            await self.gate.wait()
        return await self._storage.schedule_set_paused(switch)


def _fire_times(admin: Api) -> list[str]:
    jobs = admin.get("/jobs").json()["jobs"]
    return sorted(job["run_at"] for job in jobs if job["schedule"] == "tick")


async def test_hardening_78_a_resume_written_after_other_nodes_fired_makes_no_fire_twice(
    admin: Api, storage: Storage, settings: Settings, clock: FakeClock
) -> None:
    """Node B reads a paused schedule (last fire 00:00:00) and works out that a resume
    fires next at 00:02:00; before it writes that, node A resumes it, fires 00:02:00 and
    pauses it again. B's resume, written then, must not set the schedule back to fire
    00:02:00 a second time."""
    node_a = Scheduler(storage, settings, clock)
    slow = SlowResumes(storage)
    node_b = Scheduler(slow, settings, clock)  # type: ignore[arg-type]
    created = admin.post("/schedules", json={"name": "tick", "every_seconds": 60, "type": "noop"})
    assert created.status_code == 201, created.text
    clock.advance(30.4)  # 00:00:00.4
    assert (await node_a.fire_due())[FireOutcome.MADE] == 1
    assert admin.post("/schedules/tick/pause").status_code == 200
    clock.advance(60)  # 00:01:00 passes while paused: not made up

    resume_b = asyncio.create_task(node_b.resume("tick"))
    await asyncio.wait_for(slow.waiting.wait(), 10)  # B read it and works out 00:02:00
    assert admin.post("/schedules/tick/resume").json()["next_run_at"].endswith("00:02:00.000000Z")
    clock.advance(60)  # 00:02:00.4
    assert (await node_a.fire_due())[FireOutcome.MADE] == 1
    assert admin.post("/schedules/tick/pause").status_code == 200
    slow.gate.set()
    await asyncio.wait_for(resume_b, 10)

    clock.advance(0.5)
    await node_a.fire_due()
    await node_b.fire_due()
    times = _fire_times(admin)
    assert times == ["2026-03-29T00:00:00.000000Z", "2026-03-29T00:02:00.000000Z"], times
    schedule = admin.get("/schedules/tick").json()
    assert schedule["paused"] is False
    assert schedule["next_run_at"] == "2026-03-29T00:03:00.000000Z", schedule


class EverChanging(SlowResumes):
    """Storage on which another request changes the schedule between every read and the
    resume's write."""

    async def schedule_set_paused(self, switch: ScheduleSwitch) -> Any:
        if switch.seen is not None:
            return None
        return await self._storage.schedule_set_paused(switch)


async def test_hardening_78_a_resume_that_others_keep_overtaking_is_503_counted_as_contention(
    admin: Api, storage: Storage, settings: Settings, clock: FakeClock
) -> None:
    created = admin.post("/schedules", json={"name": "tick", "every_seconds": 60, "type": "noop"})
    assert created.status_code == 201, created.text
    assert admin.post("/schedules/tick/pause").status_code == 200
    before = storage.health.refused().get("contention", 0)
    node = Scheduler(EverChanging(storage), settings, clock)  # type: ignore[arg-type]
    with pytest.raises(StorageUnavailable) as refused:
        await node.resume("tick")
    assert refused.value.status == 503 and refused.value.reason == "contention"
    assert storage.health.refused().get("contention", 0) == before + 1
    assert admin.get("/schedules/tick").json()["paused"] is True
