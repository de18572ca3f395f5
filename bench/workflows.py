"""Workflows end to end: a fan-in of 1,000 jobs to one, and the completion of one job that
many jobs wait for.

The fan-in: 1,000 jobs, 10 joins each waiting for 100 of them (``depends_on`` takes up
to 100 ids), then one final job waiting for the 10 joins. A producer enqueues the graph
and awaits the final job (``GET /jobs/{id}?wait_seconds=30``) while 4 workers claim 50
at a time; its time runs from its first enqueue to the final job's completion. The
fan-out: the completion (``POST /jobs/{id}/complete``) of a job that ``plan.fan_out``
jobs wait for, which makes them all pending in its transaction; then the workers drain
them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import httpx

from bench import clients
from bench.clients import PAYLOAD, BurnWorker, _Task, expect
from bench.parallel import run_parallel
from bench.server import Keys

LEAVES = 1000
JOIN = 100  # depends_on takes up to 100 ids
BATCH = 500


def _batch(c: httpx.Client, jobs: list[dict[str, Any]]) -> list[int]:
    answer = expect(c.post("/jobs/batch", json={"jobs": jobs}))
    return [item["job"]["id"] for item in answer["jobs"]]


def enqueue_fan_in(c: httpx.Client) -> int:
    """The fan-in graph; the final job's id."""
    leaves: list[int] = []
    for _ in range(LEAVES // BATCH):
        leaves += _batch(c, [{"type": "noop", "payload": PAYLOAD}] * BATCH)
    joins = _batch(
        c,
        [
            {"type": "noop", "payload": PAYLOAD, "depends_on": leaves[i : i + JOIN]}
            for i in range(0, LEAVES, JOIN)
        ],
    )
    final = expect(c.post("/jobs", json={"type": "noop", "depends_on": joins}), 201)
    return int(final["id"])


def await_completed(c: httpx.Client, job_id: int, deadline: float) -> None:
    while time.monotonic() < deadline:
        job = expect(c.get(f"/jobs/{job_id}", params={"wait_seconds": 30}))
        if job["status"] == "completed":
            return
        if job["status"] in ("failed", "cancelled"):
            raise RuntimeError(f"job {job_id} ended {job['status']}")
    raise RuntimeError(f"job {job_id} did not complete in time")


@dataclass
class FanInProducer(_Task):
    """Enqueues the fan-in graph and awaits its final job."""

    def run(self) -> tuple[int, dict[str, Any]]:
        deadline = time.monotonic() + self.seconds
        started = time.monotonic()
        final = enqueue_fan_in(self.c)
        enqueued = time.monotonic()
        await_completed(self.c, final, deadline)
        done = time.monotonic()
        return 0, {"seconds": done - started, "enqueue_seconds": enqueued - started}


def _workers(plan: Any, url: str, keys: Keys, wait: float) -> list[BurnWorker]:
    """Claim-50 workers; each takes the queue for drained once a claim long-polling
    ``wait`` seconds comes back empty."""
    return [
        clients.BurnWorker(url, keys.worker, 90, limit=50, wait=wait) for _ in range(plan.workers)
    ]


def bench_fan_in(plan: Any, url: str, keys: Keys) -> dict[str, float]:
    # The workers long-poll: they start before the graph is enqueued.
    tasks: list[Any] = [FanInProducer(url, keys.producer, 90), *_workers(plan, url, keys, 1.0)]
    _, shares = run_parallel(tasks)
    ran = sum(s.count for s in shares)
    if ran != LEAVES + LEAVES // JOIN + 1:
        raise RuntimeError(f"fan-in: {ran} jobs ran, not {LEAVES + LEAVES // JOIN + 1}")
    producer = next(s for s in shares if "seconds" in s.extra)
    seconds = producer.extra["seconds"]
    return {
        "fan_in_seconds": round(seconds, 3),
        "fan_in_jobs_per_s": round(ran / seconds, 1),
        "fan_in_enqueue_seconds": round(producer.extra["enqueue_seconds"], 3),
    }


def bench_fan_out(plan: Any, url: str, keys: Keys) -> dict[str, float]:
    with clients.client(url, keys.producer) as c:
        root = expect(c.post("/jobs", json={"type": "noop", "payload": PAYLOAD}), 201)["id"]
        for _ in range(plan.fan_out // BATCH):
            _batch(c, [{"type": "noop", "payload": PAYLOAD, "depends_on": [root]}] * BATCH)
    with clients.client(url, keys.worker) as c:
        (held,) = expect(c.post("/jobs/claim", json={"limit": 1}))["jobs"]
        if held["id"] != root:
            raise RuntimeError("fan-out: the first claim was not the root job")
        started = time.perf_counter()
        expect(c.post(f"/jobs/{root}/complete", json={"lease_token": held["lease_token"]}))
        release_ms = (time.perf_counter() - started) * 1000
    rate, shares = run_parallel(_workers(plan, url, keys, 0))
    if sum(s.count for s in shares) != plan.fan_out:
        raise RuntimeError(f"fan-out: {sum(s.count for s in shares)} != {plan.fan_out}")
    return {
        "fan_out_jobs": plan.fan_out,
        "fan_out_complete_ms": round(release_ms, 1),
        "fan_out_drain_jobs_per_s": round(rate, 1),
    }


def bench_workflows(plan: Any, url: str, keys: Keys) -> dict[str, float]:
    return {**bench_fan_in(plan, url, keys), **bench_fan_out(plan, url, keys)}
