"""Long-poll claims over real HTTP: wake on enqueue and on a retry's run_at, time out empty,
and never hand a job to a client that has gone away."""

from __future__ import annotations

import json
import socket
import statistics
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.realserver import RealServer, closing, wait_until

pytestmark = pytest.mark.slow


@dataclass
class Keys:
    admin: str
    producer: str
    worker: str


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RealServer, Keys]]:
    """One server for the module; each test uses its own job type so they do not meet."""
    types = {
        name: {"max_retries": 3, "lease_seconds": 30, "backoff_base_seconds": 1}
        for name in ("wake", "empty", "retry", "gone", "latency", "linger")
    }
    types["expire"] = {"lease_seconds": 1, "backoff_base_seconds": 0.2, "backoff_cap_seconds": 1}
    with closing(RealServer(Path(tmp_path_factory.mktemp("long_poll")), types=types)) as real:
        keys = Keys(
            admin=real.create_key("root", "admin"),
            producer=real.create_key("shop", "producer"),
            worker=real.create_key("mailer", "worker"),
        )
        real.start()
        yield real, keys


def _claim_later(
    pool: ThreadPoolExecutor, client: httpx.Client, body: dict[str, object]
) -> Future[tuple[float, httpx.Response]]:
    def run() -> tuple[float, httpx.Response]:
        response = client.post("/jobs/claim", json=body)
        return time.monotonic(), response

    return pool.submit(run)


def test_waiting_claim_returns_as_soon_as_a_job_is_enqueued(
    server: tuple[RealServer, Keys],
) -> None:
    real, keys = server
    with (
        real.client(keys.producer) as prod,
        real.client(keys.worker) as work,
        ThreadPoolExecutor(1) as pool,
    ):
        started = time.monotonic()
        waiting = _claim_later(pool, work, {"types": ["wake"], "wait_seconds": 20})
        time.sleep(0.5)
        assert not waiting.done()
        job = prod.post("/jobs", json={"type": "wake"}).json()
        answered_at, response = waiting.result(timeout=30)
    assert response.status_code == 200
    assert [j["id"] for j in response.json()["jobs"]] == [job["id"]]
    assert answered_at - started < 15, "the claim waited for its deadline, not for the job"


def test_waiting_claim_answers_empty_when_nothing_comes(server: tuple[RealServer, Keys]) -> None:
    real, keys = server
    with real.client(keys.worker) as work:
        started = time.monotonic()
        response = work.post("/jobs/claim", json={"types": ["empty"], "wait_seconds": 2})
        waited = time.monotonic() - started
    assert response.status_code == 200
    assert response.json() == {"jobs": []}
    assert waited >= 1.9


def test_waiting_claim_wakes_when_a_retried_job_is_due(server: tuple[RealServer, Keys]) -> None:
    real, keys = server
    with real.client(keys.producer) as prod, real.client(keys.worker) as work:
        job = prod.post("/jobs", json={"type": "retry"}).json()
        held = work.post("/jobs/claim", json={"types": ["retry"]}).json()["jobs"][0]
        failed = work.post(
            f"/jobs/{job['id']}/fail",
            json={"lease_token": held["lease_token"], "error": "boom", "retry_in_seconds": 2},
        )
        assert failed.status_code == 200 and failed.json()["status"] == "pending"
        failed_at = time.monotonic()
        response = work.post("/jobs/claim", json={"types": ["retry"], "wait_seconds": 20})
        answered = time.monotonic() - failed_at
    jobs = response.json()["jobs"]
    assert [j["id"] for j in jobs] == [job["id"]]
    assert jobs[0]["retry_count"] == 1
    assert 1.5 <= answered < 15, answered


def test_waiting_claim_gets_a_job_whose_lease_expired_meanwhile(
    server: tuple[RealServer, Keys],
) -> None:
    real, keys = server
    with (
        real.client(keys.producer) as prod,
        real.client(keys.worker) as work,
        real.client(keys.admin) as root,
    ):
        job = prod.post("/jobs", json={"type": "expire"}).json()
        held = work.post("/jobs/claim", json={"types": ["expire"]}).json()["jobs"]
        assert [j["id"] for j in held] == [job["id"]]
        # Nobody reports on it: the sweeper rescues it and wakes the waiting claim.
        response = work.post("/jobs/claim", json={"types": ["expire"], "wait_seconds": 20})
        jobs = response.json()["jobs"]
        assert [j["id"] for j in jobs] == [job["id"]]
        assert jobs[0]["retry_count"] == 1
        events = root.get(f"/jobs/{job['id']}/events").json()["events"]
    assert [e["event"] for e in events] == ["enqueued", "claimed", "lease_expired", "claimed"]


def _abandoned_claim(real: RealServer, key: str, claim: dict[str, object]) -> socket.socket:
    """Send a claim on a raw socket; the caller closes it without reading."""
    body = json.dumps(claim).encode()
    request = (
        b"POST /jobs/claim HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Authorization: Bearer " + key.encode() + b"\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
    ) + body
    sock = socket.create_connection(("127.0.0.1", real.port), timeout=10)
    sock.sendall(request)
    return sock


def test_client_that_disconnects_while_waiting_takes_no_job(
    server: tuple[RealServer, Keys],
) -> None:
    real, keys = server
    with (
        real.client(keys.producer) as prod,
        real.client(keys.worker) as work,
        real.client(keys.admin) as root,
    ):
        for _ in range(3):
            claim = {"types": ["gone"], "wait_seconds": 20}
            gone = [_abandoned_claim(real, keys.worker, claim) for _ in range(3)]
            time.sleep(0.3)
            for sock in gone:
                sock.close()
            # Enqueue while the abandoned claims are still waiting on the server.
            time.sleep(0.1)
            job = prod.post("/jobs", json={"type": "gone"}).json()
            response = work.post("/jobs/claim", json={"types": ["gone"], "wait_seconds": 5})
            assert [j["id"] for j in response.json()["jobs"]] == [job["id"]]
            events = root.get(f"/jobs/{job['id']}/events").json()["events"]
            claims = [e for e in events if e["event"] == "claimed"]
            assert len(claims) == 1, events


def test_client_that_hangs_up_while_its_claim_lingers_gets_its_jobs_released(
    server: tuple[RealServer, Keys],
) -> None:
    real, keys = server
    with (
        real.client(keys.producer) as prod,
        real.client(keys.worker) as work,
        real.client(keys.admin) as root,
    ):
        job = prod.post("/jobs", json={"type": "linger"}).json()
        claim = {"types": ["linger"], "limit": 5, "linger_ms": 1000}
        sock = _abandoned_claim(real, keys.worker, claim)
        running = lambda: root.get(f"/jobs/{job['id']}").json()["status"] == "running"  # noqa: E731
        wait_until(running, "the lingering claim to hold the job")
        sock.close()
        # Released when the hang-up is heard, not when its 30 s lease would end.
        response = work.post("/jobs/claim", json={"types": ["linger"], "wait_seconds": 10})
        jobs = response.json()["jobs"]
        assert [j["id"] for j in jobs] == [job["id"]] and jobs[0]["retry_count"] == 0
        events = root.get(f"/jobs/{job['id']}/events").json()["events"]
    assert [e["event"] for e in events] == ["enqueued", "claimed", "released", "claimed"]


def test_enqueue_to_waiting_claimer_latency(server: tuple[RealServer, Keys]) -> None:
    """Measured, not asserted: enqueue -> waiting claimer, over 50 rounds."""
    real, keys = server
    latencies: list[float] = []
    ready = threading.Event()
    with (
        real.client(keys.producer) as prod,
        real.client(keys.worker) as work,
        ThreadPoolExecutor(1) as pool,
    ):
        for _ in range(50):
            ready.clear()

            def claim() -> tuple[float, httpx.Response]:
                ready.set()
                response = work.post("/jobs/claim", json={"types": ["latency"], "wait_seconds": 10})
                return time.monotonic(), response

            waiting = pool.submit(claim)
            assert ready.wait(10)
            time.sleep(0.05)  # let the claim reach the server and start waiting
            sent = time.monotonic()
            assert prod.post("/jobs", json={"type": "latency"}).status_code == 201
            answered_at, response = waiting.result(timeout=30)
            assert len(response.json()["jobs"]) == 1
            latencies.append(answered_at - sent)
    cuts = statistics.quantiles(latencies, n=100)
    print(
        f"\nenqueue -> waiting claimer over {len(latencies)} rounds: "
        f"p50 {cuts[49] * 1000:.1f} ms, p99 {cuts[98] * 1000:.1f} ms, "
        f"max {max(latencies) * 1000:.1f} ms"
    )
