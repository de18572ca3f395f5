"""The figures as a table, queuelog/Huey ratios, and the goals they are held to."""

from __future__ import annotations

from typing import Any

# (label, section, key, Huey's key or None)
ROWS = [
    ("enqueue, single requests, 16 connections", "enqueue", "single", "enqueue_single"),
    ("  the same from httpx clients", "enqueue", "single_httpx", "enqueue_single"),
    ("enqueue, POST /jobs/batch of 100", "enqueue", "batch_100", None),
    ("enqueue, POST /jobs/batch of 500", "enqueue", "batch_500", None),
    ("burn-down, claim 1 + complete", "burn_down", "batch_1", "burn_down"),
    ("burn-down, claim 50 + batch complete", "burn_down", "batched_50", "burn_down"),
    ("burn-down, SDK Worker", "burn_down", "sdk_worker", "burn_down"),
    ("burn-down, claim 50, type without limits", "flow", "unlimited", "burn_down"),
    ("  limits that never bind", "flow", "never_binds", "burn_down"),
    ("  group_concurrency = 1, 1,000 groups", "flow", "groups_1000", "burn_down"),
    ("steady state, completed", "steady", "completed", "steady"),
    ("workflow, fan-in of 1,000 jobs -> 1", "workflows", "fan_in_jobs_per_s", None),
]

# The users' shapes (bench/shapes.py), on both backends: (label, key, Huey's key or None).
SHAPES = [
    ("SDK enqueue, one by one, 1 producer", "enqueue_one", "enqueue_one"),
    ("SDK enqueue, one by one, 16 threads", "enqueue_16", "enqueue_16"),
    ("burn-down, SDK Worker's defaults", "burn_down", "burn_down"),
    ("steady, 1 SDK producer + 4 Workers", "steady", "steady"),
    ("bulk, batches of 500", "bulk", None),
]

# (name, section, key, bound, "min" or "max")
GOALS = [
    ("burn-down, SDK Worker >= 8,600 jobs/s", "burn_down", "sdk_worker", 8600, "min"),
    ("steady state >= 3,000 jobs/s", "steady", "completed", 3000, "min"),
    ("single enqueue >= 3,500 jobs/s", "enqueue", "single", 3500, "min"),
    ("batch of 500 >= 20,000 jobs/s", "enqueue", "batch_500", 20000, "min"),
    ("long-poll p50 <= 5 ms", "latency", "p50_ms", 5, "max"),
    ("long-poll p99 <= 50 ms", "latency", "p99_ms", 50, "max"),
    ("claim at large/small <= 1.5", "claim_cost", "ratio", 1.5, "max"),
    ("limits that never bind >= 0.9x none", "flow", "never_binds_ratio", 0.9, "min"),
    ("server RSS <= 150 MB", "rss", "peak_mb", 150, "max"),
    ("200 awaiting requests slow claims <= 10 %", "waiting", "slowdown_pct", 10, "max"),
    ("SQLite enqueue 1 by 1 >= 1.0x pgqueuer", "ratios", "sqlite.enqueue_one/pgq", 1, "min"),
    ("SQLite steady >= 1.0x Huey", "ratios", "sqlite.steady/huey", 1.0, "min"),
    ("SQLite Worker burn-down >= 2x best peer", "ratios", "sqlite.burn_down/best", 2, "min"),
    ("SQLite claim 50 burn-down >= 2x best peer", "ratios", "batched_50/best", 2, "min"),
    *[
        (f"PostgreSQL {key} >= {bound}x pgqueuer", "ratios", f"postgres.{key}/pgq", bound, "min")
        for key, bound in (
            ("enqueue_one", 1.0),
            ("enqueue_16", 1.0),
            ("steady", 1.0),
            ("burn_down", 1.5),
            ("bulk", 1.0),
        )
    ],
]


def ratios(results: dict[str, Any]) -> dict[str, float]:
    huey = results.get("huey") or {}
    out = {}
    for _, section, key, huey_key in ROWS:
        value = results.get(section, {}).get(key)
        if value is not None and huey_key and huey.get(huey_key):
            out[f"{section}.{key}"] = round(value / huey[huey_key], 2)
    out.update(_shape_ratios(results))
    return out


def _shape_ratios(results: dict[str, Any]) -> dict[str, float]:
    """The users' shapes against Huey (``/huey``, SQLite) and pgqueuer (``/pgq``, both
    backends), and the burn-downs against the best peer's (``/best``)."""
    refs = {"huey": results.get("huey") or {}, "pgq": results.get("pgqueuer") or {}}
    peers = [r["burn_down"] for r in refs.values() if r.get("burn_down")]
    out = {}
    for backend, figures in (results.get("users") or {}).items():
        for _, key, _huey_key in SHAPES:
            for name, ref in refs.items():
                if name == "huey" and backend != "sqlite":
                    continue
                if figures.get(key) is not None and ref.get(key):
                    out[f"{backend}.{key}/{name}"] = round(figures[key] / ref[key], 2)
        if peers and figures.get("burn_down") is not None:
            out[f"{backend}.burn_down/best"] = round(figures["burn_down"] / max(peers), 2)
    batched = results.get("burn_down", {}).get("batched_50")
    if peers and batched is not None:
        out["batched_50/best"] = round(batched / max(peers), 2)
    return out


def goals(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Each goal, met or not; None where its figure was not measured in this run."""
    out = []
    for name, section, key, bound, kind in GOALS:
        value = results.get(section, {}).get(key)
        met = None if value is None else (value >= bound if kind == "min" else value <= bound)
        out.append({"goal": name, "value": value, "met": met})
    return out


def render(results: dict[str, Any]) -> str:
    huey = results.get("huey") or {}
    rate = results.get("ratios", {})
    lines = [f"\n{'jobs/s':<40}{'queuelog':>10}{'Huey':>10}{'ratio':>8}"]
    for label, section, key, huey_key in ROWS:
        value = results.get(section, {}).get(key)
        if value is None:
            continue
        ref = huey.get(huey_key) if huey_key else None
        ratio = rate.get(f"{section}.{key}")
        lines.append(
            f"{label:<40}{value:>10,.0f}{_or_dash(ref, ',.0f'):>10}{_or_dash(ratio, '.2f'):>8}"
        )
    lat = results.get("latency", {})
    if lat:
        lines.append(f"\nlong-poll latency: p50 {lat['p50_ms']} ms, p99 {lat['p99_ms']} ms")
    cost = results.get("claim_cost", {})
    sizes = [v for v in cost.values() if isinstance(v, dict)]
    if len(sizes) == 2:
        small, large = sizes
        lines.append(
            f"claim: {small['claim_ms_p50']} ms at {small['pending']:,} pending, "
            f"{large['claim_ms_p50']} ms at {large['pending']:,} (x{cost['ratio']})"
        )
    waits = results.get("waiting", {})
    if waits:
        lines.append(
            f"claims beside 200 awaiting requests: {waits['slowdown_pct']} % slower "
            f"({waits['claims_alone']:,.0f} -> {waits['claims_beside_200_waits']:,.0f} jobs/s)"
        )
    flows = results.get("workflows", {})
    if flows:
        lines.append(
            f"fan-in of 1,000 jobs -> 1: {flows['fan_in_seconds']} s end to end; completing a "
            f"job {flows['fan_out_jobs']:,} jobs wait for: {flows['fan_out_complete_ms']} ms"
        )
    lines.append(f"server peak RSS: {results.get('rss', {}).get('peak_mb')} MB")
    lines.append(render_shapes(results))
    for goal in results.get("goals", []):
        mark = {True: "met", False: "MISSED", None: "-"}[goal["met"]]
        lines.append(f"  [{mark:>6}] {goal['goal']} (measured {goal['value']})")
    return "\n".join(lines)


def render_shapes(results: dict[str, Any]) -> str:
    """The users' shapes: each backend's jobs/s, the references', and the ratios."""
    users = results.get("users") or {}
    if not users:
        return ""
    sq, pg = users.get("sqlite", {}), users.get("postgres", {})
    huey, pgq = results.get("huey") or {}, results.get("pgqueuer") or {}
    rate = results.get("ratios", {})
    head = ["SQLite", "PG", "Huey", "pgqueuer", "SQ/Huey", "SQ/pgq", "PG/pgq"]
    lines = [f"\n{'users shapes, jobs/s':<38}" + "".join(f"{h:>9}" for h in head)]
    for label, key, huey_key in SHAPES:
        cells = [
            _or_dash(sq.get(key), ",.0f"),
            _or_dash(pg.get(key), ",.0f"),
            _or_dash(huey.get(huey_key) if huey_key else None, ",.0f"),
            _or_dash(pgq.get(key), ",.0f"),
            *(
                _or_dash(rate.get(f"{name}/{ref}"), ".2f")
                for name, ref in (
                    (f"sqlite.{key}", "huey"),
                    (f"sqlite.{key}", "pgq"),
                    (f"postgres.{key}", "pgq"),
                )
            ),
        ]
        lines.append(f"{label:<38}" + "".join(f"{c:>9}" for c in cells))
    return "\n".join(lines) + "\n"


def _or_dash(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


# Figures compared across runs: (section, key, True when higher is better).
SPREAD = [
    *[(section, key, True) for _, section, key, _ in ROWS],
    ("latency", "p50_ms", False),
    ("latency", "p99_ms", False),
    ("claim_cost", "ratio", False),
    ("rss", "peak_mb", False),
    ("waiting", "slowdown_pct", False),
    ("workflows", "fan_in_seconds", False),
    ("workflows", "fan_out_complete_ms", False),
    ("huey", "enqueue_single", True),
    ("huey", "burn_down", True),
    ("huey", "steady", True),
    *[("users", f"{b}.{key}", True) for b in ("sqlite", "postgres") for _, key, _ in SHAPES],
    *[("pgqueuer", key, True) for _, key, _ in SHAPES],
]


def spread(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Best, worst and every value of each figure (and each ratio) over several runs."""
    rows = [*SPREAD, *[("ratios", key, True) for key in runs[0].get("ratios", {})]]
    out = {}
    for section, key, higher in rows:
        values = [v for r in runs if (v := _figure(r, section, key)) is not None]
        if values:
            best, worst = (max, min) if higher else (min, max)
            out[f"{section}.{key}"] = {"best": best(values), "worst": worst(values), "all": values}
    return out


def _figure(results: dict[str, Any], section: str, key: str) -> Any:
    if section == "users":  # users.<backend>.<shape>
        backend, _, key = key.partition(".")
        return (results.get("users") or {}).get(backend, {}).get(key)
    return results.get(section, {}).get(key)


def render_spread(summary: dict[str, dict[str, Any]]) -> str:
    lines = [f"\n{'over runs':<40}{'best':>12}{'worst':>12}"]
    for name, row in summary.items():
        lines.append(f"{name:<40}{row['best']:>12,.2f}{row['worst']:>12,.2f}")
    return "\n".join(lines)
