"""The benchmark runs end to end in its quick form and writes every section.

Its figures are not checked here: speed is reported as ratios by ``make bench``,
never asserted by a timed test on a shared machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.postgres import postgres_url

ROOT = Path(__file__).resolve().parent.parent
SECTIONS = {
    "enqueue",
    "burn_down",
    "flow",
    "steady",
    "latency",
    "claim_cost",
    "rss",
    "waiting",
    "workflows",
    "huey",
    "users",
    "pgqueuer",
    "ratios",
    "goals",
    "meta",
}

if os.environ.get("CI") != "true":  # in CI a missing extra fails the run instead
    pytest.importorskip("huey", reason="the bench extra is not installed (make installs it)")


@pytest.mark.slow
def test_quick_benchmark_completes_and_writes_every_section(tmp_path: Path) -> None:
    output = tmp_path / "latest.json"
    # The PostgreSQL modes run in fresh schemas on the tests' server (skipped without one).
    env = {**os.environ, "BENCH_POSTGRES_URL": postgres_url()}
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--output", str(output)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = json.loads(output.read_text())
    assert results.keys() >= SECTIONS
    assert {"single", "single_httpx", "batch_100", "batch_500"} <= results["enqueue"].keys()
    assert {"batch_1", "batched_50", "sdk_worker"} <= results["burn_down"].keys()
    assert {"p50_ms", "p99_ms"} <= results["latency"].keys()
    assert {"enqueue_single", "burn_down", "steady"} <= results["huey"].keys()
    assert results["rss"]["peak_mb"] > 0
    assert {"claims_alone", "claims_beside_200_waits", "slowdown_pct"} <= results["waiting"].keys()
    flows = {"fan_in_seconds", "fan_in_jobs_per_s", "fan_out_jobs", "fan_out_complete_ms"}
    assert flows <= results["workflows"].keys()
    shapes = {"enqueue_one", "enqueue_16", "burn_down", "steady", "bulk"}
    for backend in ("sqlite", "postgres"):
        assert shapes <= results["users"][backend].keys()
    assert shapes <= results["pgqueuer"].keys()
    assert {"enqueue_one", "enqueue_16"} <= results["huey"].keys()
    assert {"postgres.steady/pgq", "sqlite.steady/huey", "sqlite.burn_down/best"} <= set(
        results["ratios"]
    )
    assert "queuelog" in done.stdout
    assert "PG/pgq" in done.stdout
