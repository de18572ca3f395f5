"""PostgreSQL only: flow control while other transactions hold jobs' rows."""

from __future__ import annotations

import threading
import time
from dataclasses import replace
from datetime import datetime, timedelta

import psycopg

from queuelog.models import FlowLimits, Job, JobStatus
from queuelog.storage.postgres.store import PostgresStorage
from queuelog.storage.postgres.transactions import Q
from queuelog.storage.protocol import JobListParams
from tests.conftest import run_blocking
from tests.storage.test_flow import T0, job, params


def test_hardening_55_a_group_whose_first_job_is_held_elsewhere_gets_no_more_than_its_slots(
    schema: str, nodes: list[PostgresStorage]
) -> None:
    """A claim behind a long run of a full group reads each group's first ready job, then
    the group's next ones; while another transaction holds the first job's row (as an
    enqueue naming it in depends_on does), that second read passes it over, and the
    group gave its first job and as many more as its free slots."""
    two = {"grouped": FlowLimits(group_concurrency=2)}
    node = nodes[0]
    later = T0 + timedelta(microseconds=1)
    run_blocking(node.job_insert_many([job("grouped", "big", i, T0) for i in range(60)], T0))
    run_blocking(node.job_insert_many([job("grouped", "b", i, later) for i in range(5)], later))
    due = T0 + timedelta(seconds=1)
    held = run_blocking(node.job_claim(replace(params(due, limit=2), limits=two)))
    assert {j.group for j in held} == {"big"}  # big is full from here on
    (head,) = [j for j in group_b(node) if j.payload["n"] == 0]
    locked, release = threading.Event(), threading.Event()

    def hold_the_head() -> None:
        with psycopg.connect(schema) as conn, conn.transaction():
            conn.execute("SELECT id FROM jobs WHERE id = %s FOR NO KEY UPDATE", (head.id,))
            locked.set()
            release.wait(30)

    holder = threading.Thread(target=hold_the_head)
    holder.start()
    assert locked.wait(10)
    threading.Timer(1.0, release.set).start()  # the claim waits for the row, then takes it
    taken = run_blocking(node.job_claim(replace(params(due, limit=3), limits=two)))
    holder.join(30)
    assert [j.group for j in taken].count("b") == 2
    running = [j for j in group_b(node) if j.status is JobStatus.RUNNING]
    assert len(running) == 2, "group b gives its 2 slots, and no more"


def group_b(node: PostgresStorage) -> list[Job]:
    jobs = run_blocking(node.job_list(JobListParams(limit=100, type="grouped"))).jobs
    return [j for j in jobs if j.group == "b"]


def test_hardening_56_a_claim_reads_its_clock_once_it_holds_the_type_s_lock(
    schema: str, nodes: list[PostgresStorage]
) -> None:
    """Another claim of the type may hold its lock for a while: the claim's time is read
    after the lock is had, not when the claim was asked."""
    node = nodes[0]
    run_blocking(node.job_insert_many([job("rated", n=i) for i in range(3)], T0))
    locked, released_at, read_at = threading.Event(), [], []

    def hold_the_type() -> None:
        with psycopg.connect(schema) as conn, conn.transaction():
            conn.execute(Q["flow_lock"], {"type": "rated"})
            locked.set()
            time.sleep(1.0)
            released_at.append(time.monotonic())

    def clock() -> datetime:
        read_at.append(time.monotonic())
        return T0 + timedelta(seconds=1)

    holder = threading.Thread(target=hold_the_type)
    holder.start()
    assert locked.wait(10)
    claimed = run_blocking(node.job_claim(replace(params(T0, limit=2), clock=clock)))
    holder.join(30)
    assert len(claimed) == 2 and {j.claimed_at for j in claimed} == {T0 + timedelta(seconds=1)}
    assert read_at and read_at[0] >= released_at[0], "the clock was read before the lock"


def test_hardening_79_a_pause_acknowledged_while_a_claim_waits_for_the_lock_holds(
    schema: str, nodes: list[PostgresStorage]
) -> None:
    """A claim of a limited type reads the pauses, then waits for the type's lock behind
    another node's claim, and behind a pause sent through a third node. The pause has the
    lock first and is answered: the claim, once it has the lock, takes none of the paused
    type's jobs."""
    run_blocking(nodes[0].job_insert_many([job("rated", n=i) for i in range(2)], T0))
    locked, release = threading.Event(), threading.Event()

    def hold_the_type() -> None:
        with psycopg.connect(schema) as conn, conn.transaction():
            conn.execute(Q["flow_lock"], {"type": "rated"})
            locked.set()
            release.wait(30)

    holder = threading.Thread(target=hold_the_type)
    holder.start()
    assert locked.wait(10)
    done: list[str] = []
    pause = nodes[1].type_set_paused("rated", True, "root", T0 + timedelta(seconds=1))
    pauser = threading.Thread(target=lambda: (run_blocking(pause), done.append("paused")))
    pauser.start()
    _wait_for_a_lock_wait(schema, waiting=1)
    claim = params(T0 + timedelta(seconds=1), limit=2, types=("rated",))
    claimer = threading.Thread(
        target=lambda: done.append(f"claimed {len(run_blocking(nodes[0].job_claim(claim)))}")
    )
    claimer.start()
    _wait_for_a_lock_wait(schema, waiting=2)
    release.set()
    for thread in (holder, pauser, claimer):
        thread.join(30)
    # The claim read the pauses once it had the lock, after the pause: it took nothing.
    assert sorted(done) == ["claimed 0", "paused"], "a type paused first had its jobs taken"


def _wait_for_a_lock_wait(url: str, waiting: int = 1, locktype: str = "advisory") -> None:
    """Until ``waiting`` sessions of this database wait for a lock of ``locktype`` (claims
    and pauses for their type's, a claim for a row)."""
    query = (
        "SELECT count(*) FROM pg_locks WHERE locktype = %s AND NOT granted AND pid IN "
        "(SELECT pid FROM pg_stat_activity WHERE datname = current_database())"
    )
    deadline = time.monotonic() + 10
    with psycopg.connect(url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(query, (locktype,)).fetchone()
            if row is not None and row[0] >= waiting:
                return
            time.sleep(0.02)
    raise AssertionError(f"no {waiting} sessions waited for a {locktype} lock")


def test_hardening_79_a_pause_answered_while_a_claim_waits_for_a_row_holds(
    schema: str, nodes: list[PostgresStorage]
) -> None:
    """A claim of a group-limited type holds its type's lock and has read the pauses, then
    waits for a row another transaction holds (as an enqueue naming it in depends_on
    does). A pause sent meanwhile through another node waits for that claim."""
    (first,) = run_blocking(nodes[0].job_insert_many([job("grouped", "a", 0)], T0))
    locked, release = threading.Event(), threading.Event()
    holder = threading.Thread(target=_hold_row, args=(schema, first[0].id, locked, release))
    holder.start()
    assert locked.wait(10)
    done: list[str] = []
    claim = params(T0 + timedelta(seconds=1), limit=1, types=("grouped",))
    claimer = threading.Thread(
        target=lambda: done.append(f"claimed {len(run_blocking(nodes[0].job_claim(claim)))}")
    )
    claimer.start()
    _wait_for_a_lock_wait(schema, locktype="transactionid")
    pause = nodes[1].type_set_paused("grouped", True, "root", T0)
    pauser = threading.Thread(target=lambda: (run_blocking(pause), done.append("paused")))
    pauser.start()
    _wait_for_a_lock_wait(schema)  # the pause, for the type's lock the claim holds
    assert done == []
    release.set()
    for thread in (holder, claimer, pauser):
        thread.join(30)
    assert sorted(done) == ["claimed 1", "paused"]


def _hold_row(url: str, job_id: int, locked: threading.Event, release: threading.Event) -> None:
    with psycopg.connect(url) as conn, conn.transaction():
        conn.execute("SELECT id FROM jobs WHERE id = %s FOR NO KEY UPDATE", (job_id,))
        locked.set()
        release.wait(30)
