"""Flow control on PostgreSQL with several nodes, and what a held-back group costs."""

from __future__ import annotations

import asyncio
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row

from queuelog.clock import to_micros
from queuelog.models import JobStatus
from queuelog.storage.postgres.store import PostgresStorage
from queuelog.storage.postgres.transactions import Q
from queuelog.storage.protocol import FinishParams
from tests.postgres import rows_read, subscribed
from tests.storage.test_flow import T0, job, params

pytestmark = pytest.mark.anyio


async def test_two_nodes_claiming_at_once_keep_the_concurrency_limit(
    nodes: list[PostgresStorage],
) -> None:
    await nodes[0].job_insert_many([job("limited", n=i) for i in range(60)], T0)
    peak = 0
    for _ in range(15):
        claims = [nodes[i % 2].job_claim(params(limit=2)) for i in range(8)]
        claimed = [j for got in await asyncio.gather(*claims) for j in got]
        counts = (await nodes[1].job_stats(T0)).counts
        running = counts.get((JobStatus.RUNNING.value, "limited"), 0)
        assert len(claimed) <= 3 and running <= 3
        peak = max(peak, len(claimed))
        items = [FinishParams(j.id, j.lease_token or "", "w", T0) for j in claimed]
        half = len(items) // 2
        await asyncio.gather(
            nodes[0].job_finish_many(items[:half]), nodes[1].job_finish_many(items[half:])
        )
    assert peak == 3


def _ready_jobs(conn: psycopg.Connection[Any], count: int, group: str) -> None:
    """``count`` ready jobs of type grouped, made at T0 in order; ``group``: the SQL of
    the n-th job's group."""
    conn.execute(
        "INSERT INTO jobs (type, principal, run_at, created_at, updated_at, job_group)"
        f" SELECT 'grouped', 'shop', %(t)s, %(t)s + n, %(t)s, {group}"
        " FROM generate_series(1, %(count)s) AS n",
        {"t": to_micros(T0), "count": count},
    )


def _max_rows(plan: dict[str, Any]) -> int:
    """The most rows any node of an EXPLAIN ANALYZE plan read in one loop (those it
    produced and those its filter removed)."""
    rows = int(plan.get("Actual Rows", 0)) + int(plan.get("Rows Removed by Filter", 0))
    return max([rows, *(_max_rows(child) for child in plan.get("Plans", []))])


async def test_a_saturated_group_of_many_pending_jobs_is_not_walked(
    nodes: list[PostgresStorage], schema: str
) -> None:
    store = nodes[0]
    t = to_micros(T0)
    with psycopg.connect(schema, row_factory=dict_row, autocommit=True) as conn:
        _ready_jobs(conn, 100_000, "'a'")
        conn.execute("ANALYZE jobs")
    (busy,) = await store.job_claim(params(limit=1))  # group a's first: now saturated
    await store.job_insert_many([job("grouped", "b", n=7)], T0)
    (other,) = await store.job_claim(params(limit=10))
    assert other.group == "b" and busy.group == "a"
    args = {"type": "grouped", "now": t + 10**9, "limit": 10}
    with psycopg.connect(schema, row_factory=dict_row, autocommit=True) as conn:
        for name in ("ready_group_heads", "ready_ungrouped", "type_running_groups"):
            (row,) = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + Q[name], args).fetchall()
            plan = row["QUERY PLAN"][0]["Plan"]
            # No step of the plan walks the 100,000 jobs of the held-back group.
            assert _max_rows(plan) <= 10, (name, plan)


def test_many_groups_heads_are_found_by_a_seek_each_before_statistics_catch_up(
    schema: str, nodes: list[PostgresStorage]
) -> None:
    """A burst of enqueues, a group each (a tenant per group), read before the table's
    statistics are gathered again: each group's first job is one seek, not a walk of
    the type's jobs per group (which took 75 s for 20,000 groups)."""
    groups = 3_000
    t = to_micros(T0)
    with psycopg.connect(schema, row_factory=dict_row, autocommit=True) as conn:
        _ready_jobs(conn, groups, "'g' || n")
        args = {"type": "grouped", "now": t + 10**9, "limit": 10}
        query = "EXPLAIN (ANALYZE, FORMAT JSON) " + Q["ready_group_heads"]
        (row,) = conn.execute(query, args).fetchall()
    plan = row["QUERY PLAN"][0]["Plan"]
    assert plan["Actual Rows"] == groups
    assert rows_read(plan) <= 20 * groups, plan


async def test_a_pick_moved_later_before_the_claim_is_not_claimed(
    nodes: list[PostgresStorage], schema: str
) -> None:
    """A group-limited claim reads its picks without row locks; a replace that moves a
    pick's run_at later (or a cancel) may commit before the claim: it takes only those
    still ready."""
    ready, moved = [
        j for j, _ in await nodes[0].job_insert_many([job("grouped", "a"), job("grouped", "b")], T0)
    ]
    t = to_micros(T0)
    args = {"worker_id": "w/1", "worker_name": "w", "now": t, "lease_seconds": None}
    with psycopg.connect(schema, row_factory=dict_row, autocommit=True) as conn:
        conn.execute(
            "UPDATE jobs SET run_at = %(later)s, scheduled = true WHERE id = %(id)s",
            {"later": t + 60_000_000, "id": moved.id},
        )
        rows = conn.execute(Q["job_claim_ids"], {**args, "ids": [ready.id, moved.id]}).fetchall()
    assert [row["id"] for row in rows] == [ready.id]


async def test_a_freed_slot_and_a_resume_reach_the_other_node(
    nodes: list[PostgresStorage],
) -> None:
    woken = subscribed(nodes[1])
    await nodes[0].job_insert_many([job("limited"), job("free")], T0)
    claimed = await nodes[0].job_claim(params(limit=2))
    assert len(claimed) == 2
    woken.clear()
    by_type = {j.type: j for j in claimed}
    slots = frozenset({"limited"})
    free = by_type["free"]
    await nodes[0].job_finish_many([FinishParams(free.id, free.lease_token or "", "w", T0)])
    # Jobs of a type without a concurrency limit free no slot: nothing to tell.
    assert not await asyncio.to_thread(woken.wait, 1.0)
    held = by_type["limited"]
    item = FinishParams(held.id, held.lease_token or "", "w", T0, slot_types=slots)
    await nodes[0].job_finish_many([item])
    assert await asyncio.to_thread(woken.wait, 10), "a freed slot on node 0 did not reach node 1"
    await nodes[0].type_set_paused("free", True, "root", T0)
    woken.clear()
    await nodes[0].type_set_paused("free", False, "root", T0)
    assert await asyncio.to_thread(woken.wait, 10), "a resume on node 0 did not reach node 1"


async def test_a_slot_freed_by_a_batch_acknowledgement_reaches_the_other_node(
    nodes: list[PostgresStorage],
) -> None:
    """A worker's batch acknowledgement (one statement, answered without its jobs) that
    ends a job of a limited type tells the other node; one that ends none does not."""
    woken = subscribed(nodes[1])
    made = [job("free"), job("free"), job("limited"), job("free")]
    await nodes[0].job_insert_many(made, T0)
    claimed = await nodes[0].job_claim(params(limit=4))
    slots = frozenset({"limited"})
    items = {
        j.id: FinishParams(j.id, j.lease_token or "", "w", T0, slot_types=slots) for j in claimed
    }
    free = [items[j.id] for j in claimed if j.type == "free"]
    woken.clear()
    done = await nodes[0].job_finish_many(free[:2], with_jobs=False)
    assert [d.status for d in done] == [JobStatus.COMPLETED] * 2
    assert not await asyncio.to_thread(woken.wait, 1.0)
    rest = [items[j.id] for j in claimed if j.type == "limited"] + free[2:]
    done = await nodes[0].job_finish_many(rest, with_jobs=False)
    assert [d.status for d in done] == [JobStatus.COMPLETED] * 2
    assert await asyncio.to_thread(woken.wait, 10), "a batch's freed slot did not reach node 1"
