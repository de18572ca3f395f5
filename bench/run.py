"""``python -m bench [--quick]``: run every section, print the table, write the JSON."""

from __future__ import annotations

import argparse
import importlib.util
import json
import multiprocessing as mp
import os
import platform
import sqlite3
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import clients
from bench.claimcost import claim_cost
from bench.huey_ref import huey_reference
from bench.parallel import run_parallel
from bench.pg import fresh_schema, postgres_url, unavailable, with_schema
from bench.pgqueuer_ref import pgqueuer_reference
from bench.report import goals, ratios, render, render_spread, spread
from bench.server import Keys, Server, prepare_database
from bench.shapes import QueuelogShapes, ShapePlan, measure_shapes
from bench.waits import bench_waiting
from bench.workflows import bench_workflows

RESULTS = Path(__file__).parent / "results" / "latest.json"


@dataclass(frozen=True)
class Plan:
    jobs: int  # burn-down size; Huey's enqueue and burn-down size
    enqueue_single: int
    enqueue_batch: int  # jobs sent per batch size
    steady_seconds: float
    latency_samples: int
    claim_sizes: tuple[int, int]
    claim_samples: int
    shapes: ShapePlan  # the users' shapes, on both backends
    claim_one_jobs: int  # the claim 1 + complete burn-down's size (its slowest section)
    clients: int = 4  # client processes
    connections: int = 4  # single-enqueue connections per client process
    workers: int = 4
    fan_out: int = 10_000  # jobs waiting for one job (a multiple of 500)


FULL = Plan(
    10_000,
    10_000,
    40_000,
    8.0,
    200,
    (10_000, 1_000_000),
    300,
    ShapePlan(5_000, 8.0, 20_000),
    10_000,
)
QUICK = Plan(
    1_000,
    1_000,
    4_000,
    1.5,
    40,
    (1_000, 50_000),
    60,
    ShapePlan(160, 0.5, 1_000, idle=0.25, bracket=False),
    200,
    fan_out=2_000,
)
BACKENDS = ("sqlite", "postgres")


def _rate(value: float) -> float:
    return round(value, 1)


def bench_enqueue(plan: Plan, url: str, keys: Keys) -> dict[str, float]:
    connections = plan.clients * plan.connections
    # The server's figure, from a lean load generator: 2 processes, the same connections.
    raw = [
        clients.RawEnqueueSingle(
            url, keys.producer, 60, count=plan.enqueue_single // 2, connections=connections // 2
        )
        for _ in range(2)
    ]
    result = {"single": _rate(run_parallel(raw)[0])}
    # What Python producers on httpx see, with their own cost on the same 2 cores.
    per = plan.enqueue_single // plan.clients
    single = [
        clients.EnqueueSingle(url, keys.producer, 60, count=per, connections=plan.connections)
        for _ in range(plan.clients)
    ]
    result["single_httpx"] = _rate(run_parallel(single)[0])
    for size in (100, 500):
        per = plan.enqueue_batch // 2
        batch = [clients.EnqueueBatch(url, keys.producer, 60, count=per, size=size) for _ in "ab"]
        result[f"batch_{size}"] = _rate(run_parallel(batch)[0])
    return result


def bench_burn_down(plan: Plan, url: str, keys: Keys) -> dict[str, float]:
    result = {}
    for name, limit, jobs in (("batch_1", 1, plan.claim_one_jobs), ("batched_50", 50, plan.jobs)):
        clients.fill_queue(url, keys.producer, jobs)
        workers = [
            clients.BurnWorker(url, keys.worker, 90, limit=limit) for _ in range(plan.workers)
        ]
        rate, shares = run_parallel(workers)
        if sum(s.count for s in shares) != jobs:
            raise RuntimeError(f"burn-down {name}: {sum(s.count for s in shares)} != {jobs}")
        result[name] = _rate(rate)
    if importlib.util.find_spec("queuelog.client") is not None:
        clients.fill_queue(url, keys.producer, plan.jobs)
        sdk = [clients.SdkBurnWorker(url, keys.worker, 90) for _ in range(plan.workers)]
        rate, shares = run_parallel(sdk)
        if sum(s.count for s in shares) != plan.jobs:
            raise RuntimeError(f"burn-down sdk: {sum(s.count for s in shares)} != {plan.jobs}")
        result["sdk_worker"] = _rate(rate)
    return result


def bench_flow(plan: Plan, url: str, keys: Keys) -> dict[str, float]:
    """Burn-downs of claim 50 + batch complete: a type without limits, one whose limits
    never bind, and one with group_concurrency = 1 over 1,000 groups."""
    result = {}
    modes = (("unlimited", "noop", 0, 0.0), ("never_binds", "wide", 0, 0.0))
    modes += (("groups_1000", "tenant", 1000, 1.0),)
    for name, job_type, groups, wait in modes:
        clients.fill_queue(url, keys.producer, plan.jobs, job_type, groups)
        workers = [
            clients.BurnWorker(url, keys.worker, 90, limit=50, types=[job_type], wait=wait)
            for _ in range(plan.workers)
        ]
        rate, shares = run_parallel(workers)
        if sum(s.count for s in shares) != plan.jobs:
            raise RuntimeError(f"flow {name}: {sum(s.count for s in shares)} != {plan.jobs}")
        result[name] = _rate(rate)
    result["never_binds_ratio"] = round(result["never_binds"] / result["unlimited"], 2)
    return result


def bench_steady(plan: Plan, url: str, keys: Keys) -> dict[str, float]:
    seconds = plan.steady_seconds
    tasks: list[Any] = [clients.SteadyProducer(url, keys.producer, seconds)]
    tasks += [clients.SteadyWorker(url, keys.worker, seconds) for _ in range(plan.workers)]
    rate, shares = run_parallel(tasks)
    span = max(s.ended for s in shares) - min(s.started for s in shares)
    enqueued = sum(s.extra.get("enqueued", 0) for s in shares)
    return {"completed": _rate(rate), "enqueued": _rate(enqueued / span)}


def bench_latency(plan: Plan, url: str, keys: Keys) -> dict[str, float]:
    out = mp.get_context("fork").Queue()
    n = plan.latency_samples
    worker = clients.LatencyWorker(url, keys.worker, 60, samples=n, out=out)
    producer = clients.LatencyProducer(url, keys.producer, 60, samples=n, out=out)
    _, shares = run_parallel([worker, producer])
    samples = sorted(x for s in shares for x in s.extra.get("latencies", []))
    cuts = statistics.quantiles(samples, n=100, method="inclusive")
    return {
        "p50_ms": round(statistics.median(samples) * 1000, 2),
        "p99_ms": round(cuts[98] * 1000, 2),
        "max_ms": round(samples[-1] * 1000, 2),
        "samples": len(samples),
    }


def _section(name: str, fn: Any, *args: Any) -> Any:
    started = time.monotonic()
    print(f"  {name} ...", end="", flush=True)
    value = fn(*args)
    print(f" {time.monotonic() - started:.1f} s", flush=True)
    return value


def run(plan: Plan, workdir: Path, options: argparse.Namespace) -> dict[str, Any]:
    """Every section; Huey runs before and after queuelog, and its figures are the mean.

    Bracketing queuelog between two Huey runs cancels a load on the machine that
    rises or falls during the run, so the ratios stay comparable; pgqueuer brackets
    the users' shapes the same way.
    """
    out: dict[str, Any] = {}
    before = _huey(plan, workdir / "huey-before") if options.huey else None
    peaks = [0.0]
    if options.only in (None, "server"):
        peaks.append(_server_sections(plan, workdir, out))
        out["claim_cost"] = _section(
            "claim_cost", claim_cost, workdir, plan.claim_sizes, plan.claim_samples
        )
    if options.only in (None, "users"):
        peaks.append(_users(plan.shapes, workdir, options.backends, out))
    out["rss"] = {"peak_mb": round(max(peaks), 1)}
    if before is not None:
        after = _huey(plan, workdir / "huey-after")
        out["huey"] = _mean(before, after)
        out["huey_runs"] = {"before": before, "after": after}
    return out


def _server_sections(plan: Plan, workdir: Path, out: dict[str, Any]) -> float:
    """The server's own sections, on SQLite; the servers' peak RSS."""
    peaks = []
    for group, sections in (
        ("a", [("enqueue", bench_enqueue)]),
        ("b", [("burn_down", bench_burn_down), ("waiting", bench_waiting)]),
        ("e", [("workflows", bench_workflows)]),
        ("c", [("latency", bench_latency), ("steady", bench_steady)]),
        ("d", [("flow", bench_flow)]),
    ):
        config, keys = prepare_database(workdir / f"server-{group}", flow=group == "d")
        with Server(config) as server:
            for name, fn in sections:
                out[name] = _section(name, fn, plan, server.url, keys)
        peaks.append(server.peak_rss_mb)
    return max(peaks)


def _users(plan: ShapePlan, workdir: Path, backends: list[str], out: dict[str, Any]) -> float:
    """The users' shapes through the SDK on each backend, pgqueuer before and after the
    PostgreSQL ones (each in a fresh schema); the servers' peak RSS."""
    out["users"] = {}
    peaks = [0.0]
    if "sqlite" in backends:
        figures, peak = _section("users, SQLite", _queuelog_shapes, plan, workdir / "users-sq")
        out["users"]["sqlite"] = figures
        peaks.append(peak)
    if "postgres" in backends:
        url = postgres_url()
        before = _section("pgqueuer", pgqueuer_reference, plan, url)
        with fresh_schema(url, "bench_ql") as schema:
            database = with_schema(url, schema)
            figures, peak = _section(
                "users, PostgreSQL", _queuelog_shapes, plan, workdir / "users-pg", database
            )
        out["users"]["postgres"] = figures
        peaks.append(peak)
        after = _section("pgqueuer", pgqueuer_reference, plan, url) if plan.bracket else before
        out["pgqueuer"] = _mean(before, after)
        out["pgqueuer_runs"] = {"before": before, "after": after}
    return max(peaks)


def _queuelog_shapes(
    plan: ShapePlan, workdir: Path, database: str | None = None
) -> tuple[dict[str, float], float]:
    config, keys = prepare_database(workdir, database=database)
    with Server(config) as server:
        figures = measure_shapes(plan, QueuelogShapes(server.url, keys.producer, keys.worker))
    return figures, server.peak_rss_mb


def _mean(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: _rate((before[k] + after[k]) / 2) for k in before}


def _huey(plan: Plan, workdir: Path) -> dict[str, float]:
    figures = _section(
        "huey", huey_reference, workdir, plan.jobs, plan.steady_seconds, plan.shapes.jobs
    )
    return {k: _rate(v) for k, v in figures.items()}


def _options(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="small sizes: under a minute")
    parser.add_argument("--output", type=Path, default=RESULTS, help="where to write the JSON")
    parser.add_argument("--no-huey", dest="huey", action="store_false", help="skip Huey")
    parser.add_argument("--runs", type=int, default=1, help="repeat; report best and worst")
    parser.add_argument(
        "--only", choices=("server", "users"), help="the server's sections or the users' shapes"
    )
    parser.add_argument(
        "--backend", choices=BACKENDS, action="append", help="the users' shapes on this one"
    )
    options = parser.parse_args(argv)
    options.backends = options.backend or list(BACKENDS)
    if "postgres" in options.backends and options.only != "server":
        reason = unavailable(postgres_url())
        if reason is not None:
            parser.error(
                f"PostgreSQL at {postgres_url()} is unusable ({reason}); "
                "set BENCH_POSTGRES_URL or pass --backend sqlite"
            )
    return options


def main(argv: list[str] | None = None) -> int:
    args = _options(argv)
    plan = QUICK if args.quick else FULL
    started = time.monotonic()
    runs = []
    for number in range(1, args.runs + 1):
        print(f"queuelog benchmark ({'quick' if args.quick else 'full'}) run {number}/{args.runs}")
        with tempfile.TemporaryDirectory(prefix="queuelog-bench-") as tmp:
            results = run(plan, Path(tmp), args)
        results["ratios"] = ratios(results)
        results["goals"] = goals(results)
        print(render(results))
        runs.append(results)
    if len(runs) > 1:
        results["spread"] = spread(runs)
        print(render_spread(results["spread"]))
    results["meta"] = {
        "mode": "quick" if args.quick else "full",
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "seconds": round(time.monotonic() - started, 1),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "sqlite": sqlite3.sqlite_version,
        "plan": asdict(plan),
        "runs": len(runs),
        "durability": "full",
        "only": args.only,
        "backends": args.backends,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.output}")
    return 0
