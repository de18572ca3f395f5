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
    assert done == ["paused", "claimed 0"], "a type paused before the claim took its jobs"


def _wait_for_a_lock_wait(url: str, waiting: int = 1) -> None:
    """Until ``waiting`` sessions wait for an advisory lock (claims and pauses, for their
    type's)."""
    query = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
    deadline = time.monotonic() + 10
    with psycopg.connect(url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(query).fetchone()
            if row is not None and row[0] >= waiting:
                return
            time.sleep(0.02)
    raise AssertionError("the claim never waited for the type's lock")


def test_hardening_79_a_pause_answered_while_a_claim_waits_for_a_row_holds(
    schema: str, nodes: list[PostgresStorage]
) -> None:
    """A claim of a group-limited type holds its type's lock and has read the pauses, then
    waits for a row another transaction holds (as an enqueue naming it in depends_on
    does). A pause sent meanwhile through another node is answered only once that claim
    has committed: no claim takes the type's jobs after the pause's answer."""
    node = nodes[0]
    (first,) = run_blocking(node.job_insert_many([job("grouped", "a", 0)], T0))
    locked, release = threading.Event(), threading.Event()

    def hold_the_job() -> None:
        with psycopg.connect(schema) as conn, conn.transaction():
            conn.execute("SELECT id FROM jobs WHERE id = %s FOR NO KEY UPDATE", (first[0].id,))
            locked.set()
            release.wait(30)

    holder = threading.Thread(target=hold_the_job)
    holder.start()
    assert locked.wait(10)
    done: list[str] = []
    claim = params(T0 + timedelta(seconds=1), limit=1, types=("grouped",))

    def take() -> None:
        taken = run_blocking(node.job_claim(claim))
        done.append(f"claim of {len(taken)}")

    claimer = threading.Thread(target=take)
    claimer.start()
    _wait_for_a_row_wait(schema)
    pauser = threading.Thread(
        target=lambda: (
            run_blocking(nodes[1].type_set_paused("grouped", True, "root", T0)),
            done.append("pause answered"),
        )
    )
    pauser.start()
    time.sleep(0.5)  # a pause that does not wait for the claim is answered by now
    release.set()
    for thread in (holder, claimer, pauser):
        thread.join(30)
    assert done == ["claim of 1", "pause answered"], done


def _wait_for_a_row_wait(url: str) -> None:
    """Until some session waits for a row's lock (the claim, for the held job)."""
    query = "SELECT count(*) FROM pg_locks WHERE locktype = 'transactionid' AND NOT granted"
    deadline = time.monotonic() + 10
    with psycopg.connect(url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            row = conn.execute(query).fetchone()
            if row is not None and row[0]:
                return
            time.sleep(0.02)
    raise AssertionError("the claim never waited for the held row")
