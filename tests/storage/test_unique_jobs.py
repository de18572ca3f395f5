"""Unique jobs on every backend: keep, replace, a running holder, the key freed by each
end, the scope (principal and type), batches, and enqueues of one key at once."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from typing import TypeVar

import psycopg
import pytest

from queuelog.errors import IdempotencyKeyReused
from queuelog.models import EventKind, JobStatus, OnDuplicate, Priority
from queuelog.storage.postgres.store import PostgresStorage
from queuelog.storage.protocol import JobListParams, NewJob, Storage
from queuelog.storage.sqlite.store import SqliteStorage
from tests.conftest import run_blocking
from tests.postgres import fresh_schema
from tests.storage.test_conformance import T0, claim, finish, new_job

pytestmark = pytest.mark.anyio
T = TypeVar("T")


def unique(
    key: str = "u-1",
    on_duplicate: OnDuplicate = OnDuplicate.KEEP,
    payload: dict[str, object] | None = None,
    **kw: object,
) -> NewJob:
    job = new_job(**kw)  # type: ignore[arg-type]
    return replace(job, unique_key=key, on_duplicate=on_duplicate, payload=payload or {"n": 1})


async def one(store: Storage, job: NewJob) -> tuple[int, bool]:
    ((made, created),) = await store.job_insert_many([job], T0)
    return made.id, created


async def test_keep_answers_the_pending_holder_and_makes_nothing(store: Storage) -> None:
    first, created = await one(store, unique())
    again, created_again = await one(store, unique(payload={"n": 2}))
    assert created and not created_again
    assert again == first
    job = await store.job_get(first)
    assert job is not None and job.payload == {"n": 1} and job.unique_key == "u-1"


async def test_replace_gives_the_pending_holder_the_new_payload_priority_and_run_at(
    store: Storage,
) -> None:
    first, _ = await one(store, unique())
    later = T0 + timedelta(minutes=5)
    newer = unique(
        on_duplicate=OnDuplicate.REPLACE, payload={"n": 2}, priority=Priority.HIGH, run_at=later
    )
    ((job, created),) = await store.job_insert_many([newer], T0 + timedelta(seconds=1))
    assert not created and job.id == first
    assert (job.payload, job.priority, job.run_at) == ({"n": 2}, Priority.HIGH, later)
    events = [e.event for e in await store.job_events(first)]
    assert events == [EventKind.ENQUEUED, EventKind.REPLACED]
    # The new run_at holds: the job is not claimable before it.
    assert await claim(store, now=T0 + timedelta(minutes=1)) == []
    (claimed,) = await claim(store, now=later)
    assert claimed.id == first and claimed.payload == {"n": 2}


async def test_keep_answers_a_running_holder(store: Storage) -> None:
    first, _ = await one(store, unique())
    await claim(store)
    again, created = await one(store, unique())
    assert (again, created) == (first, False)


async def test_replace_while_the_holder_runs_makes_a_new_job_that_later_enqueues_meet(
    store: Storage,
) -> None:
    first, _ = await one(store, unique())
    (running,) = await claim(store)
    second, created = await one(store, unique(on_duplicate=OnDuplicate.REPLACE))
    assert created and second != first
    # Both hold the key now: keep and replace act on the pending one.
    assert await one(store, unique()) == (second, False)
    ((job, created),) = await store.job_insert_many(
        [unique(on_duplicate=OnDuplicate.REPLACE, payload={"n": 3})], T0
    )
    assert (job.id, created, job.payload) == (second, False, {"n": 3})
    # The running job, retried, is pending beside the newer one: nothing refuses it.
    retried = await finish(store, running, error="boom", retry_at=T0)
    assert retried.status == JobStatus.PENDING
    jobs = await claim(store, limit=5)
    assert sorted(j.id for j in jobs) == [first, second]


@pytest.mark.parametrize("end", ["completed", "failed", "cancelled"])
async def test_the_key_is_free_once_its_job_has_ended(store: Storage, end: str) -> None:
    first, _ = await one(store, unique(max_retries=0))
    if end == "cancelled":
        await store.job_cancel(first, "shop", T0)
    else:
        (running,) = await claim(store)
        error = None if end == "completed" else "boom"
        done = await finish(store, running, error=error, retryable=False)
        assert done.status == end
    second, created = await one(store, unique())
    assert created and second != first


async def test_a_key_freed_while_a_replaced_job_still_runs_is_held_by_the_running_one(
    store: Storage,
) -> None:
    first, _ = await one(store, unique())
    await claim(store)
    second, _ = await one(store, unique(on_duplicate=OnDuplicate.REPLACE))
    await store.job_cancel(second, "shop", T0)
    assert await one(store, unique()) == (first, False)


async def test_keys_are_scoped_per_principal_and_type(store: Storage) -> None:
    mine, _ = await one(store, unique())
    theirs, created = await one(store, unique(principal="other"))
    other_type, created_too = await one(store, unique(job_type="resize_image"))
    assert created and created_too and len({mine, theirs, other_type}) == 3


async def test_a_later_item_of_a_batch_meets_an_earlier_ones_key(store: Storage) -> None:
    batch = [
        unique(payload={"n": 1}),
        new_job(),
        unique(payload={"n": 2}),
        unique(on_duplicate=OnDuplicate.REPLACE, payload={"n": 3}),
    ]
    results = await store.job_insert_many(batch, T0)
    assert [created for _, created in results] == [True, True, False, False]
    assert results[2][0].id == results[0][0].id == results[3][0].id
    job = await store.job_get(results[0][0].id)
    assert job is not None and job.payload == {"n": 3}


async def test_the_idempotency_key_is_checked_before_the_unique_key(store: Storage) -> None:
    keyed = replace(unique(), idempotency_key="k-1", fingerprint="f-1")
    first, _ = await one(store, keyed)
    assert await one(store, keyed) == (first, False)
    with pytest.raises(IdempotencyKeyReused) as refused:
        await store.job_insert_many([unique(key="u-2"), replace(keyed, fingerprint="f-2")], T0)
    assert refused.value.extra == {"index": 1}
    # The refused batch made nothing: u-2 is still free.
    assert (await one(store, unique(key="u-2")))[1]


async def test_a_redriven_job_comes_back_beside_the_keys_new_holder(store: Storage) -> None:
    first, _ = await one(store, unique(max_retries=0))
    (running,) = await claim(store)
    await finish(store, running, error="boom", retryable=False)
    second, _ = await one(store, unique())
    requeued = await store.job_requeue(first, "root", T0)
    assert requeued.status == JobStatus.PENDING
    assert await store.job_requeue_failed("noop", "root", T0) == []
    assert (await one(store, unique()))[0] in {first, second}


def test_enqueues_of_one_key_at_once_on_threads_make_one_job(store: Storage) -> None:
    assert isinstance(store, SqliteStorage | PostgresStorage)
    assert len(set(_all_at_once([store] * 8))) == 1


def test_enqueues_of_one_key_at_once_on_two_postgres_nodes_make_one_job() -> None:
    with fresh_schema() as url:
        nodes = [PostgresStorage(url, pool_size=4) for _ in range(2)]
        try:
            made = _all_at_once([nodes[i % 2] for i in range(8)])
            assert len(set(made)) == 1
            replaced = _all_at_once(
                [nodes[i % 2] for i in range(8)], unique(on_duplicate=OnDuplicate.REPLACE)
            )
            assert set(replaced) == set(made)
        finally:
            for node in nodes:
                node.close()


def _all_at_once(stores: list[Storage], job: NewJob | None = None) -> list[int]:
    """Enqueue ``job`` (a unique one) through each of ``stores``, on as many threads
    released together; the job id each was answered."""
    return _at_once([lambda s=s: run_blocking(one(s, job or unique()))[0] for s in stores])


def _at_once(works: list[Callable[[], T]]) -> list[T]:
    """Run each of ``works`` on a thread of its own, released together; what each
    returned (in the order they ended). None may fail."""
    barrier = threading.Barrier(len(works))
    done: list[T] = []
    errors: list[BaseException] = []

    def run(work: Callable[[], T]) -> None:
        barrier.wait(timeout=30)
        try:
            done.append(work())
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(w,)) for w in works]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    assert len(done) == len(works)
    return done


@pytest.mark.parametrize("on_duplicate", [OnDuplicate.KEEP, OnDuplicate.REPLACE])
def test_hardening_29_batches_of_the_same_unique_keys_in_opposite_orders_never_deadlock(
    store: Storage, on_duplicate: OnDuplicate
) -> None:
    """Two batches taking the same keys, one forwards and one backwards, on threads of
    their own (two nodes, on PostgreSQL): each settles every key, neither fails."""
    for round_ in range(6):
        keys = [f"dl-{round_}-{k}" for k in range(20)]
        forwards = [unique(key, on_duplicate, payload={"k": k}) for k, key in enumerate(keys)]
        _at_once(
            [
                lambda b=b: run_blocking(store.job_insert_many(b, T0))
                for b in (forwards, forwards[::-1])
            ]
        )
        held = run_blocking(store.job_list(JobListParams(limit=500))).jobs
        for key in keys:
            assert len([j for j in held if j.unique_key == key]) == 1, key


# The key locks of this schema's nodes only (the server's table is shared with whatever
# else runs on it): their first key names the schema, as keys_lock takes them.
_KEY_LOCKS_OF_THIS_SCHEMA = (
    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2"
    " AND classid = hashtext('queuelog.unique.' || current_schema())::oid"
)


def test_a_batch_of_500_unique_keys_holds_64_key_locks_at_most() -> None:
    """Each lock takes a slot of PostgreSQL's shared lock table (about 6,400 by default,
    for every session of the server): a key's lock is one of 64 buckets'."""
    with fresh_schema() as url:
        store = PostgresStorage(url, pool_size=2)
        seen: list[int] = []
        done = threading.Event()

        def watch() -> None:
            with psycopg.connect(url, autocommit=True) as conn:
                while not done.is_set() and len(seen) < 20_000:
                    counted = _KEY_LOCKS_OF_THIS_SCHEMA
                    row = conn.execute(counted).fetchone()
                    seen.append(row[0] if row else 0)

        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            batch = [unique(f"k-{n}") for n in range(500)]
            assert len(run_blocking(store.job_insert_many(batch, T0))) == 500
        finally:
            done.set()
            watcher.join(timeout=30)
            store.close()
        assert 0 < max(seen) <= 64
