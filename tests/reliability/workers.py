"""Worker processes for the multi-process tests: plain httpx, no SDK.

Each entry point runs in its own process (multiprocessing, spawn) and talks to
a real server. Every loop is bounded in count and in time.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx


def scripted_worker(url: str, key: str, instance: str, log_path: str, seconds: float) -> None:
    """Claim and run jobs until the queue stays empty; write what happened as JSON lines.

    A job's payload scripts it: ``fail_times`` failures before it succeeds,
    ``fatal`` for a non-retryable failure. Each record is ``{"id", "token",
    "retry_count", "action", "status"}`` with the HTTP status of the report.
    """
    records: list[dict[str, Any]] = []
    deadline = time.monotonic() + seconds
    idle = 0
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
        for _ in range(100_000):
            if idle >= 3 or time.monotonic() > deadline:
                break
            claim = {"limit": 5, "wait_seconds": 1, "instance": instance, "types": ["scripted"]}
            jobs = client.post("/jobs/claim", json=claim).json()["jobs"]
            idle = 0 if jobs else idle + 1
            for job in jobs:
                records.append(_run_scripted(client, job))
    Path(log_path).write_text("\n".join(json.dumps(r) for r in records) + "\n")


def _run_scripted(client: httpx.Client, job: dict[str, Any]) -> dict[str, Any]:
    script = job["payload"]
    token = job["lease_token"]
    base = {"id": job["id"], "token": token, "retry_count": job["retry_count"]}
    if script.get("fatal"):
        body = {"lease_token": token, "error": "fatal", "retryable": False}
        response = client.post(f"/jobs/{job['id']}/fail", json=body)
        return {**base, "action": "fail", "status": response.status_code}
    if job["retry_count"] < script.get("fail_times", 0):
        body = {"lease_token": token, "error": f"attempt {job['retry_count']} failed"}
        response = client.post(f"/jobs/{job['id']}/fail", json=body)
        return {**base, "action": "fail", "status": response.status_code}
    response = client.post(
        f"/jobs/{job['id']}/complete", json={"lease_token": token, "result": {"by": "worker"}}
    )
    return {**base, "action": "complete", "status": response.status_code}


def holding_worker(url: str, key: str, job_type: str, held: Any, seconds: float) -> None:
    """Claim one job, report its id through ``held`` (a multiprocessing queue), and hang."""
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
        body = {"types": [job_type], "wait_seconds": 10, "instance": "doomed"}
        jobs = client.post("/jobs/claim", json=body).json()["jobs"]
        held.put([j["id"] for j in jobs])
        time.sleep(seconds)  # "running the job" until the test kills this process
