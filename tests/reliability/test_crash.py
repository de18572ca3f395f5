"""SIGKILL the server while producers enqueue as fast as they can, then restart it."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import pytest

from tests.realserver import RealServer

pytestmark = pytest.mark.slow

PRODUCERS = 4


def _produce(url: str, key: str, acknowledged: list[int], stop: threading.Event) -> None:
    """Enqueue until the server goes away (bounded); keep the id of every 2xx answer."""
    headers = {"Authorization": f"Bearer {key}"}
    deadline = time.monotonic() + 60
    with httpx.Client(base_url=url, headers=headers, timeout=30) as client:
        for n in range(100_000):
            if stop.is_set() or time.monotonic() > deadline:
                return
            try:
                response = client.post("/jobs", json={"type": "noop", "payload": {"n": n}})
            except httpx.TransportError:
                return
            if response.is_success:
                acknowledged.append(response.json()["id"])


def _all_ids(admin: httpx.Client) -> set[int]:
    ids: set[int] = set()
    cursor: str | None = None
    for _ in range(1000):
        params: dict[str, Any] = {"limit": 500, **({"cursor": cursor} if cursor else {})}
        page = admin.get("/jobs", params=params).json()
        ids.update(j["id"] for j in page["jobs"])
        cursor = page["next_cursor"]
        if cursor is None:
            break
    return ids


def test_sigkill_loses_no_acknowledged_enqueue_and_running_jobs_come_back(
    real_server: RealServer,
) -> None:
    admin = real_server.create_key("root", "admin")
    producer = real_server.create_key("shop", "producer")
    worker = real_server.create_key("mailer", "worker")
    real_server.start()
    with real_server.client(producer) as prod, real_server.client(worker) as work:
        for n in range(3):
            assert prod.post("/jobs", json={"type": "short", "payload": {"n": n}}).is_success
        # Held at the crash, never reported: they must come back through lease expiry.
        body = {"types": ["short"], "limit": 3, "lease_seconds": 5}
        running = work.post("/jobs/claim", json=body).json()["jobs"]
    assert len(running) == 3

    acknowledged: list[list[int]] = [[] for _ in range(PRODUCERS)]
    stop = threading.Event()
    threads = [
        threading.Thread(target=_produce, args=(real_server.url, producer, out, stop), daemon=True)
        for out in acknowledged
    ]
    for thread in threads:
        thread.start()
    # Kill mid-stream, while the held leases (5 s) are still live.
    deadline = time.monotonic() + 3
    while sum(map(len, acknowledged)) < 300 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert real_server.kill() == -9
    stop.set()
    for thread in threads:
        thread.join(timeout=30)
    acked = {job_id for out in acknowledged for job_id in out}
    assert len(acked) >= 20
    assert real_server.integrity_check() == "ok"

    real_server.start()
    with real_server.client(admin) as root, real_server.client(worker) as work:
        stored = _all_ids(root)
        missing = acked - stored
        assert not missing, f"{len(missing)} acknowledged enqueues lost"
        back: list[dict[str, Any]] = []
        deadline = time.monotonic() + 60
        while len(back) < 3 and time.monotonic() < deadline:
            body = {"types": ["short"], "limit": 3, "wait_seconds": 5}
            back += work.post("/jobs/claim", json=body).json()["jobs"]
        assert sorted(j["id"] for j in back) == sorted(j["id"] for j in running)
        assert all(j["retry_count"] == 1 for j in back)
        for job in back:
            events = root.get(f"/jobs/{job['id']}/events").json()["events"]
            assert [e["event"] for e in events] == [
                "enqueued",
                "claimed",
                "lease_expired",
                "claimed",
            ]
    assert real_server.terminate() == 0
    assert real_server.integrity_check() == "ok"
    print(f"\n{len(acked)} enqueues acknowledged before SIGKILL; all {len(stored)} stored")
