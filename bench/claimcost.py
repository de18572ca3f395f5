"""Claim cost as the table grows: time per claim with few vs many pending jobs.

The table is filled by one INSERT ... SELECT on the real schema (the store's
own migrations), which is far faster than going through HTTP.
"""

from __future__ import annotations

import sqlite3
import statistics
import time
from pathlib import Path

from bench.clients import client, expect
from bench.server import Server, prepare_database

FILL = """
WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < :count)
INSERT INTO jobs (type, payload, priority, principal, run_at, created_at, updated_at)
SELECT 'noop', '{"data":"' || printf('%.88c', 'x') || '"}', (x % 4) * 10, 'bench-producer',
       :now - 1000000, :now - 1000000 + x, :now - 1000000 + x
FROM n
"""


def fill(db: Path, count: int) -> float:
    """Insert ``count`` ready jobs; the seconds it took."""
    started = time.monotonic()
    conn = sqlite3.connect(db, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(FILL, {"count": count, "now": int(time.time() * 1_000_000)})
        conn.execute("COMMIT")
    finally:
        conn.close()
    return time.monotonic() - started


def time_claims(url: str, key: str, claims: int, seconds: float) -> list[float]:
    """Seconds per claim request (limit 1), one claimer, after a short warm-up."""
    times: list[float] = []
    deadline = time.monotonic() + seconds
    with client(url, key) as c:
        for _ in range(10):
            expect(c.post("/jobs/claim", json={"limit": 1}))
        while len(times) < claims and time.monotonic() < deadline:
            started = time.perf_counter()
            jobs = expect(c.post("/jobs/claim", json={"limit": 1}))["jobs"]
            times.append(time.perf_counter() - started)
            if not jobs:
                raise RuntimeError("the queue ran dry while timing claims")
    return times


def claim_cost(workdir: Path, sizes: tuple[int, int], claims: int) -> dict[str, object]:
    """Median seconds per claim at each size, and the ratio large/small."""
    result: dict[str, object] = {}
    medians = []
    peak = 0.0
    for size in sizes:
        config, keys = prepare_database(workdir / f"claim-{size}")
        filled = fill(config.parent / "queuelog.db", size)
        with Server(config) as server:
            times = time_claims(server.url, keys.worker, claims, seconds=30)
        peak = max(peak, server.peak_rss_mb)
        median = statistics.median(times)
        medians.append(median)
        result[str(size)] = {
            "pending": size,
            "fill_seconds": round(filled, 2),
            "claim_ms_p50": round(median * 1000, 3),
            "claim_ms_mean": round(statistics.fmean(times) * 1000, 3),
            "claims": len(times),
        }
    result["ratio"] = round(medians[1] / medians[0], 3)
    result["peak_rss_mb"] = round(peak, 1)
    return result
