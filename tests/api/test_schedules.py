"""Schedules through the HTTP API: create, read, pause, resume, trigger, delete, every
refusal; fires driven by a fake clock through the Scheduler, as the maintenance loop does."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from queuelog.clock import FakeClock
from queuelog.config import Settings
from queuelog.errors import StorageUnavailable, UnknownJobType
from queuelog.scheduler import Scheduler
from queuelog.storage.protocol import FireOutcome, Storage
from tests.conftest import Api, make_settings

pytestmark = pytest.mark.anyio

START = datetime(2026, 3, 28, 23, 59, 30, tzinfo=UTC)
CONFIGURED = {
    "nightly": {
        "cron": "0 3 * * *",
        "timezone": "Europe/Paris",
        "type": "send_email",
        "payload": {"to": "ops@example.com"},
        "priority": "medium",
        "overlap": False,
    }
}


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return make_settings(tmp_path, schedules=CONFIGURED)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(START)


@pytest.fixture
def scheduler(storage: Storage, settings: Settings, clock: FakeClock) -> Scheduler:
    """What every node's maintenance loop runs, on the app's storage and clock."""
    return Scheduler(storage, settings, clock)


def create(admin: Api, **body: Any) -> dict[str, Any]:
    response = admin.post("/schedules", json={"name": "tick", "every_seconds": 60, **body})
    assert response.status_code == 201, response.text
    data: dict[str, Any] = response.json()
    return data


def test_the_config_schedule_is_there_at_start(admin: Api) -> None:
    response = admin.get("/schedules/nightly")
    assert response.status_code == 200
    assert response.json() == {
        "name": "nightly",
        "cron": "0 3 * * *",
        "every_seconds": None,
        "timezone": "Europe/Paris",
        "type": "send_email",
        "payload": {"to": "ops@example.com"},
        "priority": "medium",
        "overlap": False,
        "paused": False,
        "source": "config",
        # 03:00 in Paris on the 29th, before the clocks go forward: 01:00 UTC.
        "next_run_at": "2026-03-29T01:00:00.000000Z",
        "last_run_at": None,
        "last_job_id": None,
        "jobs_made": 0,
        "fires_skipped": 0,
    }


def test_create_list_get(admin: Api) -> None:
    made = create(admin, type="noop", payload={"a": 1}, priority="HIGH")
    assert made["source"] == "api"
    assert made["priority"] == "high"
    assert made["next_run_at"] == "2026-03-29T00:00:00.000000Z"  # the next minute on the grid
    assert made["overlap"] is True and made["timezone"] == "UTC"
    listed = admin.get("/schedules").json()["schedules"]
    assert [s["name"] for s in listed] == ["nightly", "tick"]
    assert admin.get("/schedules/tick").json() == made


async def test_a_fire_makes_one_job_of_the_schedule(
    admin: Api, producer: Api, scheduler: Scheduler, clock: FakeClock
) -> None:
    create(admin, type="noop", payload={"a": 1})
    assert (await scheduler.fire_due())[FireOutcome.MADE] == 0
    clock.advance(30.4)
    assert (await scheduler.fire_due())[FireOutcome.MADE] == 1
    assert (await scheduler.fire_due())[FireOutcome.MADE] == 0  # once per fire time
    tick = admin.get("/schedules/tick").json()
    assert tick["last_run_at"] == "2026-03-29T00:00:00.000000Z"
    assert tick["next_run_at"] == "2026-03-29T00:01:00.000000Z"
    job = admin.get(f"/jobs/{tick['last_job_id']}").json()
    assert (job["schedule"], job["type"], job["payload"], job["status"]) == (
        "tick",
        "noop",
        {"a": 1},
        "pending",
    )
    assert job["run_at"] == tick["last_run_at"]
    events = admin.get(f"/jobs/{job['id']}/events").json()["events"]
    assert [(e["event"], e["actor"]) for e in events] == [("enqueued", "schedule:tick")]
    # The schedule's principal is not the producer's: producers do not see its jobs.
    assert producer.get(f"/jobs/{job['id']}").status_code == 404
    assert producer.get("/jobs").json()["jobs"] == []


class RefusedFires:
    """The store, but a database that refuses the fires of the schedules named (all of
    them with None) for ``reason``: what the sweeper meets during a storage fault, or
    when one schedule's row is contended."""

    def __init__(self, storage: Storage, reason: str, names: set[str] | None = None) -> None:
        self.storage, self.reason, self.names, self.fires = storage, reason, names, 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.storage, name)

    async def schedule_fire(self, fire: Any) -> Any:
        self.fires += 1
        if self.names is None or fire.name in self.names:
            refused = StorageUnavailable("refused", reason=self.reason)
            if self.reason != "contention":  # a fault, as the store's health counts it
                raise self.storage.health.refuse(refused)
            raise refused
        return await self.storage.schedule_fire(fire)


async def test_hardening_58_a_storage_fault_logs_no_traceback_a_schedule(
    admin: Api,
    storage: Storage,
    settings: Settings,
    clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The fault is logged once, when it begins (storage/health.py); each due schedule
    of each pass logged a traceback of it besides (3,742 lines in 10 s, 20 schedules)."""
    for name in ("tick", "tock", "tack"):
        create(admin, name=name, type="noop")
    failing = RefusedFires(storage, "io-error")
    scheduler = Scheduler(failing, settings, clock)  # type: ignore[arg-type]
    clock.advance(30.4)
    caplog.clear()
    assert (await scheduler.fire_due())[FireOutcome.MADE] == 0
    assert failing.fires == 3
    said = [r for r in caplog.records if r.name.startswith("queuelog.schedules")]
    assert not said, [r.getMessage() for r in said]


async def test_a_schedule_whose_fires_are_contended_keeps_no_other_from_firing(
    admin: Api, storage: Storage, settings: Settings, clock: FakeClock
) -> None:
    """Refused fires keep their schedule first among the due: the others fire still."""
    for name in ("tick", "tock", "tack"):
        create(admin, name=name, type="noop")
    contended = RefusedFires(storage, "contention", {"tick"})
    scheduler = Scheduler(contended, settings, clock)  # type: ignore[arg-type]
    for _ in range(3):
        clock.advance(60)
        assert (await scheduler.fire_due())[FireOutcome.MADE] == 2
    made = {s["name"]: s["jobs_made"] for s in admin.get("/schedules").json()["schedules"]}
    assert (made["tick"], made["tock"], made["tack"]) == (0, 3, 3)


async def test_after_downtime_one_job_for_the_latest_missed_fire(
    admin: Api, scheduler: Scheduler, clock: FakeClock
) -> None:
    create(admin, type="noop")
    clock.advance(30 + 5 * 60 + 20)  # six fire times passed unseen
    outcomes = await scheduler.fire_due()
    assert outcomes[FireOutcome.MADE] == 1
    assert (await scheduler.fire_due())[FireOutcome.MADE] == 0
    tick = admin.get("/schedules/tick").json()
    assert tick["jobs_made"] == 1
    assert tick["last_run_at"] == "2026-03-29T00:05:00.000000Z"
    assert tick["next_run_at"] == "2026-03-29T00:06:00.000000Z"


async def test_a_pass_late_by_more_than_an_interval_makes_each_fire_time_it_was_up_for(
    admin: Api, scheduler: Scheduler, clock: FakeClock
) -> None:
    """The maintenance loop's passes come late under load; a running node's late pass
    makes every fire time since its last pass, not one as after downtime."""
    create(admin, type="noop", every_seconds=1)  # first at 23:59:31
    assert (await scheduler.fire_due())[FireOutcome.MADE] == 0  # this node is up
    clock.advance(2.5)  # 31 and 32 came meanwhile
    assert (await scheduler.fire_due())[FireOutcome.MADE] == 2
    clock.advance(2.5)  # 33, 34 and 35
    assert (await scheduler.fire_due())[FireOutcome.MADE] == 3
    tick = admin.get("/schedules/tick").json()
    assert (tick["jobs_made"], tick["last_run_at"]) == (5, "2026-03-28T23:59:35.000000Z")
    assert tick["next_run_at"] == "2026-03-28T23:59:36.000000Z"
    runs = sorted(j["run_at"] for j in admin.get("/jobs").json()["jobs"])
    assert runs == [f"2026-03-28T23:59:{n}.000000Z" for n in range(31, 36)]


async def test_a_node_s_first_pass_makes_each_fire_time_other_nodes_were_up_for(
    tmp_path: Path, admin: Api, storage: Storage, clock: FakeClock
) -> None:
    """A node that (re)starts beside one running all along, passes every 4 s and a
    schedule every second: its first pass took every fire time due for one, the latest,
    so the fires the running node would have made were lost."""
    sweeps = make_settings(tmp_path, schedules=CONFIGURED, sweep_interval_seconds=4)
    running = Scheduler(storage, sweeps, clock)
    create(admin, type="noop", every_seconds=1)
    await running.fire_due()
    made = 0
    for _ in range(5):
        clock.advance(4)
        made += (await running.fire_due())[FireOutcome.MADE]
        clock.advance(3.5)  # the other node starts, and passes before the running one
        made += (await Scheduler(storage, sweeps, clock).fire_due())[FireOutcome.MADE]
    runs = sorted(j["run_at"] for j in admin.get("/jobs", params={"limit": 100}).json()["jobs"])
    seconds = [int(datetime.fromisoformat(r).timestamp()) for r in runs]
    assert seconds == list(range(seconds[0], seconds[0] + made))  # no fire time missed
    assert made == 37  # 23:59:31 to 00:00:07


async def test_a_fire_missed_while_down_is_made_when_the_node_is_back_before_the_next(
    admin: Api, settings: Settings, storage: Storage, clock: FakeClock
) -> None:
    """One node, a schedule every 5 s: down from just after one fire until just before
    the fire after next, its first pass came after that fire, and folded the one it
    missed into it."""
    node = Scheduler(storage, settings, clock)
    create(admin, type="noop", every_seconds=5)  # first at 23:59:35
    await node.fire_due()
    clock.advance(5.5)
    assert (await node.fire_due())[FireOutcome.MADE] == 1  # 23:59:35; then the node stops
    clock.advance(8.5)  # 23:59:40 passes while it is down; it is back at 23:59:44.5
    node = Scheduler(storage, settings, clock)
    clock.advance(1.0)
    assert (await node.fire_due())[FireOutcome.MADE] == 2
    runs = sorted(j["run_at"] for j in admin.get("/jobs").json()["jobs"])
    assert runs == [f"2026-03-28T23:59:{n}.000000Z" for n in (35, 40, 45)]


async def test_after_the_whole_cluster_was_down_one_job_for_the_latest_missed_fire(
    admin: Api, settings: Settings, storage: Storage, clock: FakeClock
) -> None:
    """Every node down for a minute, a schedule every second: one job for the latest
    fire time missed before the node started, then one for each fire since."""
    node = Scheduler(storage, settings, clock)
    create(admin, type="noop", every_seconds=1)
    await node.fire_due()
    clock.advance(60)  # no node up meanwhile; this one starts at 00:00:30
    node = Scheduler(storage, settings, clock)
    clock.advance(1.5)
    assert (await node.fire_due())[FireOutcome.MADE] == 2
    runs = sorted(j["run_at"] for j in admin.get("/jobs").json()["jobs"])
    assert runs == ["2026-03-29T00:00:30.000000Z", "2026-03-29T00:00:31.000000Z"]


async def test_a_pass_makes_a_hundred_fires_of_a_schedule_at_most(
    tmp_path: Path, admin: Api, storage: Storage, clock: FakeClock
) -> None:
    """A minute between passes, a schedule every second: a pass is never late by more
    than three sweeps here, so it makes each fire, up to a hundred; the next the rest."""
    sweeps = make_settings(tmp_path, schedules=CONFIGURED, sweep_interval_seconds=60)
    scheduler = Scheduler(storage, sweeps, clock)
    create(admin, type="noop", every_seconds=1)
    await scheduler.fire_due()
    clock.advance(150.5)  # 150 fire times during one pass's wait
    assert (await scheduler.fire_due())[FireOutcome.MADE] == 100
    assert (await scheduler.fire_due())[FireOutcome.MADE] == 50
    tick = admin.get("/schedules/tick").json()
    assert (tick["jobs_made"], tick["last_run_at"]) == (150, "2026-03-29T00:02:00.000000Z")


async def test_fires_older_than_three_sweeps_are_missed_not_made_each(
    admin: Api, scheduler: Scheduler, clock: FakeClock
) -> None:
    """A process suspended for an hour, or passes failing while the database was out of
    reach: as after downtime, one job for the fires older than three sweep intervals
    (one second each here), then one for each later fire."""
    create(admin, type="noop", every_seconds=1)
    await scheduler.fire_due()
    clock.advance(3600.5)
    assert (await scheduler.fire_due())[FireOutcome.MADE] == 1 + 3
    runs = sorted(j["run_at"] for j in admin.get("/jobs").json()["jobs"])
    assert runs == [f"2026-03-29T00:59:{n}.000000Z" for n in range(27, 31)]


async def test_a_clock_set_back_still_makes_the_fires_due(
    tmp_path: Path, admin: Api, storage: Storage, clock: FakeClock
) -> None:
    sweeps = make_settings(tmp_path, schedules=CONFIGURED, sweep_interval_seconds=60)
    scheduler = Scheduler(storage, sweeps, clock)
    create(admin, type="noop", every_seconds=1)
    await scheduler.fire_due()
    clock.advance(150.5)
    assert (await scheduler.fire_due())[FireOutcome.MADE] == 100  # 00:01:11 on are due
    clock.advance(-10)  # stepped back: the previous pass now seems to come after this one
    assert (await scheduler.fire_due())[FireOutcome.MADE] == 40  # 00:01:11 to 00:01:50
    tick = admin.get("/schedules/tick").json()
    assert (tick["last_run_at"], tick["next_run_at"]) == (
        "2026-03-29T00:01:50.000000Z",
        "2026-03-29T00:01:51.000000Z",
    )


async def test_fires_made_before_one_that_failed_are_counted_and_wake_claims(
    admin: Api, storage: Storage, settings: Settings, clock: FakeClock
) -> None:
    class SecondFireFails:
        """The app's storage, but the second fire of a pass meets a fault."""

        def __init__(self) -> None:
            self.fires = 0

        def __getattr__(self, name: str) -> Any:
            return getattr(storage, name)

        async def schedule_fire(self, fire: Any) -> Any:
            self.fires += 1
            if self.fires == 2:
                raise RuntimeError("the database went away")
            return await storage.schedule_fire(fire)

    woken: list[bool] = []
    scheduler = Scheduler(SecondFireFails(), settings, clock, on_ready=lambda: woken.append(True))  # type: ignore[arg-type]
    create(admin, type="noop", every_seconds=1)
    await scheduler.fire_due()
    clock.advance(2.5)  # 31 and 32: the first is made, the second fails
    assert (await scheduler.fire_due())[FireOutcome.MADE] == 1
    assert woken == [True]


async def test_two_nodes_passing_late_make_each_fire_once(
    tmp_path: Path, admin: Api, storage: Storage, settings: Settings, clock: FakeClock
) -> None:
    """Two nodes' passes, each late by its own amount, interleaved: every fire time of a
    schedule every second makes exactly one job."""
    nodes = [Scheduler(storage, settings, clock), Scheduler(storage, settings, clock)]
    create(admin, type="noop", every_seconds=1)
    for node in nodes:
        await node.fire_due()
    made = 0
    for turn, step in enumerate([1.3, 0.2, 1.9, 0.7, 2.6, 0.4, 1.1, 2.2, 0.9, 1.5] * 3):
        clock.advance(step)
        made += (await nodes[turn % 2].fire_due())[FireOutcome.MADE]
    runs = sorted(j["run_at"] for j in admin.get("/jobs", params={"limit": 100}).json()["jobs"])
    assert len(runs) == len(set(runs)) == made
    seconds = [int(datetime.fromisoformat(r).timestamp()) for r in runs]
    assert seconds == list(range(seconds[0], seconds[0] + made))  # no fire time missed


async def test_overlap_false_skips_and_counts(
    admin: Api, worker: Api, scheduler: Scheduler, clock: FakeClock
) -> None:
    create(admin, type="noop", overlap=False)
    for _ in range(3):
        clock.advance(60)
        await scheduler.fire_due()
    tick = admin.get("/schedules/tick").json()
    assert (tick["jobs_made"], tick["fires_skipped"]) == (1, 2)
    jobs = admin.get("/jobs").json()["jobs"]
    assert len(jobs) == 1
    # Once the job is done the next fire makes a job again.
    claimed = worker.post("/jobs/claim", json={}).json()["jobs"][0]
    done = worker.post(
        f"/jobs/{claimed['id']}/complete", json={"lease_token": claimed["lease_token"]}
    )
    assert done.status_code == 200
    clock.advance(60)
    assert (await scheduler.fire_due())[FireOutcome.MADE] == 1


async def test_pause_resume_trigger(admin: Api, scheduler: Scheduler, clock: FakeClock) -> None:
    create(admin, type="noop", overlap=False)
    paused = admin.post("/schedules/tick/pause")
    assert paused.status_code == 200 and paused.json()["paused"] is True
    clock.advance(180)
    assert sum((await scheduler.fire_due()).values()) == 0
    # Its stored fire time has passed: shown is the one a resume now would give it.
    (listed,) = [s for s in admin.get("/schedules").json()["schedules"] if s["name"] == "tick"]
    for shown in (admin.get("/schedules/tick").json(), listed):
        assert shown["next_run_at"] == "2026-03-29T00:03:00.000000Z", shown
    # trigger ignores pause and overlap, twice over.
    first = admin.post("/schedules/tick/trigger")
    second = admin.post("/schedules/tick/trigger")
    assert first.status_code == second.status_code == 201
    assert first.headers["location"] == f"/jobs/{first.json()['id']}"
    assert first.json()["schedule"] == "tick"
    assert admin.get("/schedules/tick").json()["last_job_id"] == second.json()["id"]
    resumed = admin.post("/schedules/tick/resume").json()
    assert resumed["paused"] is False
    # Fires missed while paused are not made up: the next one is after now.
    assert resumed["next_run_at"] == "2026-03-29T00:03:00.000000Z"


async def test_resuming_or_pausing_a_schedule_already_so_changes_nothing(
    admin: Api, scheduler: Scheduler, clock: FakeClock
) -> None:
    """A resume of a running schedule (a resend, a second admin) keeps its fire time:
    a fire already due, not yet made by the sweeper, still makes its job."""
    created = create(admin, type="noop")
    clock.advance(61)  # the first fire is due, the sweeper has not passed
    resumed = admin.post("/schedules/tick/resume")
    assert resumed.status_code == 200 and resumed.json() == created
    assert (await scheduler.fire_due())[FireOutcome.MADE] == 1
    made = admin.get("/schedules/tick").json()
    assert made["last_run_at"] == created["next_run_at"] and made["jobs_made"] == 1
    paused = admin.post("/schedules/tick/pause").json()
    assert admin.post("/schedules/tick/pause").json() == paused


def test_delete(admin: Api) -> None:
    create(admin, type="noop")
    assert admin.delete("/schedules/tick").status_code == 204
    assert admin.get("/schedules/tick").status_code == 404


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/schedules/nope"),
        ("DELETE", "/schedules/nope"),
        ("POST", "/schedules/nope/pause"),
        ("POST", "/schedules/nope/resume"),
        ("POST", "/schedules/nope/trigger"),
    ],
)
def test_unknown_schedule_is_404(admin: Api, method: str, path: str) -> None:
    response = admin.request(method, path)
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["type"] == "not-found"


@pytest.mark.parametrize("name", ["a%00", "UPPER", "x" * 65])
def test_hardening_26_a_schedule_name_no_schedule_could_have_is_404(admin: Api, name: str) -> None:
    """Not looked for: a NUL, which PostgreSQL's text cannot hold, was a 500 there."""
    calls = [("GET", ""), ("DELETE", ""), ("POST", "/pause"), ("POST", "/resume")]
    for method, act in [*calls, ("POST", "/trigger")]:
        response = admin.request(method, f"/schedules/{name}{act}")
        assert response.status_code == 404 and response.json()["type"] == "not-found", act


def test_deleting_a_config_schedule_is_409(admin: Api) -> None:
    response = admin.delete("/schedules/nightly")
    assert response.status_code == 409
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["type"] == "invalid-state"
    assert admin.get("/schedules/nightly").status_code == 200


def test_a_taken_name_is_409(admin: Api) -> None:
    create(admin, type="noop")
    response = admin.post("/schedules", json={"name": "tick", "every_seconds": 5, "type": "noop"})
    assert response.status_code == 409
    assert response.json()["type"] == "invalid-state"
    assert admin.get("/schedules/tick").json()["every_seconds"] == 60


@pytest.mark.parametrize(
    ("body", "slug", "field"),
    [
        ({"cron": "0 3 * * *"}, "validation", "cron"),  # both cron and every_seconds
        ({"every_seconds": None}, "validation", "cron"),  # neither
        ({"every_seconds": None, "cron": "0 3 * * * *"}, "validation", "cron"),
        ({"every_seconds": None, "cron": "99 * * * *"}, "validation", "cron"),
        ({"every_seconds": 0}, "validation", "every_seconds"),
        ({"every_seconds": "60"}, "validation", "every_seconds"),
        ({"timezone": "Mars/Olympus"}, "validation", "timezone"),
        ({"timezone": "a" * 300}, "validation", "timezone"),  # no file name is that long
        ({"timezone": "Europe/" + "a" * 300}, "validation", "timezone"),
        ({"timezone": "../../../etc/passwd"}, "validation", "timezone"),
        ({"name": "Nightly Report"}, "validation", "name"),
        ({"name": "x" * 65}, "validation", "name"),
        ({"priority": "urgent"}, "validation", "priority"),
        ({"overlap": "no"}, "validation", "overlap"),
        ({"status": "paused"}, "validation", "status"),  # no mass assignment
        ({"type": "unknown"}, "unknown-job-type", None),
        ({"type": "send_email", "payload": {}}, "validation", "payload"),  # the type's schema
    ],
)
def test_bad_schedules_are_422(
    admin: Api, body: dict[str, Any], slug: str, field: str | None
) -> None:
    request = {"name": "tick", "every_seconds": 60, "type": "noop", **body}
    response = admin.post("/schedules", json={k: v for k, v in request.items() if v is not None})
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    problem = response.json()
    assert problem["type"] == slug
    if field is not None:
        assert field in {str(part) for e in problem["errors"] for part in e["loc"]}, problem
    assert admin.get("/schedules/tick").status_code == 404


@pytest.mark.parametrize("timezone", ["\\ud800", "Europe/\\udfff"])
def test_hardening_57_a_lone_surrogate_time_zone_is_422_not_500(admin: Api, timezone: str) -> None:
    """The refusal quotes the zone: a lone surrogate in it, kept as it came, could not be
    written as UTF-8 and the 422 became a 500."""
    body = '{"name": "tick", "every_seconds": 60, "type": "noop", "timezone": "' + timezone + '"}'
    sent = {"content": body, "headers": {"Content-Type": "application/json"}}
    response = admin.post("/schedules", **sent)
    assert response.status_code == 422, response.text
    assert response.json()["errors"][0]["loc"][-1] == "timezone"
    assert "\\ud" in response.json()["detail"] + str(response.json()["errors"])
    assert admin.get("/schedules/tick").status_code == 404


@pytest.mark.parametrize("name", [".", ".."])
def test_hardening_18_a_schedule_named_a_dot_segment_is_422(admin: Api, name: str) -> None:
    body = {"name": name, "every_seconds": 60, "type": "noop"}
    response = admin.post("/schedules", json=body)
    assert response.status_code == 422, response.text
    assert response.json()["errors"][0]["loc"][-1] == "name"
    assert name not in {s["name"] for s in admin.get("/schedules").json()["schedules"]}


@pytest.mark.parametrize("name", ["...", ".nightly", "..old"])
def test_a_schedule_name_with_dots_that_is_no_dot_segment_is_created(admin: Api, name: str) -> None:
    body = {"name": name, "every_seconds": 60, "type": "noop"}
    assert admin.post("/schedules", json=body).status_code == 201
    assert admin.get(f"/schedules/{name}").json()["name"] == name


def test_a_payload_over_the_limit_is_422(admin: Api) -> None:
    big = {"blob": "x" * 70_000}
    response = admin.post(
        "/schedules", json={"name": "big", "every_seconds": 60, "type": "noop", "payload": big}
    )
    assert response.status_code == 422
    assert response.json()["type"] == "payload-too-large"


async def test_a_schedule_whose_type_left_the_config_is_skipped_and_reported(
    tmp_path: Path,
    admin: Api,
    storage: Storage,
    clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    create(admin, type="resize_image")
    # The server restarts with a config that no longer has the type.
    types = {"noop": {}, "send_email": {"payload_schema": {"type": "object"}}}
    later = Scheduler(storage, make_settings(tmp_path, types=types), clock)
    clock.advance(60)
    outcomes = await later.fire_due()
    assert outcomes[FireOutcome.SKIPPED] == 1
    assert "schedule tick: no job made" in caplog.text
    assert '"resize_image" is not configured' in caplog.text
    tick = admin.get("/schedules/tick").json()
    assert (tick["jobs_made"], tick["fires_skipped"]) == (0, 1)
    assert tick["next_run_at"] == "2026-03-29T00:01:00.000000Z"
    trigger = admin.post("/schedules/tick/trigger")  # the app's own config still has it
    assert trigger.status_code == 201
    with pytest.raises(UnknownJobType):
        await later.trigger("tick")


async def test_a_config_schedule_taking_an_api_schedules_name_is_logged(
    tmp_path: Path,
    admin: Api,
    storage: Storage,
    clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    create(admin, name="digest", every_seconds=300, type="noop")
    create(admin, name="kept", every_seconds=300, type="noop")
    # The server restarts with a config file that names a schedule "digest" too.
    filed = {**CONFIGURED, "digest": {"every_seconds": 60, "type": "noop"}}
    restarted = Scheduler(storage, make_settings(tmp_path, schedules=filed), clock)
    await restarted.sync_config()
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == [
        'schedule "digest" from the config file replaces the schedule of that name made '
        "through the API (POST /schedules); its pause state is kept, and its next run "
        "unless its cadence changed"
    ]
    digest = admin.get("/schedules/digest").json()
    assert (digest["source"], digest["every_seconds"]) == ("config", 60)
    assert admin.get("/schedules/kept").json()["source"] == "api"
    caplog.clear()
    await restarted.sync_config()  # the next start: the name is the file's already
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


async def test_a_node_whose_config_file_differs_says_which_schedules_it_changed(
    tmp_path: Path,
    admin: Api,
    storage: Storage,
    clock: FakeClock,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Nodes started with different files: the last one started sets the config's
    # schedules, and one whose file lacks a schedule deleted it, with no word said.
    first = {**CONFIGURED, "digest": {"every_seconds": 60, "type": "noop"}}
    await Scheduler(storage, make_settings(tmp_path, schedules=first), clock).sync_config()
    assert not [r for r in caplog.records if r.levelname == "WARNING"]
    other = {**CONFIGURED, "digest": {"every_seconds": 120, "type": "noop"}}
    await Scheduler(storage, make_settings(tmp_path, schedules=other), clock).sync_config()
    del other["digest"]
    await Scheduler(storage, make_settings(tmp_path, schedules=other), clock).sync_config()
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 2, warnings
    assert warnings[0].startswith('schedule "digest" from the config file differs from the one')
    assert warnings[1].startswith('schedule "digest" is not in this config file: deleted')
    assert all("the same config file on every node" in said for said in warnings)
    assert admin.get("/schedules/digest").status_code == 404


def test_no_key_may_take_a_schedules_principal(admin: Api) -> None:
    body = {"name": "schedule:tick", "roles": ["producer"]}
    response = admin.post("/keys", json=body)
    assert response.status_code == 422
    assert response.json()["type"] == "validation"


async def test_metrics_count_jobs_made_and_fires_skipped_per_schedule(
    admin: Api, scheduler: Scheduler, clock: FakeClock
) -> None:
    create(admin, type="noop", overlap=False)
    for _ in range(3):
        clock.advance(60)
        await scheduler.fire_due()
    text = admin.get("/metrics").text
    samples = {
        (s.name, s.labels.get("schedule")): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    assert samples[("queuelog_schedule_jobs_made_total", "tick")] == 1
    assert samples[("queuelog_schedule_fires_skipped_total", "tick")] == 2
    assert samples[("queuelog_schedule_jobs_made_total", "nightly")] == 0


@pytest.mark.parametrize("cron", ["30 2 * 3 0L", "* 2 * 3 0L"])
def test_hardening_12_a_cron_that_never_fires_is_422_naming_it(admin: Api, cron: str) -> None:
    # Valid cron, but every match falls in the hour Paris skips: it would never fire.
    body = {"name": "never", "cron": cron, "timezone": "Europe/Paris", "type": "noop"}
    response = admin.post("/schedules", json=body)
    assert response.status_code == 422, response.text
    problem = response.json()
    assert problem["type"] == "validation"
    assert problem["errors"] == [
        {"loc": ["body", "cron"], "msg": "matches no time that exists in its time zone"}
    ]
    assert admin.get("/schedules/never").status_code == 404
    assert admin.get("/healthz").status_code == 200


@pytest.mark.parametrize("zone", ["localtime", "Factory"])
def test_hardening_13_a_time_zone_no_place_keeps_is_422(admin: Api, zone: str) -> None:
    # localtime is each host's own setting (nodes would disagree); Factory is no place's.
    body = {"name": "tz", "cron": "0 3 * * *", "timezone": zone, "type": "noop"}
    response = admin.post("/schedules", json=body)
    assert response.status_code == 422 and response.json()["errors"][0]["loc"][-1] == "timezone"
    schemas = admin.get("/openapi.json").json()["components"]["schemas"]
    zones = schemas["ScheduleCreateRequest"]["properties"]["timezone"]["enum"]
    assert "Europe/Paris" in zones and zone not in zones


async def test_hardening_71_a_resume_on_a_node_whose_clock_is_behind_makes_no_fire_time_twice(
    admin: Api, scheduler: Scheduler, clock: FakeClock
) -> None:
    """One node fires 00:00:00; a pause and resume follow through a node whose clock is
    two seconds behind (or after a clock step back). The next fire after that node's now
    is 00:00:00 again, already made: the resume fires next after the last fire instead,
    so each fire time makes one job."""
    create(admin, type="noop")  # every 60 s, first at 00:00:00
    clock.advance(30.4)
    assert (await scheduler.fire_due())[FireOutcome.MADE] == 1
    assert admin.get("/schedules/tick").json()["last_run_at"] == "2026-03-29T00:00:00.000000Z"
    clock.advance(-2)  # the node that serves the admin's calls is two seconds behind
    assert admin.post("/schedules/tick/pause").status_code == 200
    resumed = admin.post("/schedules/tick/resume").json()
    assert resumed["paused"] is False
    clock.advance(2.5)
    await scheduler.fire_due()
    runs = [j["run_at"] for j in admin.get("/jobs").json()["jobs"]]
    assert len(runs) == len(set(runs)), runs


async def test_hardening_71_a_fire_due_before_a_pause_is_not_lost_by_a_quick_pause_and_resume(
    admin: Api, scheduler: Scheduler, clock: FakeClock
) -> None:
    """00:00:00 comes while the schedule is active; before the sweeper's next pass (up to
    a sweep interval later) an admin pauses and at once resumes it. The fire came before
    the pause, so it was not missed while paused: the pause makes it first (the resume
    then moves next_run_at past it)."""
    create(admin, type="noop")  # every 60 s, first at 00:00:00
    clock.advance(30.4)  # 00:00:00 is due; the sweeper has not passed yet
    assert admin.post("/schedules/tick/pause").status_code == 200
    clock.advance(0.1)
    assert admin.post("/schedules/tick/resume").status_code == 200
    clock.advance(0.5)
    await scheduler.fire_due()
    runs = [j["run_at"] for j in admin.get("/jobs").json()["jobs"]]
    assert runs == ["2026-03-29T00:00:00.000000Z"], runs


async def test_hardening_110_a_fire_this_node_cannot_make_is_left_to_the_others_until_late(
    tmp_path: Path, admin: Api, storage: Storage, clock: FakeClock, scheduler: Scheduler
) -> None:
    """Two nodes on one database, one not yet given the schedule's type (a rolling change
    of the config file): the one without it skipped every fire its pass saw first, though
    the other would have made the job. It now leaves a fire to the others until no node's
    pass came for it (three sweeps), and skips it only then."""
    create(admin, type="resize_image")
    without = Scheduler(storage, make_settings(tmp_path, types={"noop": {}}), clock)
    due = datetime.fromisoformat(admin.get("/schedules/tick").json()["next_run_at"])
    clock.advance((due - clock.now()).total_seconds())
    assert (await without.fire_due())[FireOutcome.SKIPPED] == 0
    assert (await scheduler.fire_due())[FireOutcome.MADE] == 1
    tick = admin.get("/schedules/tick").json()
    assert (tick["jobs_made"], tick["fires_skipped"]) == (1, 0)
    # Only the node without the type passes: the next fire is skipped once it is late.
    clock.advance(60 + 3)
    assert (await without.fire_due())[FireOutcome.SKIPPED] == 0
    clock.advance(0.5)
    assert (await without.fire_due())[FireOutcome.SKIPPED] == 1
    tick = admin.get("/schedules/tick").json()
    assert (tick["jobs_made"], tick["fires_skipped"]) == (1, 1)
