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


def time_claims(servers: list[tuple[str, str]], claims: int, seconds: float) -> list[list[float]]:
    """Seconds per claim request (limit 1) on each server, taking turns.

    Taking turns, one claim here and one there, puts both sizes under the same
    load from the rest of the machine, so their ratio holds on a busy one.
    """
    times: list[list[float]] = [[] for _ in servers]
    deadline = time.monotonic() + seconds
    conns = [client(url, key) for url, key in servers]
    try:
        for c in conns:
            for _ in range(10):
                expect(c.post("/jobs/claim", json={"limit": 1}))
        while len(times[0]) < claims and time.monotonic() < deadline:
            for c, samples in zip(conns, times, strict=True):
                started = time.perf_counter()
                jobs = expect(c.post("/jobs/claim", json={"limit": 1}))["jobs"]
                samples.append(time.perf_counter() - started)
                if not jobs:
                    raise RuntimeError("the queue ran dry while timing claims")
    finally:
        for c in conns:
            c.close()
    return times


def claim_cost(workdir: Path, sizes: tuple[int, int], claims: int) -> dict[str, object]:
    """Median seconds per claim at each size, and the ratio large/small."""
    prepared = []
    for size in sizes:
        config, keys = prepare_database(workdir / f"claim-{size}")
        prepared.append((size, config, keys, fill(config.parent / "queuelog.db", size)))
    with Server(prepared[0][1]) as small, Server(prepared[1][1]) as large:
        servers = [(small.url, prepared[0][2].worker), (large.url, prepared[1][2].worker)]
        times = time_claims(servers, claims, seconds=60)
    result: dict[str, object] = {}
    for (size, _, _, filled), samples in zip(prepared, times, strict=True):
        result[str(size)] = {
            "pending": size,
            "fill_seconds": round(filled, 2),
            "claim_ms_p50": round(statistics.median(samples) * 1000, 3),
            "claim_ms_mean": round(statistics.fmean(samples) * 1000, 3),
            "claims": len(samples),
        }
    result["ratio"] = round(statistics.median(times[1]) / statistics.median(times[0]), 3)
    result["peak_rss_mb"] = round(max(small.peak_rss_mb, large.peak_rss_mb), 1)
    return result
