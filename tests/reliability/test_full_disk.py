"""A real server whose SQLite database sits on a small filesystem that fills up.

The test mounts a tmpfs of its own (it must run as root; it skips otherwise) and
fills it with batch enqueues until writes are refused, then gives the filesystem
more room with a remount, as an operator freeing space would.
"""

from __future__ import annotations

import re
import sqlite3
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.mounts import mount, mounted
from tests.realserver import RealServer, closing

pytestmark = pytest.mark.slow

SMALL = "4m"
ROOMY = "64m"
BATCH = 100
REFUSALS_WANTED = 30
TMPFS = ["-t", "tmpfs", "-o", f"size={SMALL},mode=0700", "tmpfs"]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of ``SMALL`` bytes, mounted for this test and unmounted after it."""
    disk = tmp_path / "disk"
    disk.mkdir()
    with mounted("a small filesystem (tmpfs)", TMPFS, disk):
        yield disk


def _batch() -> list[dict[str, Any]]:
    return [
        {"type": "noop", "payload": {"pad": "x" * 500}, "idempotency_key": uuid.uuid4().hex}
        for _ in range(BATCH)
    ]


def _assert_refusal(response: httpx.Response) -> None:
    """A complete problem: 507 for lack of space (503 for another fault), Retry-After."""
    assert response.status_code in (503, 507), response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert int(response.headers["retry-after"]) >= 1
    body = response.json()
    assert set(body) == {"type", "title", "status", "detail"}
    assert body["status"] == response.status_code
    assert body["type"] == (
        "insufficient-storage" if response.status_code == 507 else "unavailable"
    )
    for leak in ("sqlite", "SELECT", "Traceback", "/"):
        assert leak not in response.text


def _acknowledge(acknowledged: dict[str, int], jobs: list[dict[str, Any]]) -> None:
    for job in jobs:
        acknowledged[job["idempotency_key"]] = job["id"]


def _fill(producer: httpx.Client, acknowledged: dict[str, int]) -> list[list[dict[str, Any]]]:
    """Enqueue batches until one is refused (bounded); the refused batches."""
    for _ in range(2000):
        jobs = _batch()
        response = producer.post("/jobs/batch", json={"jobs": jobs})
        if response.is_success:
            _acknowledge(acknowledged, [item["job"] for item in response.json()["jobs"]])
            continue
        _assert_refusal(response)
        return [jobs]
    raise AssertionError("the filesystem never filled up")


def _write_while_full(
    producer: httpx.Client, acknowledged: dict[str, int], refused: list[list[dict[str, Any]]]
) -> int:
    """Single and batch enqueues on the full disk: each stored, or a complete refusal."""
    refusals = 0
    for n in range(REFUSALS_WANTED):
        jobs = _batch() if n % 2 else _batch()[:1]
        if n % 2:
            response = producer.post("/jobs/batch", json={"jobs": jobs})
        else:
            response = producer.post("/jobs", json=jobs[0])
        if response.is_success:
            body = response.json()
            _acknowledge(acknowledged, [i["job"] for i in body["jobs"]] if n % 2 else [body])
            continue
        _assert_refusal(response)
        refused.append(jobs)
        refusals += 1
    return refusals


def _write_at_once(producer: httpx.Client, refused: list[list[dict[str, Any]]]) -> None:
    """Batches sent together, so that one group of the writer holds several: each
    request of a refused group gets its own complete answer."""
    batches = [_batch() for _ in range(8)]
    with ThreadPoolExecutor(len(batches)) as pool:
        answers = list(
            pool.map(lambda jobs: producer.post("/jobs/batch", json={"jobs": jobs}), batches)
        )
    for jobs, response in zip(batches, answers, strict=True):
        _assert_refusal(response)
        refused.append(jobs)


def _claim_while_full(server: RealServer, worker_key: str) -> int:
    """Claims on the full disk (a claim writes its leases): each one answered with the
    jobs it leased, or a complete refusal; the number refused."""
    refusals = 0
    with server.client(worker_key) as worker:
        for _ in range(3):
            response = worker.post("/jobs/claim", json={"limit": 100})
            if not response.is_success:
                _assert_refusal(response)
                refusals += 1
    return refusals


def _metric(text: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    assert match is not None, (name, text[-2000:])
    return float(match.group(1))


def _wait_ready(server: RealServer, timeout: float = 60.0) -> httpx.Response:
    deadline = time.monotonic() + timeout
    while True:
        response = httpx.get(f"{server.url}/readyz", timeout=10)
        if response.status_code == 200 or time.monotonic() > deadline:
            return response
        time.sleep(0.2)


def test_a_full_disk_refuses_writes_as_problems_and_recovers_when_space_returns(
    tmp_path: Path, small_disk: Path
) -> None:
    database = small_disk / "queuelog.db"
    config = {"database": f"sqlite:///{database}"}
    # The server's log is written outside the small filesystem, where it can be measured.
    with closing(RealServer(tmp_path / "server", config=config)) as server:
        admin_key = server.create_key("root", "admin")
        worker_key = server.create_key("mailer", "worker")
        server.start()
        acknowledged: dict[str, int] = {}
        with server.client(server.create_key_over_http("shop", "producer")) as producer:
            refused = _fill(producer, acknowledged)
            time.sleep(0.5)  # the fault's one warning line is written by now
            log_before = server.log_path.stat().st_size
            refusals = 1 + _write_while_full(producer, acknowledged, refused)
            assert refusals >= REFUSALS_WANTED // 2
            _write_at_once(producer, refused)
            refusals += 8 + _claim_while_full(server, worker_key)

            ready = httpx.get(f"{server.url}/readyz", timeout=10)
            assert ready.status_code == 503 and ready.json()["type"] == "unavailable"
            assert ready.headers["Retry-After"] == "5"  # the full disk's own
            # No line per refused request: the log has not grown.
            assert server.log_path.stat().st_size == log_before
            log = server.log()
            assert log.count("storage fault (no-space):") == 1, log[-3000:]
            assert "Traceback" not in log and "internal error" not in log

            with server.client(admin_key) as admin:
                metrics = admin.get("/metrics").text
            refused_metric = 'queuelog_storage_refused_total{reason="no-space"}'
            assert _metric(metrics, refused_metric) >= refusals
            assert _metric(metrics, "queuelog_storage_writable") == 0

            # Space returns: readiness finds it, writes are stored again.
            assert mount(["mount", "-o", f"remount,size={ROOMY}", str(small_disk)]).returncode == 0
            assert _wait_ready(server).json() == {"status": "ready"}
            for jobs in refused:  # resent with the same idempotency keys
                response = producer.post("/jobs/batch", json={"jobs": jobs})
                assert response.is_success, response.text
                _acknowledge(acknowledged, [item["job"] for item in response.json()["jobs"]])
            assert "storage fault (no-space) ended" in server.log()

        with server.client(admin_key) as admin:
            stored = _all_jobs(admin)
        # Every acknowledged job is there, once, under the id it was acknowledged with.
        assert {stored[k] for k in acknowledged} == set(acknowledged.values())
        assert len(stored) == len(acknowledged)
        assert server.terminate() == 0
        assert _integrity(database) == "ok"


def _all_jobs(admin: httpx.Client) -> dict[str, int]:
    """Every job's id by its idempotency key (bounded paging)."""
    found: dict[str, int] = {}
    cursor: str | None = None
    for _ in range(1000):
        params: dict[str, Any] = {"limit": 500, **({"cursor": cursor} if cursor else {})}
        page = admin.get("/jobs", params=params).json()
        found.update((j["idempotency_key"], j["id"]) for j in page["jobs"])
        cursor = page["next_cursor"]
        if cursor is None:
            return found
    raise AssertionError("too many pages")


def _integrity(database: Path) -> str:
    conn = sqlite3.connect(database, timeout=30.0)
    try:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])
    finally:
        conn.close()
