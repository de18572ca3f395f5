"""PostgreSQL only: several nodes (stores) on one database at once."""

from __future__ import annotations

import logging
import os
import resource
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg.rows import dict_row
from psycopg_pool import PoolTimeout

from queuelog.auth import KeyRing, display_prefix
from queuelog.clock import FakeClock, SystemClock, to_micros
from queuelog.errors import IdempotencyKeyReused
from queuelog.maintenance import Maintenance
from queuelog.models import EventKind, Job, JobStatus, Priority, Role
from queuelog.service import JobService
from queuelog.storage.postgres.listener import ReadyListener
from queuelog.storage.postgres.store import PostgresStorage
from queuelog.storage.postgres.transactions import Q
from queuelog.storage.protocol import FinishParams, JobListParams, NewJob
from queuelog.storage.sqlfile import load_migrations, load_queries
from queuelog.storage.subscribers import ReadySubscriber
from tests.conftest import make_settings, run_blocking
from tests.postgres import NODES, fresh_schema, postgres_url, rows_read, subscribed
from tests.realserver import wait_until
from tests.storage.test_conformance import T0, claim, finish, new_job
from tests.tcpproxy import TcpProxy

T = TypeVar("T")


@pytest.fixture
def proxied(schema: str) -> Iterator[tuple[PostgresStorage, TcpProxy]]:
    """A node that reaches the schema through a forwarder the test can cut."""
    proxy = TcpProxy.to_database(schema)
    store = PostgresStorage(proxy.database_url(schema))
    try:
        yield store, proxy
    finally:
        store.close()
        proxy.close()


def all_at_once(count: int, work: Callable[[int], T]) -> list[T]:
    """Run ``work(i)`` for i in range(count) on as many threads, released together."""
    barrier = threading.Barrier(count)
    results: list[T | None] = [None] * count
    errors: list[BaseException] = []

    def run(i: int) -> None:
        barrier.wait(timeout=30)
        try:
            results[i] = work(i)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    if errors:
        raise errors[0]
    return results  # type: ignore[return-value]


def test_nodes_migrating_at_once_all_succeed() -> None:
    with fresh_schema() as url:
        stores = all_at_once(4, lambda _: PostgresStorage(url, pool_size=1))
        try:
            assert all(run_blocking(store.ping()) for store in stores)
        finally:
            for store in stores:
                store.close()


def test_claims_from_several_nodes_hand_each_job_out_once(
    nodes: list[PostgresStorage],
) -> None:
    run_blocking(nodes[0].job_insert_many([new_job() for _ in range(300)], T0))

    def drain(i: int) -> list[int]:
        seen = []
        while batch := run_blocking(claim(nodes[i % NODES], limit=7)):
            seen += [j.id for j in batch]
        return seen

    seen = [job_id for batch in all_at_once(9, drain) for job_id in batch]
    assert len(seen) == 300 and len(set(seen)) == 300


def test_scheduled_jobs_promoted_by_several_nodes_are_each_claimed_once(
    nodes: list[PostgresStorage],
) -> None:
    due = T0 + timedelta(seconds=10)
    run_blocking(nodes[0].job_insert_many([new_job(run_at=due) for _ in range(200)], T0))
    assert run_blocking(claim(nodes[1], T0, limit=10)) == []

    def drain(i: int) -> list[int]:
        seen = []
        while batch := run_blocking(claim(nodes[i % NODES], due, limit=5)):
            seen += [j.id for j in batch]
        return seen

    seen = [job_id for batch in all_at_once(6, drain) for job_id in batch]
    assert len(seen) == 200 and len(set(seen)) == 200


def test_same_idempotency_key_on_two_nodes_at_once_makes_one_job(
    nodes: list[PostgresStorage],
) -> None:
    for round_ in range(10):
        key = f"order-{round_}"
        outcomes = all_at_once(
            NODES,
            lambda i, key=key: run_blocking(
                nodes[i].job_insert_many([new_job(key=key, fingerprint="f")], T0)
            ),
        )
        jobs = [job for ((job, _),) in outcomes]
        created = [made for ((_, made),) in outcomes]
        assert len({job.id for job in jobs}) == 1 and created.count(True) == 1


def test_expired_leases_swept_by_every_node_are_rescued_once(
    nodes: list[PostgresStorage],
) -> None:
    run_blocking(nodes[0].job_insert_many([new_job() for _ in range(60)], T0))
    claimed = run_blocking(claim(nodes[0], limit=60))
    later = T0 + timedelta(seconds=31)
    rescued = all_at_once(
        NODES, lambda i: run_blocking(nodes[i].job_rescue_expired(later, lambda j: later, limit=20))
    )
    ids = [job.id for batch in rescued for job in batch]
    assert len(ids) == len(set(ids))
    while more := run_blocking(nodes[1].job_rescue_expired(later, lambda j: later, limit=20)):
        ids += [job.id for job in more]
    assert sorted(ids) == sorted(j.id for j in claimed)
    for job in claimed:
        kinds = [e.event for e in run_blocking(nodes[2].job_events(job.id))]
        assert kinds.count(EventKind.LEASE_EXPIRED) == 1


def test_pruners_on_every_node_delete_each_job_once(nodes: list[PostgresStorage]) -> None:
    run_blocking(nodes[0].job_insert_many([new_job() for _ in range(50)], T0))
    for job in run_blocking(claim(nodes[0], limit=50)):
        run_blocking(finish(nodes[0], job))
    cutoffs = {JobStatus.COMPLETED: T0 + timedelta(days=1)}
    pruned = all_at_once(NODES, lambda i: run_blocking(nodes[i].job_prune(cutoffs, limit=10)))
    while more := run_blocking(nodes[0].job_prune(cutoffs, limit=10)):
        pruned.append(more)
    assert sum(pruned) == 50
    assert run_blocking(nodes[1].job_list(JobListParams(limit=10))).jobs == []


def test_a_job_made_ready_on_one_node_wakes_listeners_on_another(
    nodes: list[PostgresStorage],
) -> None:
    assert isinstance(nodes[1], ReadySubscriber)
    woken = subscribed(nodes[1])
    ((job, _),) = run_blocking(nodes[0].job_insert_many([new_job()], T0))
    assert woken.wait(10), "enqueue on node 0 did not reach node 1"
    run_blocking(nodes[0].job_cancel(job.id, "shop", T0))
    woken.clear()
    run_blocking(nodes[2].job_requeue(job.id, "root", T0))
    assert woken.wait(10), "redrive on node 2 did not reach node 1"


def test_an_enqueue_wakes_the_other_nodes_and_a_repeat_of_its_key_wakes_none(
    nodes: list[PostgresStorage],
) -> None:
    """The insert itself notifies (one job's enqueue is one statement): it names its
    node, whose service wakes its own long polls, so that node's listener stays quiet;
    a repeated idempotency key inserts nothing and notifies no one."""
    own, other = subscribed(nodes[0]), subscribed(nodes[1])
    keyed = new_job(key="order-7")
    ((first, created),) = run_blocking(nodes[0].job_insert_many([keyed], T0))
    assert created and other.wait(10), "enqueue on node 0 did not reach node 1"
    assert not own.wait(1.0), "node 0's listener was woken by its own enqueue"
    other.clear()
    ((again, created),) = run_blocking(nodes[2].job_insert_many([keyed], T0))
    assert (again.id, created) == (first.id, False)
    assert not other.wait(1.0) and not own.is_set()
    events = [e.event for e in run_blocking(nodes[1].job_events(first.id))]
    assert events == [EventKind.ENQUEUED]


def test_completions_notify_every_node_of_their_ids_and_record_their_events(
    nodes: list[PostgresStorage],
) -> None:
    """A completion's statement records its event and NOTIFYs its id; a batch of them
    notifies every id, though one notification holds at most 200."""
    heard: list[int] = []
    listening = threading.Event()

    def on_finished(ids: object) -> None:
        if ids is None:  # the listener (re)connected
            listening.set()
        else:
            heard.extend(ids)  # type: ignore[call-overload]

    nodes[1].subscribe_finished(on_finished)
    assert listening.wait(10), "node 1 did not start listening"
    run_blocking(nodes[0].job_insert_many([new_job() for _ in range(251)], T0))
    (alone,) = run_blocking(claim(nodes[0]))
    run_blocking(finish(nodes[0], alone))
    held = run_blocking(claim(nodes[0], limit=250))
    items = [FinishParams(job.id, job.lease_token or "", "w", T0) for job in held]
    outcomes = run_blocking(nodes[2].job_finish_many(items))
    assert all(isinstance(o, Job) and o.status == JobStatus.COMPLETED for o in outcomes)
    expected = sorted([alone.id] + [job.id for job in held])
    for _ in range(100):  # bounded: the notifications arrive at commit, on another thread
        if len(heard) >= len(expected):
            break
        time.sleep(0.1)
    assert sorted(heard) == expected
    for job in (alone, held[0], held[-1]):
        events = run_blocking(nodes[1].job_events(job.id))
        assert [e.event for e in events] == [
            EventKind.ENQUEUED,
            EventKind.CLAIMED,
            EventKind.COMPLETED,
        ]
        assert events[-1].actor == "w" and events[-1].from_status == JobStatus.RUNNING


def test_notifications_of_another_schema_are_ignored(nodes: list[PostgresStorage]) -> None:
    woken = subscribed(nodes[0])
    with fresh_schema() as other_url:
        other = PostgresStorage(other_url, pool_size=1)
        try:
            woken.clear()
            run_blocking(other.job_insert_many([new_job()], T0))
            assert not woken.wait(1.0)
        finally:
            other.close()


def table_dump(url: str) -> str:
    with psycopg.connect(url) as conn:
        rows = [
            str(row)
            for table in ("jobs", "job_events", "api_keys")
            for row in conn.execute(f"SELECT * FROM {table}").fetchall()
        ]
    return "\n".join(rows)


def test_v01_keys_are_stored_only_as_hashes(nodes: list[PostgresStorage], schema: str) -> None:
    ring = KeyRing(nodes[0], SystemClock())
    _, plaintext = run_blocking(ring.create("p", frozenset({Role.PRODUCER})))
    assert run_blocking(ring.authenticate(plaintext)).name == "p"
    dump = table_dump(schema)
    assert plaintext not in dump and plaintext[len(display_prefix(plaintext)) :] not in dump


def test_v08_sql_metacharacters_are_stored_as_text(nodes: list[PostgresStorage]) -> None:
    hostile = "'); DELETE FROM jobs; --"
    job = NewJob(
        type="noop' OR '1'='1",
        payload={"q": "'; DROP TABLE jobs; --"},
        priority=Priority.LOW,
        max_retries=3,
        lease_seconds=30,
        run_at=T0,
        principal=hostile,
        idempotency_key=hostile,
        fingerprint="f",
    )
    ((stored, _),) = run_blocking(nodes[0].job_insert_many([job], T0))
    again = run_blocking(nodes[1].job_get(stored.id))
    assert again is not None and again.payload == {"q": "'; DROP TABLE jobs; --"}
    assert again.principal == hostile and again.idempotency_key == hostile
    assert run_blocking(nodes[1].job_list(JobListParams(limit=10, type="noop"))).jobs == []
    assert run_blocking(claim(nodes[2], types=["noop' OR '1'='1"]))[0].id == stored.id


def _claim_args(types: list[str], limit: int) -> dict[str, Any]:
    return {
        "now": to_micros(T0 + timedelta(hours=1)),
        "types": types,
        "limit": limit,
        "worker_id": "w/1",
        "worker_name": "w",
        "lease_seconds": None,
    }


def _claim_plan(schema: str, types: list[str], limit: int = 10) -> dict[str, Any]:
    """The executed plan of a claim an hour after T0 (its changes rolled back)."""
    args = _claim_args(types, limit)
    with psycopg.connect(schema, row_factory=dict_row) as conn:
        (row,) = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + Q["job_claim"], args)
        conn.rollback()
    plan: dict[str, Any] = row["QUERY PLAN"][0]["Plan"]
    return plan


def _scans(plan: dict[str, Any]) -> list[tuple[str, str]]:
    """Each scan of jobs an executed plan ran, and the index it walked."""
    found = []
    ran = plan.get("Actual Loops", 0) > 0
    if ran and plan["Node Type"].endswith("Scan") and plan.get("Relation Name") == "jobs":
        found.append((plan["Node Type"], plan.get("Index Name", "")))
    for child in plan.get("Plans", []):
        found += _scans(child)
    return found


def _sorted_rows(plan: dict[str, Any]) -> int:
    """The most rows any sort of an executed plan ordered."""
    own = int(plan.get("Actual Rows", 0)) if plan["Node Type"] == "Sort" else 0
    return max([own, *(_sorted_rows(child) for child in plan.get("Plans", []))])


@pytest.mark.parametrize("types", [["noop"], ["noop", "send_email"]])
def test_claim_walks_a_ready_index_without_sorting_the_queue(
    nodes: list[PostgresStorage], schema: str, types: list[str]
) -> None:
    store = nodes[0]
    for _ in range(10):
        run_blocking(store.job_insert_many([new_job() for _ in range(500)], T0))
    for job in run_blocking(claim(store, limit=100)):
        run_blocking(finish(store, job))
    # Every pending job is due: the planner walks the ready index in claim order. (When
    # most pending jobs are scheduled later it may rather take jobs_due and sort the few.)
    with psycopg.connect(schema, autocommit=True) as conn:
        conn.execute("ANALYZE jobs")
    plan = _claim_plan(schema, types)
    # The pick walks each type's ready index in claim order, sorting only what it took
    # there (the claim's limit of each type); the claimed rows are found by id.
    assert _scans(plan) == [("Index Scan", "jobs_ready_type"), ("Index Scan", "jobs_pkey")]
    assert _sorted_rows(plan) <= 10 * len(types), plan


def test_a_claim_of_a_rare_type_reads_none_of_another_type_s_backlog(
    nodes: list[PostgresStorage], schema: str
) -> None:
    """20,000 ready jobs of one type ahead of 50 of another, whose 2,000 scheduled jobs
    make the statistics reckon its ready jobs spread through the queue: a claim of it
    walked the ready index past the whole backlog, at every claim."""
    with psycopg.connect(schema, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO jobs (type, principal, run_at, created_at, updated_at, scheduled)"
            " SELECT CASE WHEN n <= 20000 THEN 'bulk' ELSE 'noop' END, 'shop',"
            " CASE WHEN n <= 20050 THEN 1 ELSE 9000000000000000 END, n, 1, n > 20050"
            " FROM generate_series(1, 22050) n"
        )
        conn.execute("ANALYZE jobs")
    for types in (["noop"], ["noop", "rare"]):
        plan = _claim_plan(schema, types)
        assert plan["Actual Rows"] == 10 and rows_read(plan) <= 200, plan


def test_a_claim_reads_what_it_takes_after_a_burst_into_a_drained_table(
    nodes: list[PostgresStorage], schema: str
) -> None:
    """The table's statistics last saw the queue drained (finished jobs only); then came
    a burst of 20,000 jobs. A claim, and a flow claim's update of its picks, read the
    jobs they take, not the burst: looking for the claimed rows among the pending jobs
    (by a guard on their status beside their ids) walked it at every claim."""
    with psycopg.connect(schema, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO jobs (type, status, principal, run_at, created_at, updated_at)"
            " SELECT 'noop', 'completed', 'shop', 1, n, 1 FROM generate_series(1, 50000) n"
        )
        conn.execute("ANALYZE jobs")
    burst = [new_job() for _ in range(20_000)]
    for start in range(0, len(burst), 500):
        run_blocking(nodes[0].job_insert_many(burst[start : start + 500], T0))
    for types in (["noop"], ["noop", "send_email"]):
        plan = _claim_plan(schema, types, limit=5)
        assert plan["Actual Rows"] == 5 and rows_read(plan) <= 100, plan
    with psycopg.connect(schema, row_factory=dict_row) as conn:
        (newest,) = conn.execute("SELECT max(id) AS id FROM jobs").fetchall()
        ids = list(range(newest["id"] - 4, newest["id"] + 1))
        args = _claim_args(["noop"], 5) | {"ids": ids}
        (row,) = conn.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + Q["job_claim_ids"], args)
        conn.rollback()
    plan = row["QUERY PLAN"][0]["Plan"]
    assert plan["Actual Rows"] == 5 and rows_read(plan) <= 100, plan


@pytest.mark.parametrize("analyzed", [False, True], ids=["fresh", "analyzed"])
def test_a_redrive_chunk_reads_its_chunk_of_the_failed_jobs(
    nodes: list[PostgresStorage], schema: str, analyzed: bool
) -> None:
    """An admin's redrive of a type's 5,000 failed jobs (among 100,000 jobs) moves 500 a
    transaction: each chunk after the last one's id is one range of the index, neither a
    sort of them all nor a walk of every job by id."""
    with psycopg.connect(schema, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO jobs (type, status, principal, run_at, created_at, updated_at)"
            " SELECT CASE WHEN n % 20 = 0 THEN 'other' ELSE 'noop' END,"
            " CASE WHEN n % 10 = 0 THEN 'failed' ELSE 'completed' END, 'shop', 1, n, 1"
            " FROM generate_series(1, 100000) n"
        )
        if analyzed:
            conn.execute("ANALYZE jobs")
    args = {"type": "other", "now": to_micros(T0), "after_id": 9_000, "limit": 500}
    with psycopg.connect(schema, row_factory=dict_row) as conn:
        query = "EXPLAIN (ANALYZE, FORMAT JSON) " + Q["job_requeue_failed"]
        (row,) = conn.execute(query, args).fetchall()
        conn.rollback()
    plan = row["QUERY PLAN"][0]["Plan"]
    # Each of the plan's seven steps passes the chunk's 500 rows on.
    assert plan["Actual Rows"] == 500 and rows_read(plan) <= 3_500, plan


def test_statistics_far_behind_a_burst_are_gathered_again(
    nodes: list[PostgresStorage], schema: str, tmp_path: Path
) -> None:
    """The statistics last saw the queue drained; a burst of 20,000 jobs of one type
    came, then a few of another. The maintenance pass's refresh gathers them again (as
    autovacuum would, if it runs, within a minute), and a claim of the few then reads
    them, not the burst ahead of them."""
    store = nodes[0]
    with psycopg.connect(schema, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO jobs (type, status, principal, run_at, created_at, updated_at)"
            " SELECT (ARRAY['noop', 'send_email', 'other'])[1 + n % 3], 'completed', 'shop',"
            " 1, n, 1 FROM generate_series(1, 5000) n"
        )
        conn.execute("ANALYZE jobs")
        assert run_blocking(store.statistics_refresh()) is False
        conn.execute("SELECT pg_stat_force_next_flush()")  # counted at once, not in 10 s
        conn.execute(
            "INSERT INTO jobs (type, principal, run_at, created_at, updated_at)"
            " SELECT CASE WHEN n > 20000 THEN 'rare' ELSE 'noop' END, 'shop', 1, n, 1"
            " FROM generate_series(1, 20005) n"
        )
    service = JobService(store, make_settings(tmp_path), FakeClock())
    assert run_blocking(Maintenance(service).run_once(prune=False)) == (0, 0)
    assert run_blocking(store.statistics_refresh()) is False  # the pass gathered them
    plan = _claim_plan(schema, ["rare"], limit=5)
    assert plan["Actual Rows"] == 5 and rows_read(plan) <= 100, plan


def test_a_refresh_does_not_wait_for_a_vacuum_holding_the_table(
    nodes: list[PostgresStorage], schema: str
) -> None:
    """A VACUUM (one against wraparound does not yield) or another node's ANALYZE holds
    the table's lock: the refresh passes it by rather than holding the maintenance pass,
    and its lease rescues, until that ends."""
    store = nodes[0]
    with psycopg.connect(schema, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_force_next_flush()")
        conn.execute(
            "INSERT INTO jobs (type, principal, run_at, created_at, updated_at)"
            " SELECT 'noop', 'shop', 1, n, 1 FROM generate_series(1, 2000) n"
        )
    with psycopg.connect(schema) as holder:
        holder.execute("LOCK TABLE jobs IN SHARE UPDATE EXCLUSIVE MODE")
        done = threading.Event()
        thread = threading.Thread(
            target=lambda: (run_blocking(store.statistics_refresh()), done.set()), daemon=True
        )
        thread.start()
        passed_by = done.wait(10)
        holder.rollback()
    thread.join(10)
    assert passed_by, "the refresh waited for the table's lock"


def test_when_a_type_s_next_job_is_due_is_one_seek_whatever_others_scheduled(
    nodes: list[PostgresStorage], schema: str
) -> None:
    """20,000 jobs of one type scheduled for later, enqueued after the table's statistics
    were gathered: a claim naming another type that finds nothing ready asks when its
    next job is due without reading them (a filter on the scheduled jobs walked them
    all, at each look of a long poll)."""
    store = nodes[0]
    run_blocking(store.job_insert_many([new_job(run_at=T0 + timedelta(days=1))], T0))
    with psycopg.connect(schema, autocommit=True) as conn:
        conn.execute("ANALYZE jobs")
    burst = [new_job("bulk", run_at=T0 + timedelta(seconds=n)) for n in range(1, 20_001)]
    for start in range(0, len(burst), 500):
        run_blocking(store.job_insert_many(burst[start : start + 500], T0))
    args = {"types": ["other", "noop"]}
    with psycopg.connect(schema, row_factory=dict_row) as conn:
        query = "EXPLAIN (ANALYZE, FORMAT JSON) " + Q["job_next_due"]
        (row,) = conn.execute(query, args).fetchall()
        (due,) = conn.execute(Q["job_next_due"], args).fetchall()
    assert due["next_due"] == to_micros(T0 + timedelta(days=1))
    plan = row["QUERY PLAN"][0]["Plan"]
    assert rows_read(plan) <= 20, plan


def test_both_backends_number_migrations_and_name_queries_alike() -> None:
    numbers = {
        backend: [n for n, _ in load_migrations(f"queuelog.storage.{backend}")]
        for backend in ("sqlite", "postgres")
    }
    assert numbers["postgres"] == numbers["sqlite"]
    # Both backends run the same queries by the same names; PostgreSQL alone needs its
    # advisory locks and a redrive's row locks, NOTIFY, the session's settings, the
    # schema's name, whether a transaction wrote (SQLite's connection counts its changes
    # itself) and the planner's statistics (SQLite's claims name their indexes).
    postgres_only = {
        "admin_bootstrap_lock",
        "jobs_analyze",
        "jobs_statistics_stale",
        "current_schema",
        "job_finished_notify",
        "flow_lock",
        "job_ready_notify",
        "migrate_lock",
        "migrations_table_found",
        "session_settings",
        "transaction_wrote",
        "keys_lock",
        "job_redrive_hold",
        "job_prunable_held",
        "job_dependents_hold",
    }
    sqlite_names = set(load_queries("queuelog.storage.sqlite"))
    assert sqlite_names == set(load_queries("queuelog.storage.postgres")) - postgres_only


def test_listener_reconnects_after_losing_its_connection(
    proxied: tuple[PostgresStorage, TcpProxy], nodes: list[PostgresStorage]
) -> None:
    node, proxy = proxied
    woken = subscribed(node)
    proxy.cut()  # the database restarts: every connection of the node is closed
    proxy.restore()
    assert woken.wait(10), "the listener did not reconnect"  # a reconnection wakes once
    for _ in range(100):  # bounded: notifications reach the node again
        woken.clear()
        run_blocking(nodes[0].job_insert_many([new_job()], T0))
        if woken.wait(0.5):
            break
    assert woken.is_set()


def test_hardening_54_listener_reconnects_when_its_connection_goes_silent(
    proxied: tuple[PostgresStorage, TcpProxy], nodes: list[PostgresStorage]
) -> None:
    """A connection that carries nothing more but stays open (a partition, a middlebox
    that died) raises nothing while it is only read: the listener asks it a question
    after a silence and reconnects when no answer comes, so that every request awaiting
    a result looks at its job again (None) and later finishes are heard."""
    node, proxy = proxied
    connected: list[object] = []
    heard: list[int] = []
    node.subscribe_finished(lambda ids: connected.append(1) if ids is None else heard.extend(ids))
    wait_until(lambda: bool(connected), "the node to start listening", 10)
    proxy.stall()
    run_blocking(nodes[0].job_insert_many([new_job()], T0))
    run_blocking(finish(nodes[0], run_blocking(claim(nodes[0]))[0]))
    wait_until(lambda: len(connected) > 1, "the listener to drop its silent connection", 40)
    run_blocking(nodes[0].job_insert_many([new_job()], T0))
    (later,) = run_blocking(claim(nodes[0]))
    run_blocking(finish(nodes[0], later))
    wait_until(lambda: later.id in heard, "finishes to be heard again", 10)


def test_an_idle_listener_keeps_a_connection_that_answers_its_pings(schema: str) -> None:
    """Pings of a connection that answers change nothing: no reconnection (each would
    make every waiting request read its job again), and notifications still come."""
    listener = ReadyListener(schema, node="other", ping_seconds=0.2)
    calls: list[object] = []
    listener.add_finished(calls.append)
    listener.start()
    try:
        wait_until(lambda: bool(calls), "the listener to connect", 10)
        time.sleep(2)  # about ten pings
        with psycopg.connect(schema, autocommit=True) as conn:
            conn.execute("SELECT pg_notify('queuelog_finished', current_schema() || ':7')")
        wait_until(lambda: len(calls) > 1, "the notification", 10)
        assert calls == [None, [7]]
    finally:
        listener.close()


@pytest.mark.parametrize("up", ["back", "made"])
def test_hardening_58_a_listener_that_cannot_reconnect_says_so_once_and_once_when_back(
    schema: str,
    proxied: tuple[PostgresStorage, TcpProxy],
    caplog: pytest.LogCaptureFixture,
    up: str,
) -> None:
    """Not a line per failed reconnection (one a second for as long as an outage lasts);
    one whose first connection failed is not "back" when it connects, but "made"."""
    _, proxy = proxied
    listener = ReadyListener(proxy.database_url(schema), node="other", retry_seconds=0.05)
    connected: list[object] = []
    listener.add_finished(connected.append)
    caplog.set_level(logging.WARNING, logger="queuelog.storage.postgres")
    if up == "made":
        proxy.cut()
    listener.start()
    try:
        if up == "back":
            wait_until(lambda: bool(connected), "the listener to connect", 10)
            proxy.cut()
        time.sleep(1.5)  # dozens of connections refused
        proxy.restore()
        count = 2 if up == "back" else 1
        wait_until(lambda: len(connected) >= count, "the listener to connect again", 10)
    finally:
        listener.close()
    said = [r.getMessage() for r in caplog.records if "LISTEN" in r.getMessage()]
    down = "lost" if up == "back" else "failed"
    assert len(said) == 2 and down in said[0] and said[1] == f"LISTEN connection {up}", said


def test_a_node_whose_connections_have_high_descriptor_numbers_still_works() -> None:
    """A server holding many long polls has sockets past descriptor 1024 (select()'s
    limit) when its pool opens a connection: the pool's check must still pass it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if min(hard, 4096) < 1300:
        pytest.skip("too few file descriptors allowed")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096)), hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(1100)]
    try:
        with fresh_schema() as url:
            store = PostgresStorage(url, pool_size=2, connection_wait=2.0)
            try:
                ((job, created),) = run_blocking(store.job_insert_many([new_job()], T0))
                assert created and run_blocking(store.job_get(job.id)) is not None
            finally:
                store.close()
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_an_unreachable_database_fails_to_open_and_leaves_no_threads() -> None:
    before = set(threading.enumerate())
    with pytest.raises(PoolTimeout):
        PostgresStorage("postgresql://nobody@127.0.0.1:9/none", connect_timeout=1)
    assert set(threading.enumerate()) <= before


def test_connections_dropped_by_the_server_are_replaced_not_handed_out(
    proxied: tuple[PostgresStorage, TcpProxy],
) -> None:
    node, proxy = proxied
    ((job, _),) = run_blocking(node.job_insert_many([new_job()], T0))
    proxy.cut()  # the database restarts: the pool's idle connections are dead
    proxy.restore()
    # A dead connection is checked when taken from the pool and replaced: even a
    # write, which is never retried, goes through.
    assert len(run_blocking(node.job_insert_many([new_job()], T0))) == 1
    assert run_blocking(node.job_get(job.id)) is not None


def test_two_dependencies_ending_at_once_on_two_nodes_release_the_job_once(
    nodes: list[PostgresStorage],
) -> None:
    for _ in range(10):
        made = run_blocking(nodes[0].job_insert_many([new_job(), new_job()], T0))
        waiting = replace(new_job(), depends_on=tuple(job.id for job, _ in made))
        ((job, _),) = run_blocking(nodes[0].job_insert_many([waiting], T0))
        held = run_blocking(claim(nodes[0], limit=2))
        all_at_once(2, lambda i, held=held: run_blocking(finish(nodes[i], held[i])))
        after = run_blocking(nodes[2].job_get(job.id))
        assert after is not None and after.status == JobStatus.PENDING
        events = [e.event for e in run_blocking(nodes[2].job_events(job.id))]
        assert events == [EventKind.ENQUEUED, EventKind.READY]
        run_blocking(finish(nodes[1], run_blocking(claim(nodes[1]))[0]))


def test_a_job_made_while_its_dependency_ends_on_another_node_is_never_left_waiting(
    nodes: list[PostgresStorage],
) -> None:
    for round_ in range(20):
        ((dependency, _),) = run_blocking(nodes[0].job_insert_many([new_job()], T0))
        (held,) = run_blocking(claim(nodes[0]))
        waiting = replace(new_job(), depends_on=(dependency.id,))

        def act(i: int, held: Job = held, waiting: NewJob = waiting) -> int:
            if i == 0:
                return run_blocking(finish(nodes[0], held)).id
            return run_blocking(nodes[1].job_insert_many([waiting], T0))[0][0].id

        _, made = all_at_once(2, act)
        after = run_blocking(nodes[2].job_get(made))
        assert after is not None and after.status == JobStatus.PENDING, round_
        run_blocking(finish(nodes[2], run_blocking(claim(nodes[2]))[0]))


def test_hardening_17_two_requests_with_one_key_settled_at_once_make_one_answer(
    nodes: list[PostgresStorage], schema: str
) -> None:
    # Holders of two unique keys; then two different requests with one idempotency key,
    # each settled by one of them, on two nodes at once: one gets its holder, the other
    # is told the key was used for another request.
    for unique in ("u", "v"):
        run_blocking(nodes[0].job_insert_many([replace(new_job(), unique_key=unique)], T0))
    requests = [
        replace(new_job(key="k", fingerprint=f"f-{unique}"), unique_key=unique)
        for unique in ("u", "v")
    ]
    with psycopg.connect(schema, autocommit=True) as blocker:
        # Both wait at the key's insert, and go on together once this ends.
        with blocker.transaction():
            blocker.execute("LOCK TABLE idempotency_keys IN SHARE ROW EXCLUSIVE MODE")
            answers: list[object] = [None, None]

            def settle(i: int) -> None:
                try:
                    answers[i] = run_blocking(nodes[i].job_insert_many([requests[i]], T0))
                except IdempotencyKeyReused as refused:
                    answers[i] = refused

            threads = [threading.Thread(target=settle, args=(i,)) for i in range(2)]
            for thread in threads:
                thread.start()
            time.sleep(0.5)
        for thread in threads:
            thread.join(timeout=30)
    refused = [a for a in answers if isinstance(a, IdempotencyKeyReused)]
    settled = [a for a in answers if isinstance(a, list)]
    assert len(refused) == 1 and len(settled) == 1, answers
    ((job, created),) = settled[0]  # type: ignore[misc]
    assert not created and job.unique_key in ("u", "v")


def _deadlocks(url: str) -> int:
    """The database's count of deadlocks PostgreSQL broke (a backend reports its own when
    it ends, so read it once the nodes are closed)."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
    return int(row[0]) if row else 0


@pytest.mark.parametrize("unique_keys", [False, True])
def test_hardening_30_batches_of_the_same_idempotency_keys_in_other_orders_never_deadlock(
    schema: str, unique_keys: bool
) -> None:
    """Three nodes enqueue batches of the same keyed jobs at once, each listing the keys
    in its own order: each key makes one job, every batch answers, and PostgreSQL never
    has to break a deadlock (a broken one is run again, up to three times, then refused
    as contention).
    With unique keys too, a batch goes in job by job, in its order."""
    before = _deadlocks(schema)
    stores = [PostgresStorage(schema, pool_size=2) for _ in range(NODES)]
    try:
        for round_ in range(8):
            batch = [new_job(key=f"dl-{round_}-{k}", fingerprint=f"f-{k}") for k in range(30)]
            orders = [batch, batch[::-1], batch[15:] + batch[:15]]
            if unique_keys:  # a unique key of each node's own
                orders = [
                    [replace(new_job(), unique_key=f"u-{i}"), *o] for i, o in enumerate(orders)
                ]
            answers = all_at_once(
                NODES, lambda i, o=orders: run_blocking(stores[i].job_insert_many(o[i], T0))
            )
            keyed = [(job, created) for answer in answers for job, created in answer[-30:]]
            ids = {job.idempotency_key: job.id for job, _ in keyed}
            assert len(ids) == 30 and all(len(answer) == len(orders[0]) for answer in answers)
            made = sorted(job.id for job, created in keyed if created)
            assert made == sorted(ids.values()), round_
    finally:
        for store in stores:
            store.close()
    assert _deadlocks(schema) == before


def test_a_database_that_never_answers_is_one_error_in_libpq_s_words(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Not one log line per attempt and then "pool initialization incomplete"."""
    parts = urlsplit(postgres_url())
    missing = urlunsplit(parts._replace(path="/queuelog_no_such_database", query=""))
    with caplog.at_level(logging.WARNING), pytest.raises(PoolTimeout) as refused:
        PostgresStorage(missing, connect_timeout=1)
    assert 'database "queuelog_no_such_database" does not exist' in str(refused.value)
    assert "\n" not in str(refused.value)
    assert not [r for r in caplog.records if r.name.startswith("psycopg")]


def test_hardening_41_statements_prepared_before_another_node_migrated_are_prepared_anew(
    schema: str,
) -> None:
    """A node that migrates as it starts may add a column while others serve: their
    statements prepared before (psycopg prepares one on its fifth run) then fail with
    "cached plan must not change result type", which must not answer a request 500."""
    store = PostgresStorage(schema, pool_size=1)
    try:
        ((job, _),) = run_blocking(store.job_insert_many([new_job()], T0))
        for _ in range(6):
            run_blocking(store.job_get(job.id))
            run_blocking(store.job_insert_many([new_job()], T0))
        with psycopg.connect(schema, autocommit=True) as conn:
            conn.execute("ALTER TABLE jobs ADD COLUMN from_a_later_version integer")
        got = run_blocking(store.job_get(job.id))
        assert got is not None and got.id == job.id
        ((made, created),) = run_blocking(store.job_insert_many([new_job()], T0))
        assert created and made.status is JobStatus.PENDING
    finally:
        store.close()
