"""SIGTERM: in-flight requests finish, new connections are refused, exit 0, nothing lost."""

from __future__ import annotations

import signal
import threading
import time
from typing import Any

import httpx
import pytest

from tests.realserver import RealServer

pytestmark = pytest.mark.slow


def _send_in_thread(
    client: httpx.Client, url: str, body: dict[str, Any] | None, out: dict[str, Any]
) -> threading.Thread:
    """POST ``body`` to ``url`` (GET if there is none) from a thread of its own."""

    def run() -> None:
        try:
            if body is None:
                out["response"] = client.get(url)
            else:
                out["response"] = client.post(url, json=body)
        except httpx.HTTPError as exc:
            out["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _enqueue_until_refused(url: str, key: str, out: list[httpx.Response]) -> threading.Thread:
    """Enqueue over fresh connections until the server refuses them (bounded)."""

    def run() -> None:
        deadline = time.monotonic() + 30
        for _ in range(5000):
            if time.monotonic() > deadline:
                return
            try:
                out.append(
                    httpx.post(
                        f"{url}/jobs",
                        json={"type": "noop"},
                        headers={"Authorization": f"Bearer {key}"},
                        timeout=30,
                    )
                )
            except httpx.TransportError:
                return

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_sigterm_finishes_in_flight_requests_and_exits_cleanly(real_server: RealServer) -> None:
    admin = real_server.create_key("root", "admin")
    producer = real_server.create_key("shop", "producer")
    worker = real_server.create_key("mailer", "worker")
    real_server.start()
    with (
        real_server.client(producer) as prod,
        real_server.client(worker) as work,
        real_server.client(worker) as waiting,
    ):
        ids = [prod.post("/jobs", json={"type": "noop"}).json()["id"] for _ in range(5)]
        held = work.post("/jobs/claim", json={"limit": 2}).json()["jobs"]
        assert len(held) == 2
        # Producers keep enqueueing while the signal arrives.
        streams: list[list[httpx.Response]] = [[] for _ in range(4)]
        threads = [_enqueue_until_refused(real_server.url, producer, out) for out in streams]
        # A long-polling claim on a type with nothing ready: it must not hold shutdown.
        poll: dict[str, Any] = {}
        poll_thread = _send_in_thread(
            waiting, "/jobs/claim", {"types": ["short"], "wait_seconds": 30}, poll
        )
        # A producer awaiting a job still running: answered at once with the job as it is.
        awaited: dict[str, Any] = {}
        await_thread = _send_in_thread(
            prod, f"/jobs/{held[0]['id']}?wait_seconds=30", None, awaited
        )
        time.sleep(1.0)
        assert all(streams), "the producers did not get going"
        started = time.monotonic()
        assert real_server.process is not None
        real_server.process.send_signal(signal.SIGTERM)
        code = real_server.process.wait(timeout=30)
        shutdown_seconds = time.monotonic() - started
        for thread in [*threads, poll_thread, await_thread]:
            thread.join(timeout=30)
        assert code == 0, real_server.log()
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{real_server.url}/healthz", timeout=5)

    # Every enqueue answered before or during the shutdown succeeded.
    acknowledged = ids[:]
    for response in (r for out in streams for r in out):
        assert response.status_code == 201, response.text
        acknowledged.append(response.json()["id"])
    assert "response" in poll, poll
    assert poll["response"].status_code == 200
    assert poll["response"].json() == {"jobs": []}
    assert "response" in awaited, awaited
    assert awaited["response"].status_code == 200
    assert awaited["response"].json()["status"] == "running"
    assert shutdown_seconds < 9, f"shutdown took {shutdown_seconds:.1f} s: waiters held it"
    assert real_server.integrity_check() == "ok"

    real_server.start()
    with real_server.client(admin) as root, real_server.client(worker) as work:
        for job_id in acknowledged:
            assert root.get(f"/jobs/{job_id}").status_code == 200
        # The two held jobs are still running under their leases; the rest are claimable.
        statuses = {root.get(f"/jobs/{i}").json()["status"] for i in ids[:2]}
        assert statuses == {"running"}
        claimed = work.post("/jobs/claim", json={"limit": 100}).json()["jobs"]
        assert len(claimed) == len(acknowledged) - 2
        for job in held:
            done = work.post(
                f"/jobs/{job['id']}/complete", json={"lease_token": job["lease_token"]}
            )
            assert done.status_code == 200, done.text
    assert real_server.terminate() == 0
