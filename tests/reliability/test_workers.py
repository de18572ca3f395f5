"""Many worker processes against a real server; a worker killed while it holds a lease."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.realserver import RealServer
from tests.reliability.workers import holding_worker, scripted_worker

pytestmark = pytest.mark.slow

TYPES: dict[str, dict[str, Any]] = {
    "scripted": {
        "max_retries": 2,
        "lease_seconds": 60,
        "backoff_base_seconds": 0.05,
        "backoff_cap_seconds": 0.2,
    },
    "short": {
        "max_retries": 3,
        "lease_seconds": 2,
        "backoff_base_seconds": 0.2,
        "backoff_cap_seconds": 0.5,
    },
}

JOBS = 2000
WORKERS = 8
SPAWN = multiprocessing.get_context("spawn")


def _script(n: int) -> dict[str, Any]:
    """Six in ten succeed at once; then one, two, three (too many) failures; then fatal."""
    kind = n % 10
    if kind <= 5:
        return {"n": n, "fail_times": 0}
    if kind == 9:
        return {"n": n, "fatal": True}
    return {"n": n, "fail_times": kind - 5}


def _expected(script: dict[str, Any]) -> tuple[str, list[tuple[int, str]]]:
    """Final status, and the (retry_count, action) of each attempt in order."""
    if script.get("fatal"):
        return "failed", [(0, "fail")]
    fails = script["fail_times"]
    max_retries = TYPES["scripted"]["max_retries"]
    if fails > max_retries:
        return "failed", [(n, "fail") for n in range(max_retries + 1)]
    return "completed", [*((n, "fail") for n in range(fails)), (fails, "complete")]


def _all_jobs(admin: httpx.Client) -> dict[int, dict[str, Any]]:
    jobs: dict[int, dict[str, Any]] = {}
    cursor: str | None = None
    for _ in range(100):
        params: dict[str, Any] = {"limit": 500, **({"cursor": cursor} if cursor else {})}
        page = admin.get("/jobs", params=params).json()
        jobs.update({j["id"]: j for j in page["jobs"]})
        cursor = page["next_cursor"]
        if cursor is None:
            break
    return jobs


def test_eight_worker_processes_drain_jobs_exactly_as_scripted(tmp_path: Path) -> None:
    server = RealServer(tmp_path, types=TYPES)
    try:
        admin = server.create_key("root", "admin")
        producer = server.create_key("shop", "producer")
        worker = server.create_key("mailer", "worker")
        server.start()
        scripts: dict[int, dict[str, Any]] = {}
        with server.client(producer) as prod:
            for start in range(0, JOBS, 500):
                batch = [
                    {"type": "scripted", "payload": _script(n)} for n in range(start, start + 500)
                ]
                response = prod.post("/jobs/batch", json={"jobs": batch})
                assert response.status_code == 200, response.text
                for item in response.json()["jobs"]:
                    scripts[item["job"]["id"]] = item["job"]["payload"]
        assert len(scripts) == JOBS

        logs = [tmp_path / f"worker-{n}.jsonl" for n in range(WORKERS)]
        processes = [
            SPAWN.Process(
                target=scripted_worker, args=(server.url, worker, f"w{n}", str(log), 150.0)
            )
            for n, log in enumerate(logs)
        ]
        for process in processes:
            process.start()
        for process in processes:
            process.join(timeout=200)
        for process in processes:
            if process.exitcode is None:
                process.kill()
                process.join(timeout=30)
        assert [p.exitcode for p in processes] == [0] * WORKERS

        records = [json.loads(line) for log in logs for line in log.read_text().splitlines()]
        with server.client(admin) as root:
            _check_outcomes(root, scripts, records)
    finally:
        server.close()


def _check_outcomes(
    root: httpx.Client, scripts: dict[int, dict[str, Any]], records: list[dict[str, Any]]
) -> None:
    """Every job ran exactly as scripted, under one lease at a time."""
    assert all(r["status"] == 200 for r in records), "no report was refused"
    tokens = [r["token"] for r in records]
    assert len(tokens) == len(set(tokens)), "a lease token was handed out twice"
    attempts: dict[int, list[tuple[int, str]]] = defaultdict(list)
    for record in sorted(records, key=lambda r: (r["id"], r["retry_count"])):
        attempts[record["id"]].append((record["retry_count"], record["action"]))
    assert set(attempts) == set(scripts)
    final = _all_jobs(root)
    assert len(final) == JOBS
    for job_id, script in scripts.items():
        status, expected_attempts = _expected(script)
        assert attempts[job_id] == expected_attempts, (job_id, script)
        assert final[job_id]["status"] == status, (job_id, script)
        assert final[job_id]["retry_count"] == expected_attempts[-1][0]
    # The history of every job that ran more than once: one claim at a time.
    for job_id in (i for i, a in attempts.items() if len(a) > 1):
        events = root.get(f"/jobs/{job_id}/events").json()["events"]
        _assert_one_lease_at_a_time(events)


def _assert_one_lease_at_a_time(events: list[dict[str, Any]]) -> None:
    held = False
    for event in events:
        if event["event"] == "claimed":
            assert not held, events
            held = True
        elif event["from_status"] == "running":
            assert held, events
            held = False


def test_worker_killed_mid_job_is_rerun_after_its_lease_expires(real_server: RealServer) -> None:
    admin = real_server.create_key("root", "admin")
    producer = real_server.create_key("shop", "producer")
    worker = real_server.create_key("mailer", "worker")
    real_server.start()
    with real_server.client(producer) as prod:
        job = prod.post("/jobs", json={"type": "short", "payload": {"n": 1}}).json()

    held: Any = SPAWN.Queue()
    doomed = SPAWN.Process(
        target=holding_worker, args=(real_server.url, worker, "short", held, 120)
    )
    doomed.start()
    try:
        assert held.get(timeout=60) == [job["id"]]
    finally:
        assert doomed.pid is not None
        os.kill(doomed.pid, signal.SIGKILL)
        doomed.join(timeout=30)
    assert doomed.exitcode == -signal.SIGKILL

    rerun: list[dict[str, Any]] = []
    deadline = time.monotonic() + 60
    with real_server.client(worker) as work, real_server.client(admin) as root:
        while not rerun and time.monotonic() < deadline:
            body = {"types": ["short"], "wait_seconds": 5, "instance": "rescuer"}
            rerun = work.post("/jobs/claim", json=body).json()["jobs"]
        assert [j["id"] for j in rerun] == [job["id"]]
        assert rerun[0]["retry_count"] == 1
        done = work.post(
            f"/jobs/{job['id']}/complete", json={"lease_token": rerun[0]["lease_token"]}
        )
        assert done.status_code == 200, done.text
        events = root.get(f"/jobs/{job['id']}/events").json()["events"]
    assert [(e["event"], e["actor"]) for e in events] == [
        ("enqueued", "shop"),
        ("claimed", "mailer/doomed"),
        ("lease_expired", "queuelog"),
        ("claimed", "mailer/rescuer"),
        ("completed", "mailer"),
    ]
    assert events[2]["detail"] == "lease expired"
