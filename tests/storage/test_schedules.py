"""What every Storage backend must do with schedules: the guarded fire (one job per fire
time however many fire at once), overlap skips, pause, config sync, delete, trigger."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from queuelog.errors import InvalidState, NotFound
from queuelog.models import JobStatus, Priority
from queuelog.schedules import Cadence, ConfigSync, ScheduleSpec
from queuelog.storage.protocol import (
    FireOutcome,
    NewJob,
    NewSchedule,
    ScheduleFire,
    ScheduleSwitch,
    Storage,
)

pytestmark = pytest.mark.anyio

T0 = datetime(2026, 1, 1, tzinfo=UTC)
EVERY_MINUTE = Cadence.parse(None, 60, "UTC")


def spec(name: str = "tick", overlap: bool = True, cadence: Cadence = EVERY_MINUTE) -> ScheduleSpec:
    return ScheduleSpec(name, cadence, "noop", {"n": 1}, Priority.HIGH, overlap)


def schedule(name: str = "tick", source: str = "api", **kw: object) -> NewSchedule:
    return NewSchedule(spec(name, **kw), source, T0 + timedelta(minutes=1))  # type: ignore[arg-type]


def job_of(name: str, run_at: datetime) -> NewJob:
    return NewJob(
        type="noop",
        payload={"n": 1},
        priority=Priority.HIGH,
        max_retries=3,
        lease_seconds=30,
        run_at=run_at,
        principal=f"schedule:{name}",
    )


def fire_of(name: str, due: datetime, with_job: bool = True) -> ScheduleFire:
    now = due + timedelta(milliseconds=300)
    job = job_of(name, due) if with_job else None
    return ScheduleFire(name, due, due, due + timedelta(minutes=1), job, now)


async def test_insert_get_list(store: Storage) -> None:
    made = await store.schedule_insert(schedule("b"), T0)
    assert made is not None
    assert made.spec == spec("b")
    assert (made.source, made.paused, made.next_run_at) == ("api", False, T0 + timedelta(minutes=1))
    assert (made.last_run_at, made.last_job_id, made.jobs_made, made.fires_skipped) == (
        None,
        None,
        0,
        0,
    )
    await store.schedule_insert(schedule("a"), T0)
    assert await store.schedule_insert(schedule("a"), T0) is None  # the name is taken
    assert [s.name for s in await store.schedule_list()] == ["a", "b"]
    assert await store.schedule_get("b") == made
    assert await store.schedule_get("nope") is None


async def test_a_fire_makes_one_job_marked_with_its_schedule(store: Storage) -> None:
    await store.schedule_insert(schedule(), T0)
    due = T0 + timedelta(minutes=1)
    assert await store.schedule_due(due - timedelta(microseconds=1)) == []
    assert [s.name for s in await store.schedule_due(due)] == ["tick"]
    outcome, job = await store.schedule_fire(fire_of("tick", due))
    assert outcome is FireOutcome.MADE and job is not None
    assert (job.schedule, job.principal, job.run_at, job.status) == (
        "tick",
        "schedule:tick",
        due,
        JobStatus.PENDING,
    )
    assert await store.job_get(job.id) == job
    events = await store.job_events(job.id)
    assert [(e.event.value, e.actor) for e in events] == [("enqueued", "schedule:tick")]
    after = await store.schedule_get("tick")
    assert after is not None
    assert (after.next_run_at, after.last_run_at, after.last_job_id, after.jobs_made) == (
        due + timedelta(minutes=1),
        due,
        job.id,
        1,
    )
    assert await store.schedule_due(due + timedelta(seconds=1)) == []


async def test_fires_of_one_due_at_once_make_one_job(store: Storage) -> None:
    await store.schedule_insert(schedule(), T0)
    due = T0 + timedelta(minutes=1)
    results = await asyncio.gather(*(store.schedule_fire(fire_of("tick", due)) for _ in range(8)))
    outcomes = sorted(o.value for o, _ in results)
    assert outcomes == ["made"] + ["taken"] * 7
    jobs = [job for _, job in results if job is not None]
    assert len(jobs) == 1
    # A late node firing the old due finds it taken.
    assert (await store.schedule_fire(fire_of("tick", due)))[0] is FireOutcome.TAKEN


async def test_overlap_false_skips_while_the_last_job_is_active(store: Storage) -> None:
    await store.schedule_insert(schedule(overlap=False), T0)
    first = T0 + timedelta(minutes=1)
    outcome, job = await store.schedule_fire(fire_of("tick", first))
    assert outcome is FireOutcome.MADE and job is not None
    second = first + timedelta(minutes=1)
    assert (await store.schedule_fire(fire_of("tick", second)))[0] is FireOutcome.SKIPPED
    skipped = await store.schedule_get("tick")
    assert skipped is not None
    assert (skipped.fires_skipped, skipped.jobs_made, skipped.last_job_id) == (1, 1, job.id)
    assert skipped.next_run_at == second + timedelta(minutes=1)  # the skipped fire is gone
    await store.job_cancel(job.id, "root", second)
    third = second + timedelta(minutes=1)
    outcome, again = await store.schedule_fire(fire_of("tick", third))
    assert outcome is FireOutcome.MADE and again is not None and again.id != job.id


async def test_overlap_true_makes_a_job_each_fire(store: Storage) -> None:
    await store.schedule_insert(schedule(), T0)
    due = T0 + timedelta(minutes=1)
    for minute in range(3):
        at = due + timedelta(minutes=minute)
        assert (await store.schedule_fire(fire_of("tick", at)))[0] is FireOutcome.MADE
    made = await store.schedule_get("tick")
    assert made is not None and made.jobs_made == 3


async def test_a_fire_without_a_job_is_skipped(store: Storage) -> None:
    await store.schedule_insert(schedule(), T0)
    due = T0 + timedelta(minutes=1)
    outcome, job = await store.schedule_fire(fire_of("tick", due, with_job=False))
    assert (outcome, job) == (FireOutcome.SKIPPED, None)
    after = await store.schedule_get("tick")
    assert after is not None
    assert (after.fires_skipped, after.next_run_at) == (1, due + timedelta(minutes=1))


async def test_pause_stops_fires_and_resume_sets_the_next_time(store: Storage) -> None:
    await store.schedule_insert(schedule(), T0)
    due = T0 + timedelta(minutes=1)
    paused = await store.schedule_set_paused(ScheduleSwitch("tick", True, T0))
    assert paused.paused and paused.next_run_at == due
    assert await store.schedule_due(due) == []
    assert (await store.schedule_fire(fire_of("tick", due)))[0] is FireOutcome.TAKEN
    later = due + timedelta(minutes=5)
    resumed = await store.schedule_set_paused(ScheduleSwitch("tick", False, due, later))
    assert not resumed.paused and resumed.next_run_at == later
    with pytest.raises(NotFound):
        await store.schedule_set_paused(ScheduleSwitch("nope", True, T0))


async def test_a_schedule_already_paused_or_running_is_left_as_it_is(store: Storage) -> None:
    """A resume of a running schedule keeps its fire time (a fire due and not yet made
    is still made); a pause of a paused one changes nothing either."""
    made = await store.schedule_insert(schedule(), T0)
    later = T0 + timedelta(minutes=5)
    kept = await store.schedule_set_paused(
        ScheduleSwitch("tick", False, T0 + timedelta(seconds=90), later)
    )
    assert kept == made
    paused = await store.schedule_set_paused(
        ScheduleSwitch("tick", True, T0 + timedelta(seconds=1))
    )
    again = await store.schedule_set_paused(ScheduleSwitch("tick", True, T0 + timedelta(seconds=2)))
    assert again == paused and paused.updated_at == T0 + timedelta(seconds=1)


async def test_trigger_makes_a_job_even_when_paused(store: Storage) -> None:
    await store.schedule_insert(schedule(overlap=False), T0)
    await store.schedule_set_paused(ScheduleSwitch("tick", True, T0))
    first = await store.schedule_trigger("tick", job_of("tick", T0))
    second = await store.schedule_trigger("tick", job_of("tick", T0))
    assert first.schedule == second.schedule == "tick"
    made = await store.schedule_get("tick")
    assert made is not None and (made.last_job_id, made.jobs_made) == (second.id, 2)
    with pytest.raises(NotFound):
        await store.schedule_trigger("nope", job_of("nope", T0))


async def test_delete(store: Storage) -> None:
    await store.schedule_insert(schedule("mine"), T0)
    await store.schedule_sync_config([schedule("filed", source="config")], T0)
    await store.schedule_delete("mine")
    assert await store.schedule_get("mine") is None
    with pytest.raises(NotFound):
        await store.schedule_delete("mine")
    with pytest.raises(InvalidState):
        await store.schedule_delete("filed")
    assert await store.schedule_get("filed") is not None


async def test_config_sync_keeps_pause_and_next_time_and_drops_removed(store: Storage) -> None:
    synced = await store.schedule_sync_config(
        [schedule("a", source="config"), schedule("b", source="config")], T0
    )
    assert synced == ConfigSync()
    await store.schedule_insert(schedule("api"), T0)
    await store.schedule_set_paused(ScheduleSwitch("a", True, T0))
    # A restart later: same cadence, new payload; "b" removed from the file.
    later = T0 + timedelta(hours=1)
    changed = NewSchedule(
        ScheduleSpec("a", EVERY_MINUTE, "noop", {"n": 2}, Priority.LOW, False), "config", later
    )
    synced = await store.schedule_sync_config([changed], later)
    assert synced == ConfigSync(changed=("a",), removed=("b",))
    assert await store.schedule_sync_config([changed], later) == ConfigSync()
    a = await store.schedule_get("a")
    assert a is not None
    assert (a.paused, a.next_run_at, a.spec.payload, a.spec.overlap) == (
        True,
        T0 + timedelta(minutes=1),  # kept: a restart makes up one missed fire
        {"n": 2},
        False,
    )
    assert await store.schedule_get("b") is None
    assert await store.schedule_get("api") is not None
    # A config schedule of an API schedule's name takes it over, and says so.
    taken = await store.schedule_sync_config([changed, schedule("api", source="config")], later)
    assert taken == ConfigSync(replaced=("api",))
    api = await store.schedule_get("api")
    assert api is not None and api.source == "config"
    # A new cadence takes the new first fire time.
    hourly = Cadence.parse("0 * * * *", None, "Europe/Paris")
    recut = NewSchedule(ScheduleSpec("a", hourly, "noop"), "config", later + timedelta(hours=1))
    await store.schedule_sync_config([recut], later)
    a = await store.schedule_get("a")
    assert a is not None
    assert (a.spec.cadence, a.next_run_at, a.paused) == (hourly, later + timedelta(hours=1), True)
