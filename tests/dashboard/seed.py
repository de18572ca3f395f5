"""Jobs in every state, with an hour of history, for the overview's screenshot."""

from __future__ import annotations

import math
import random
from datetime import timedelta

import httpx

from queuelog.auth import KeyRing
from queuelog.clock import FakeClock, SystemClock
from queuelog.config import Settings
from queuelog.models import Priority, Role
from queuelog.service import JobService
from queuelog.specs import EnqueueSpec, FinishSpec
from queuelog.storage.protocol import Storage
from tests.conftest import run_blocking

TYPES = ["send_email", "resize_image", "noop"]


def _spec(rng: random.Random) -> EnqueueSpec:
    job_type = rng.choice(TYPES)
    payload = {"to": f"user{rng.randint(1, 999)}@example.com"} if job_type == "send_email" else {}
    return EnqueueSpec(job_type, payload, Priority.MEDIUM, max_retries=0)


def seed_history(settings: Settings, storage: Storage, minutes: int = 58) -> None:
    """Jobs enqueued, claimed and finished over the last ``minutes`` minutes."""
    real_now = SystemClock().now()
    clock = FakeClock(real_now - timedelta(minutes=minutes))
    service = JobService(storage, settings, clock, rng=random.Random(7))
    ring = KeyRing(storage, clock)
    producer, _ = run_blocking(ring.create("shop", frozenset({Role.PRODUCER}), Priority.CRITICAL))
    worker, _ = run_blocking(ring.create("mailer", frozenset({Role.WORKER}), Priority.LOW))
    rng = random.Random(42)
    for minute in range(minutes):
        count = 4 + round(3 * math.sin(minute / 7)) + rng.randint(0, 3)
        run_blocking(service.enqueue_many(producer, [_spec(rng) for _ in range(count)]))
        # Leases long enough that the live server's sweeper leaves them alone.
        held = run_blocking(
            service.claim(worker, limit=count, lease_seconds=7200, instance="host-1")
        )
        for job in held:
            error = "SMTP 421: try again later" if rng.random() < 0.12 else None
            run_blocking(
                service.finish(worker, FinishSpec(job.id, job.lease_token or "", error=error))
            )
        clock.advance(60)


def seed_every_state(
    settings: Settings, storage: Storage, producer: httpx.Client, worker: httpx.Client
) -> None:
    """History, then jobs pending, running (leased) and cancelled right now."""
    seed_history(settings, storage)
    for job_type in ("resize_image", "send_email", "noop"):
        body = {"type": job_type, "payload": {"to": "ops@example.com"}, "priority": "high"}
        assert producer.post("/jobs", json=body).status_code == 201
    for host in ("host-1", "host-2", "host-3"):
        claim = {"lease_seconds": 600, "instance": host}
        assert len(worker.post("/jobs/claim", json=claim).json()["jobs"]) == 1
    for n in range(7):
        body = {"type": "send_email", "payload": {"to": f"later{n}@example.com"}}
        if n >= 5:
            body["delay_seconds"] = 3600
        assert producer.post("/jobs", json=body).status_code == 201
    for n in range(2):
        job = producer.post("/jobs", json={"type": "noop", "payload": {"n": n}}).json()
        assert producer.post(f"/jobs/{job['id']}/cancel").status_code == 200
