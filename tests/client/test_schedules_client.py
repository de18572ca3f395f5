"""Schedules through the SDK (Client and AsyncClient) and ``queuelog schedules``, against a
real server."""

from __future__ import annotations

import asyncio
import json
import subprocess

import pytest

from queuelog.client import AsyncClient, Client, Schedule
from queuelog.errors import InvalidState, NotFound, ValidationFailed
from queuelog.models import Priority
from tests.realserver import QUEUELOG, RealServer


def cli(server: RealServer, *args: str) -> subprocess.CompletedProcess[str]:
    env = server.client_env(server.keys["root"])
    return subprocess.run(
        [QUEUELOG, "schedules", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_the_sdk_verbs(real_server: RealServer) -> None:
    with Client(real_server.url, real_server.keys["root"]) as root:
        made = root.create_schedule(
            "sdk-daily",
            "send_email",
            cron="0 3 * * *",
            timezone="Europe/Paris",
            payload={"to": "ops@example.com"},
            priority="high",
            overlap=False,
        )
        assert isinstance(made, Schedule)
        assert (made.cron, made.every_seconds, made.priority, made.overlap) == (
            "0 3 * * *",
            None,
            Priority.HIGH,
            False,
        )
        assert made.source == "api" and not made.paused
        assert "sdk-daily" in [s.name for s in root.list_schedules()]
        assert root.pause_schedule("sdk-daily").paused
        assert root.get_schedule("sdk-daily").paused
        job = root.trigger_schedule("sdk-daily")
        assert (job.schedule, job.type, job.payload) == (
            "sdk-daily",
            "send_email",
            {"to": "ops@example.com"},
        )
        assert root.get_schedule("sdk-daily").last_job_id == job.id
        assert not root.resume_schedule("sdk-daily").paused
        with pytest.raises(InvalidState):
            root.create_schedule("sdk-daily", "noop", every_seconds=5)
        with pytest.raises(ValidationFailed):
            root.create_schedule("sdk-bad", "noop", cron="0 3 * * * *")
        root.delete_schedule("sdk-daily")
        with pytest.raises(NotFound):
            root.get_schedule("sdk-daily")


@pytest.mark.anyio
async def test_the_async_client_has_the_same_verbs(real_server: RealServer) -> None:
    async with AsyncClient(real_server.url, real_server.keys["root"]) as root:
        made = await root.create_schedule("sdk-async", "noop", every_seconds=3600)
        assert made.every_seconds == 3600
        assert (await root.get_schedule("sdk-async")).name == "sdk-async"
        job = await root.trigger_schedule("sdk-async")
        assert job.schedule == "sdk-async"
        await root.delete_schedule("sdk-async")
        assert "sdk-async" not in [s.name for s in await root.list_schedules()]


def test_the_schedules_command(real_server: RealServer) -> None:
    made = cli(real_server, "create", "cli-hourly", "noop", '{"n": 1}', "--cron", "0 * * * *")
    assert made.returncode == 0, made.stderr
    assert made.stdout.startswith("schedule cli-hourly active, next run ")
    listed = cli(real_server, "list", "--json")
    assert listed.returncode == 0, listed.stderr
    found = {s["name"]: s for s in json.loads(listed.stdout)}
    assert found["cli-hourly"]["payload"] == {"n": 1}
    # On the hour, written as the server writes every time: with its microseconds.
    assert found["cli-hourly"]["next_run_at"].endswith(":00:00.000000Z")
    table = cli(real_server, "list")
    assert "cli-hourly" in table.stdout and "0 * * * * (UTC)" in table.stdout
    paused = cli(real_server, "pause", "cli-hourly")
    assert paused.stdout.strip() == "schedule cli-hourly paused"  # no next run while paused
    triggered = cli(real_server, "trigger", "cli-hourly")
    assert triggered.returncode == 0, triggered.stderr
    assert "(noop, schedule cli-hourly)" in triggered.stdout
    resumed = cli(real_server, "resume", "cli-hourly", "--json")
    assert json.loads(resumed.stdout)["paused"] is False
    assert cli(real_server, "delete", "cli-hourly").stdout.strip() == "schedule cli-hourly deleted"
    missing = cli(real_server, "delete", "cli-hourly")
    assert missing.returncode == 1
    (line,) = missing.stderr.strip().splitlines()
    assert "not-found" in line
    both = cli(
        real_server, "create", "cli-bad", "noop", "--cron", "0 3 * * *", "--every-seconds", "5"
    )
    neither = cli(real_server, "create", "cli-bad", "noop")
    for usage in (both, neither):  # bad usage, found before anything is sent
        assert usage.returncode == 2 and "give either --cron or --every-seconds" in usage.stderr
    bad = cli(real_server, "create", "cli-bad", "noop", "--cron", "* * *")
    assert bad.returncode == 1
    (line,) = bad.stderr.strip().splitlines()
    assert line.startswith("Error: cannot create schedule cli-bad: ") and "; cron: " in line
    assert cli(real_server, "list", "--json").stdout.count("cli-bad") == 0


@pytest.mark.parametrize("name", [".", ".."])
def test_hardening_47_a_dot_segment_name_is_a_schedule_that_is_not_there(
    real_server: RealServer, name: str
) -> None:
    """A name no schedule can have, made only of dots, is not resolved away on its way
    (``/schedules/./pause`` would be ``/schedules/pause``, another route's 405): the
    schedule is not found, as the SDK and the CLI say of any other name."""
    with Client(real_server.url, real_server.keys["root"]) as root:
        for verb in (root.get_schedule, root.pause_schedule, root.trigger_schedule):
            with pytest.raises(NotFound):
                verb(name)
        with pytest.raises(NotFound):
            root.resume_type(name)

    async def read_async() -> None:
        async with AsyncClient(real_server.url, real_server.keys["root"]) as root:
            with pytest.raises(NotFound):
                await root.pause_schedule(name)

    asyncio.run(read_async())
    for command in ("pause", "resume", "trigger"):
        done = cli(real_server, command, name)
        assert done.returncode == 1, (command, done.stderr)
