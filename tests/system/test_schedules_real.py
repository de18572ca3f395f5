"""Schedules on real ``queuelog serve`` processes: a 1-second schedule, pause, resume,
trigger, a catch-up after downtime, overlap; three PostgreSQL nodes firing one schedule
(one killed midway) make one job per fire time.

Every wait is bounded; nothing asserts on speed. A 1-second schedule's jobs have
``run_at`` = their fire time, so the fire times a run made are read from its jobs.
"""

from __future__ import annotations

import itertools
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.postgres import fresh_schema
from tests.realserver import RealServer, closing, wait_until

pytestmark = pytest.mark.slow

TYPES = {"noop": {"max_retries": 3, "lease_seconds": 30}}


def every_second(overlap: bool = True) -> dict[str, Any]:
    return {"schedules": {"tick": {"every_seconds": 1, "type": "noop", "overlap": overlap}}}


def schedule(http: httpx.Client, name: str = "tick") -> dict[str, Any]:
    answer = http.get(f"/schedules/{name}")
    assert answer.status_code == 200, answer.text
    data: dict[str, Any] = answer.json()
    return data


def schedule_jobs(http: httpx.Client) -> list[dict[str, Any]]:
    answer = http.get("/jobs", params={"limit": 500})
    assert answer.status_code == 200, answer.text
    jobs = [job for job in answer.json()["jobs"] if job["schedule"] == "tick"]
    return sorted(jobs, key=lambda job: job["id"])


def fire_times(jobs: list[dict[str, Any]]) -> list[datetime]:
    return [datetime.fromisoformat(job["run_at"]) for job in jobs]


def assert_one_job_per_second(times: list[datetime]) -> None:
    """Each fire time once, none missing between the first and the last."""
    assert len(set(times)) == len(times), times
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert set(gaps) <= {timedelta(seconds=1)}, times


@pytest.fixture
def server(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[RealServer]:
    overlap = getattr(request, "param", True)
    with closing(RealServer(tmp_path, TYPES, config=every_second(overlap))) as real:
        real.create_key("root", "admin")
        real.start()
        yield real


def test_a_one_second_schedule_makes_one_job_a_second(server: RealServer) -> None:
    with server.client(server.keys["root"]) as http:
        wait_until(lambda: schedule(http)["jobs_made"] >= 5, "five fires")
        jobs = schedule_jobs(http)
        tick = schedule(http)
    assert len(jobs) >= 5
    assert_one_job_per_second(fire_times(jobs))
    assert {(job["type"], job["status"]) for job in jobs} == {("noop", "pending")}
    assert tick["source"] == "config" and tick["fires_skipped"] == 0
    assert len(jobs) <= tick["jobs_made"]  # later fires may have come since the list


def test_pause_resume_and_trigger(server: RealServer) -> None:
    with server.client(server.keys["root"]) as http:
        wait_until(lambda: schedule(http)["jobs_made"] >= 1, "a first fire")
        assert http.post("/schedules/tick/pause").json()["paused"] is True
        made = schedule(http)["jobs_made"]
        time.sleep(2.5)  # two fire times pass while paused
        assert schedule(http)["jobs_made"] == made
        triggered = http.post("/schedules/tick/trigger")
        assert triggered.status_code == 201, triggered.text
        assert triggered.json()["schedule"] == "tick"
        paused = schedule(http)
        assert (paused["jobs_made"], paused["last_job_id"]) == (made + 1, triggered.json()["id"])
        assert http.post("/schedules/tick/resume").json()["paused"] is False
        wait_until(lambda: schedule(http)["jobs_made"] >= made + 3, "fires after resume")


def test_a_stopped_server_makes_one_catch_up_job_on_start(server: RealServer) -> None:
    with server.client(server.keys["root"]) as http:
        wait_until(lambda: schedule(http)["jobs_made"] >= 2, "two fires")
    server.terminate()
    time.sleep(4)  # at least four fire times pass with no server
    server.start()
    with server.client(server.keys["root"]) as http:
        before = len(schedule_jobs(http))
        wait_until(lambda: len(schedule_jobs(http)) >= before + 3, "fires after the restart")
        times = fire_times(schedule_jobs(http))
    gaps = [b - a for a, b in itertools.pairwise(times)]
    # One jump over the downtime: its missed fires made one job (the latest), not one each.
    jumps = [gap for gap in gaps if gap != timedelta(seconds=1)]
    assert len(jumps) == 1, times
    assert jumps[0] >= timedelta(seconds=4), times
    assert len(set(times)) == len(times)


@pytest.mark.parametrize("server", [False], indirect=True)
def test_overlap_false_keeps_one_job_pending(server: RealServer) -> None:
    with server.client(server.keys["root"]) as http:
        wait_until(lambda: schedule(http)["fires_skipped"] >= 3, "three skipped fires")
        jobs = schedule_jobs(http)
        tick = schedule(http)
    assert [job["status"] for job in jobs] == ["pending"]
    assert (tick["jobs_made"], tick["last_job_id"]) == (1, jobs[0]["id"])


@pytest.mark.parametrize(
    ("schedule", "named"),
    [
        ({"cron": "0 3 * * * *", "type": "noop"}, "schedules.nightly.cron: must have five fields"),
        ({"every_seconds": 60, "type": "mail", "payload": {}}, "schedules.nightly: "),
        (  # a valid cron whose every match falls in the hour Paris skips in March
            {"cron": "30 2 * 3 0L", "timezone": "Europe/Paris", "type": "noop"},
            "schedules.nightly.cron: matches no time that exists in its time zone",
        ),
    ],
)
def test_serve_refuses_a_bad_schedule_in_one_line(
    tmp_path: Path, schedule: dict[str, Any], named: str
) -> None:
    types = {**TYPES, "mail": {"payload_schema": {"type": "object", "required": ["to"]}}}
    config = {"schedules": {"nightly": schedule}}
    with closing(RealServer(tmp_path, types, config=config)) as real:
        done: subprocess.CompletedProcess[str] = real.cli("serve", "--port", "1")
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert named in lines[0], lines


def test_three_postgres_nodes_make_one_job_per_fire_time(tmp_path: Path) -> None:
    with fresh_schema() as url, ExitStack() as stack:
        env = {"QUEUELOG_DATABASE_URL": url}
        nodes = [
            stack.enter_context(
                closing(RealServer(tmp_path / f"node{n}", TYPES, config=every_second(), env=env))
            )
            for n in range(3)
        ]
        key = nodes[0].create_key("root", "admin")
        for node in nodes:
            node.launch()
        for node in nodes:
            node.wait_ready()
        with nodes[2].client(key) as http:
            wait_until(lambda: schedule(http)["jobs_made"] >= 5, "five fires on three nodes")
            nodes[0].kill()  # SIGKILL: whatever it was doing, mid-transaction or not
            made = schedule(http)["jobs_made"]
            wait_until(lambda: schedule(http)["jobs_made"] >= made + 5, "five fires after the kill")
            jobs = schedule_jobs(http)
            tick = schedule(http)
    times = fire_times(jobs)
    assert len(times) >= 10
    assert_one_job_per_second(times)
    assert tick["fires_skipped"] == 0
