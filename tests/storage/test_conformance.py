"""What every Storage backend must do. A backend is done when it passes this suite."""

from __future__ import annotations

import asyncio
import threading
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from queuelog.errors import IdempotencyKeyReused, InvalidState, NotFound, NotLeaseHolder
from queuelog.models import EventKind, Finished, Job, JobEvent, JobStatus, Priority, Role
from queuelog.storage.protocol import (
    ClaimParams,
    FinishParams,
    HeldParams,
    JobListParams,
    NewJob,
    NewKey,
    Storage,
)
from tests.storage.backends import BACKENDS, opened

pytestmark = pytest.mark.anyio

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("durability", ["full", "normal"])
async def test_the_durability_asked_for_is_the_one_the_database_reports(
    backend: str, durability: str, tmp_path: Path
) -> None:
    with opened(backend, tmp_path, durability) as store:
        assert await store.durability() == durability


def new_job(
    job_type: str = "noop",
    priority: Priority = Priority.LOW,
    key: str | None = None,
    fingerprint: str | None = None,
    principal: str = "shop",
    run_at: datetime = T0,
    max_retries: int = 3,
) -> NewJob:
    return NewJob(
        type=job_type,
        payload={"n": 1},
        priority=priority,
        max_retries=max_retries,
        lease_seconds=30,
        run_at=run_at,
        principal=principal,
        idempotency_key=key,
        fingerprint=fingerprint,
    )


# The job types these tests make: a claim naming none looks at all of them, as the
# service resolves a claim naming no type to its node's.
TYPES = ("noop", "send_email", "resize_image", "other", "bulk", "grouped")


async def claim(store: Storage, now: datetime = T0, limit: int = 1, **kw: object) -> list[Job]:
    kw.setdefault("types", TYPES)
    params = ClaimParams(worker_name="w", worker_id="w/1", limit=limit, now=now, **kw)  # type: ignore[arg-type]
    return await store.job_claim(params)


async def finish(store: Storage, job: Job, now: datetime = T0, **kw: object) -> Job:
    assert job.lease_token is not None
    params = FinishParams(job.id, job.lease_token, "w", now, **kw)  # type: ignore[arg-type]
    (outcome,) = await store.job_finish_many([params])
    if isinstance(outcome, Exception):
        raise outcome
    return outcome


async def test_insert_returns_jobs_in_order_and_records_enqueued(store: Storage) -> None:
    results = await store.job_insert_many([new_job(), new_job("send_email")], T0)
    assert [created for _, created in results] == [True, True]
    first, second = (job for job, _ in results)
    assert first.id < second.id and second.type == "send_email"
    assert first.status == JobStatus.PENDING and first.payload == {"n": 1}
    for job in (first, second):
        # Written by the insert itself (a trigger on both backends): the same event
        # the code wrote before, from the row's own values.
        assert await store.job_events(job.id) == [
            JobEvent(job.id, T0, EventKind.ENQUEUED, None, JobStatus.PENDING, job.principal)
        ]


async def test_a_job_s_events_are_read_a_page_after_an_event(store: Storage) -> None:
    ((job, _),) = await store.job_insert_many([new_job()], T0)
    await store.job_insert_many([new_job()], T0)  # another job's events are not its own
    (held,) = await claim(store)
    await finish(store, held)
    every = await store.job_events(job.id)
    assert [e.event for e in every] == [EventKind.ENQUEUED, EventKind.CLAIMED, EventKind.COMPLETED]
    ids = [e.id for e in every]
    assert all(isinstance(i, int) for i in ids) and ids == sorted(ids)
    assert await store.job_events(job.id, limit=2) == every[:2]
    assert await store.job_events(job.id, after=ids[0], limit=1) == every[1:2]
    assert await store.job_events(job.id, after=ids[1]) == every[2:]
    assert await store.job_events(job.id, after=ids[2]) == []


async def test_idempotency_key_returns_existing_job_for_same_fingerprint(store: Storage) -> None:
    ((first, created),) = await store.job_insert_many([new_job(key="k", fingerprint="f")], T0)
    ((again, created_again),) = await store.job_insert_many([new_job(key="k", fingerprint="f")], T0)
    assert created and not created_again and again.id == first.id
    assert [e.event for e in await store.job_events(first.id)] == [EventKind.ENQUEUED]  # not again


async def test_idempotency_key_with_other_fingerprint_rejects_whole_batch(store: Storage) -> None:
    await store.job_insert_many([new_job(key="k", fingerprint="f")], T0)
    with pytest.raises(IdempotencyKeyReused) as raised:
        await store.job_insert_many([new_job(), new_job(key="k", fingerprint="other")], T0)
    assert raised.value.extra["index"] == 1
    assert len((await store.job_list(JobListParams(limit=10))).jobs) == 1
    # The refused batch's first job was inserted, then rolled back with its event.
    (counted,) = await store.job_event_counts(T0, T0 + timedelta(seconds=1), 60)
    assert counted.count == 1


async def test_a_batch_answers_each_job_as_stored_in_its_order(store: Storage) -> None:
    later = datetime(2026, 1, 1, 3, tzinfo=timezone(timedelta(hours=2)))  # 01:00 UTC
    await store.job_insert_many([new_job(key="old", fingerprint="f")], T0)
    batch = [
        new_job(key="a", fingerprint="f"),
        new_job("send_email", priority=Priority.HIGH),
        new_job(key="old", fingerprint="f"),  # already there: not created
        new_job(run_at=later, max_retries=7),
        new_job(key="a", fingerprint="f"),  # the same key earlier in this batch
        new_job(principal="other", key="a", fingerprint="g"),
        new_job(),
    ]
    results = await store.job_insert_many(batch, T0)
    assert [created for _, created in results] == [True, True, False, True, False, True, True]
    jobs = [job for job, _ in results]
    assert jobs[4].id == jobs[0].id and jobs[5].id != jobs[0].id
    created_ids = [job.id for job, created in results if created]
    assert created_ids == sorted(created_ids)
    for (job, _), new in zip(results, batch, strict=True):
        # What the insert answered is what a read finds.
        assert await store.job_get(job.id) == job
        assert (job.type, job.priority, job.principal) == (new.type, new.priority, new.principal)
    assert jobs[3].run_at == later and jobs[3].max_retries == 7
    for job in jobs:
        # One event per job stored, none for a repeat of a key (jobs[2], jobs[4]).
        assert [e.event for e in await store.job_events(job.id)] == [EventKind.ENQUEUED]
    (counted,) = await store.job_event_counts(T0, T0 + timedelta(seconds=1), 60)
    assert (counted.event, counted.count) == (EventKind.ENQUEUED, 6)  # "old" and five new


async def test_a_batch_alike_but_for_its_keys_answers_each_as_keyed(store: Storage) -> None:
    """The SDK's batch (one principal, a key a job) takes job_insert_batch_uniform: keys
    taken by a job, by a unique key's holder (idempotency_keys) or earlier in the batch."""
    await store.job_insert_many([new_job(key="old", fingerprint="f")], T0)
    ((holder, _),) = await store.job_insert_many([replace(new_job(), unique_key="u")], T0)
    settled = replace(new_job(key="held", fingerprint="h"), unique_key="u")
    assert await store.job_insert_many([settled], T0) == [(holder, False)]
    keys = ["a", None, "old", "a", "held", "b"]
    batch = [new_job(key=key, fingerprint=key and "f") for key in keys]
    batch[4] = new_job(key="held", fingerprint="h")  # the settled request, sent again
    results = await store.job_insert_many(batch, T0)
    assert [created for _, created in results] == [True, True, False, False, False, True]
    jobs = [job for job, _ in results]
    assert jobs[3].id == jobs[0].id and jobs[4].id == holder.id
    assert [job.idempotency_key for job in jobs[:4]] == keys[:4]
    for job in jobs[:4] + jobs[5:]:  # jobs[4] is the holder, read for the key it settled
        assert await store.job_get(job.id) == job
    # Another request with a key taken: by a job, or by a holder that settled it.
    for taken in (new_job(key="old", fingerprint="other"), new_job(key="held", fingerprint="x")):
        with pytest.raises(IdempotencyKeyReused) as raised:
            await store.job_insert_many([new_job(key="c", fingerprint="f"), taken], T0)
        assert raised.value.extra["index"] == 1
    assert len((await store.job_list(JobListParams(limit=20))).jobs) == 5  # c never stored


async def test_a_batch_s_jobs_are_numbered_and_claimed_in_its_order_whatever_their_keys(
    store: Storage,
) -> None:
    """Keys listed against their own order (PostgreSQL inserts rows in their keys' order):
    the ids, and so the claims of one priority, still follow the batch."""
    for principal in ("shop", "other"):  # the uniform insert, then the general one
        keys = [f"{principal}-c", None, f"{principal}-b", f"{principal}-a"]
        batch = [new_job(key=key, fingerprint=key and "f", principal=principal) for key in keys]
        batch[-1] = replace(batch[-1], principal="shop")
        results = await store.job_insert_many(batch, T0)
        ids = [job.id for job, _ in results]
        assert ids == sorted(ids) and [job.idempotency_key for job, _ in results] == keys
        claimed = [job.id for job in await claim(store, limit=4)]
        assert claimed == ids, principal


async def test_a_batch_alike_but_for_type_payload_and_priority_stores_each_job_as_alone(
    store: Storage,
) -> None:
    """Each backend binds the columns such a batch shares once (job_insert_batch_uniform)."""
    later = T0 + timedelta(seconds=60)
    kinds = [("noop", Priority.LOW), ("send_email", Priority.HIGH), ("noop", Priority.CRITICAL)]
    for run_at in (T0, later):
        batch = [
            replace(new_job(job_type, priority, run_at=run_at, max_retries=5), payload={"n": i})
            for i, (job_type, priority) in enumerate(kinds)
        ]
        results = await store.job_insert_many(batch, T0)
        alone = [(await store.job_insert_many([new], T0))[0][0] for new in batch]
        for (job, created), single, new in zip(results, alone, batch, strict=True):
            assert created and await store.job_get(job.id) == job
            assert replace(single, id=job.id) == job
            assert (job.type, job.priority, job.payload) == (new.type, new.priority, new.payload)
            assert (job.run_at, job.max_retries, job.principal) == (run_at, 5, "shop")
            assert [e.event for e in await store.job_events(job.id)] == [EventKind.ENQUEUED]
    # The later ones are scheduled: a claim finds them only once their time has come.
    assert len(await claim(store, T0, limit=20)) == 6
    assert len(await claim(store, later, limit=20)) == 6


async def test_a_job_inserted_alone_is_stored_as_the_same_job_in_a_batch(store: Storage) -> None:
    """A single insert may take another statement than a batch's; it stores the same row."""
    later = datetime(2026, 1, 1, 3, tzinfo=timezone(timedelta(hours=2)))  # 01:00 UTC
    same = {"job_type": "send_email", "priority": Priority.HIGH, "run_at": later}
    ((alone, created),) = await store.job_insert_many(
        [new_job(key="a", fingerprint="f", **same)], T0
    )
    (_, (batched, _)) = await store.job_insert_many(
        [new_job(), new_job(key="b", fingerprint="f", **same)], T0
    )
    assert (
        created
        and await store.job_get(alone.id) == alone
        and await store.job_get(batched.id) == batched
    )
    assert replace(alone, id=0, idempotency_key="") == replace(batched, id=0, idempotency_key="")
    # Scheduled alike: neither is ready before its run_at.
    assert [j.type for j in await claim(store, T0, limit=5)] == ["noop"]
    assert {j.id for j in await claim(store, later, limit=5)} == {alone.id, batched.id}
    # A repeat of the key alone finds the job; another request with it is refused.
    ((again, created_again),) = await store.job_insert_many([new_job(key="a", fingerprint="f")], T0)
    assert again.id == alone.id and not created_again
    with pytest.raises(IdempotencyKeyReused):
        await store.job_insert_many([new_job(key="a", fingerprint="other")], T0)


async def test_the_same_key_twice_in_a_batch_with_other_requests_is_refused(store: Storage) -> None:
    batch = [new_job(), new_job(key="a", fingerprint="f"), new_job(key="a", fingerprint="g")]
    with pytest.raises(IdempotencyKeyReused) as raised:
        await store.job_insert_many(batch, T0)
    assert raised.value.extra["index"] == 2
    assert (await store.job_list(JobListParams(limit=10))).jobs == []


async def test_idempotency_keys_are_scoped_per_principal(store: Storage) -> None:
    ((mine, _),) = await store.job_insert_many([new_job(key="k", fingerprint="f")], T0)
    ((theirs, created),) = await store.job_insert_many(
        [new_job(key="k", fingerprint="g", principal="other")], T0
    )
    assert created and theirs.id != mine.id


async def test_claim_orders_by_priority_then_age_then_id(store: Storage) -> None:
    await store.job_insert_many([new_job(priority=Priority.LOW)], T0)
    await store.job_insert_many([new_job(priority=Priority.HIGH)], T0 + timedelta(seconds=2))
    await store.job_insert_many(
        [new_job(priority=Priority.HIGH), new_job(priority=Priority.CRITICAL)],
        T0 + timedelta(seconds=1),
    )
    now = T0 + timedelta(seconds=3)
    order = [(j.priority, j.created_at) for j in await claim(store, now, limit=10)]
    assert order == [
        (Priority.CRITICAL, T0 + timedelta(seconds=1)),
        (Priority.HIGH, T0 + timedelta(seconds=1)),
        (Priority.HIGH, T0 + timedelta(seconds=2)),
        (Priority.LOW, T0),
    ]


async def test_claim_sets_lease_and_worker(store: Storage) -> None:
    await store.job_insert_many([new_job()], T0)
    (job,) = await claim(store)
    assert job.status == JobStatus.RUNNING and job.worker_id == "w/1" and job.claimed_by == "w"
    assert job.lease_expires_at == T0 + timedelta(seconds=30)
    assert job.lease_token and len(job.lease_token) >= 16
    assert await claim(store) == []


async def test_a_claim_naming_types_takes_them_in_claim_order_across_the_types(
    store: Storage,
) -> None:
    """Each named type's ready jobs are read apart; the claim still takes the first of
    them all in claim order, each job once, however often a type is named."""
    await store.job_insert_many([new_job("other", Priority.CRITICAL)], T0)
    jobs = [new_job(name, priority) for name in ("noop", "send_email") for priority in Priority]
    made = await store.job_insert_many(jobs, T0 + timedelta(seconds=1))
    later = new_job("noop", Priority.CRITICAL, run_at=T0 + timedelta(hours=1))
    await store.job_insert_many([later], T0 + timedelta(seconds=1))
    now = T0 + timedelta(seconds=2)
    named = ["send_email", "noop", "send_email"]
    taken = await claim(store, now, limit=5, types=named)
    by_order = sorted((job for job, _ in made), key=lambda j: (-j.priority, j.id))
    assert [j.id for j in taken] == [j.id for j in by_order[:5]]
    rest = await claim(store, now, limit=10, types=named)
    assert [j.id for j in rest] == [j.id for j in by_order[5:]]
    assert all(j.type != "other" for j in taken + rest)


async def test_statistics_of_a_queue_that_barely_changed_are_left_alone(store: Storage) -> None:
    await store.job_insert_many([new_job() for _ in range(10)], T0)
    assert await store.statistics_refresh() is False


async def test_next_due_is_the_earliest_run_at_of_the_types_scheduled_jobs(
    store: Storage,
) -> None:
    assert await store.job_next_due(TYPES) is None
    soon, later = T0 + timedelta(seconds=5), T0 + timedelta(seconds=9)
    await store.job_insert_many([new_job(run_at=T0), new_job("send_email", run_at=soon)], T0)
    await store.job_insert_many([new_job(run_at=later)], T0)
    assert await store.job_next_due(TYPES) == soon
    assert await store.job_next_due(["noop"]) == later
    assert await store.job_next_due(["other", "noop", "send_email"]) == soon
    assert await store.job_next_due(["other"]) is None
    # Its time come, a job no claim has made ready yet is still next, at its past time:
    # a long poll that looked a moment before it was due looks again at once (not after
    # its recheck interval).
    assert await claim(store, soon - timedelta(microseconds=1), types=["send_email"]) == []
    assert await store.job_next_due(["send_email", "noop"]) == soon
    (taken,) = await claim(store, soon, types=["send_email"])
    assert taken.type == "send_email"
    assert await store.job_next_due(["send_email", "noop"]) == later
    await claim(store, later, limit=10)
    assert await store.job_next_due(TYPES) is None


async def test_claim_skips_jobs_not_yet_due_and_other_types(store: Storage) -> None:
    await store.job_insert_many([new_job(run_at=T0 + timedelta(seconds=60))], T0)
    await store.job_insert_many([new_job("send_email")], T0)
    assert await claim(store, types=["noop"]) == []
    assert [j.type for j in await claim(store, types=["send_email", "other"])] == ["send_email"]
    assert await claim(store, T0 + timedelta(seconds=59)) == []
    assert len(await claim(store, T0 + timedelta(seconds=60))) == 1


async def test_claim_from_many_threads_hands_each_job_out_once(store: Storage) -> None:
    await store.job_insert_many([new_job() for _ in range(200)], T0)
    seen: list[int] = []
    lock = threading.Lock()

    def drain() -> None:
        # Each thread claims on an event loop of its own: loops share the one store.
        while batch := asyncio.run(claim(store, limit=3)):
            with lock:
                seen.extend(j.id for j in batch)

    threads = [threading.Thread(target=drain) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(seen) == 200 and len(set(seen)) == 200


async def test_complete_is_guarded_by_lease_token_and_holder(store: Storage) -> None:
    await store.job_insert_many([new_job()], T0)
    (job,) = await claim(store)
    stale = FinishParams(job.id, "not-the-token", "w", T0)
    other = FinishParams(job.id, job.lease_token or "", "someone-else", T0)
    missing = FinishParams(9999, "x", "w", T0)
    outcomes = await store.job_finish_many([stale, other, missing])
    assert [type(o) for o in outcomes] == [NotLeaseHolder, NotLeaseHolder, NotFound]
    done = await finish(store, job, result={"ok": True})
    assert done.status == JobStatus.COMPLETED and done.result == {"ok": True}
    again = await store.job_finish_many([FinishParams(job.id, job.lease_token or "", "w", T0)])
    assert isinstance(again[0], InvalidState)


async def test_a_batch_of_completions_answers_each_under_its_own_guard(store: Storage) -> None:
    await store.job_insert_many([new_job() for _ in range(6)], T0)
    held = await claim(store, limit=5, lease_seconds=30)
    done = await finish(store, held[4])  # already completed
    late = T0 + timedelta(seconds=10)
    items = [
        FinishParams(held[0].id, held[0].lease_token or "", "w", late, result={"n": 0}),
        FinishParams(held[1].id, "not-the-token", "w", late),
        FinishParams(held[2].id, held[2].lease_token or "", "w", late),
        FinishParams(10**12, "t", "w", late),
        FinishParams(done.id, held[4].lease_token or "", "w", late),
        FinishParams(held[3].id, held[3].lease_token or "", "someone-else", late),
    ]
    outcomes = await store.job_finish_many(items)
    first, wrong_token, third, missing, finished, other = outcomes
    assert isinstance(first, Job) and first.status == JobStatus.COMPLETED
    assert first.result == {"n": 0} and first.lease_token is None
    assert isinstance(third, Job) and third.result is None and third.updated_at == late
    assert isinstance(wrong_token, NotLeaseHolder) and isinstance(other, NotLeaseHolder)
    assert isinstance(missing, NotFound) and isinstance(finished, InvalidState)
    # What the batch answered is what a read finds; the refused jobs are still held.
    assert await store.job_get(first.id) == first and await store.job_get(third.id) == third
    assert await store.job_get(held[1].id) == held[1] and await store.job_get(held[3].id) == held[3]
    kinds = [e.event for e in await store.job_events(first.id)]
    assert kinds == [EventKind.ENQUEUED, EventKind.CLAIMED, EventKind.COMPLETED]
    assert [e.event for e in await store.job_events(held[1].id)][-1] == EventKind.CLAIMED
    # Past the lease's deadline a batch completes nothing.
    expired = T0 + timedelta(seconds=31)
    stale = [FinishParams(j.id, j.lease_token or "", "w", expired) for j in (held[1], held[3])]
    assert all(isinstance(o, NotLeaseHolder) for o in await store.job_finish_many(stale))


async def test_one_worker_s_batch_completes_only_what_it_holds_and_stores_each_result(
    store: Storage,
) -> None:
    """A batch from one worker, as the API sends it: another worker's job (with that
    worker's own token), a wrong token and a lease past its deadline are refused, each
    result is stored as given, and the refused jobs are left as they were."""
    await store.job_insert_many([new_job() for _ in range(6)], T0)
    mine = await claim(store, limit=4, lease_seconds=30)
    params = ClaimParams("v", "v/1", limit=1, now=T0, types=TYPES, lease_seconds=30)
    (theirs,) = await store.job_claim(params)
    (short,) = await claim(store, limit=1, lease_seconds=5)
    at = T0 + timedelta(seconds=10)  # past the short lease only
    results = [{"n": 0, "text": 'caf\u00e9 "quoted"'}, None, {"nested": {"list": [1, 2.5, None]}}]
    items = [
        FinishParams(mine[0].id, mine[0].lease_token or "", "w", at, result=results[0]),
        FinishParams(mine[1].id, mine[1].lease_token or "", "w", at, result=results[1]),
        FinishParams(theirs.id, theirs.lease_token or "", "w", at),
        FinishParams(mine[2].id, "not-the-token", "w", at),
        FinishParams(short.id, short.lease_token or "", "w", at),
        FinishParams(mine[3].id, mine[3].lease_token or "", "w", at, result=results[2]),
    ]
    outcomes = await store.job_finish_many(items)
    done = [outcomes[0], outcomes[1], outcomes[5]]
    assert all(isinstance(o, Job) and o.status == JobStatus.COMPLETED for o in done)
    assert [o.result for o in done if isinstance(o, Job)] == results
    assert all(isinstance(outcomes[i], NotLeaseHolder) for i in (2, 3, 4))
    for job in done:
        assert isinstance(job, Job) and await store.job_get(job.id) == job and job.updated_at == at
    for job in (theirs, mine[2], short):
        assert await store.job_get(job.id) == job
        assert [e.event for e in await store.job_events(job.id)][-1] == EventKind.CLAIMED


async def test_a_claim_and_a_worker_s_batch_completion_record_each_job_s_event(
    store: Storage,
) -> None:
    """Both are recorded in one statement for all their jobs (SQLite reads the ids of
    one JSON array); each job gets its own event, in full, and a refused item none."""
    await store.job_insert_many(
        [new_job(priority=p) for p in (Priority.LOW, Priority.HIGH)] * 2, T0
    )
    later = T0 + timedelta(seconds=5)
    held = await claim(store, later, limit=4)
    assert [j.priority for j in held] == [Priority.HIGH, Priority.HIGH, Priority.LOW, Priority.LOW]
    done = T0 + timedelta(seconds=9)
    items = [FinishParams(j.id, j.lease_token or "", "w", done) for j in held[:3]]
    items[1] = FinishParams(held[1].id, "not-the-token", "w", done)
    outcomes = await store.job_finish_many(items)
    assert isinstance(outcomes[1], NotLeaseHolder)
    for index, job in enumerate(held):
        events = await store.job_events(job.id)
        claimed = JobEvent(
            job.id, later, EventKind.CLAIMED, JobStatus.PENDING, JobStatus.RUNNING, "w/1"
        )
        completed = JobEvent(
            job.id, done, EventKind.COMPLETED, JobStatus.RUNNING, JobStatus.COMPLETED, "w"
        )
        expected = [claimed, completed] if index in (0, 2) else [claimed]
        assert events[1:] == expected, index


async def test_the_same_job_twice_in_a_batch_is_completed_once(store: Storage) -> None:
    await store.job_insert_many([new_job()], T0)
    (job,) = await claim(store)
    item = FinishParams(job.id, job.lease_token or "", "w", T0)
    first, second = await store.job_finish_many([item, item])
    assert isinstance(first, Job) and isinstance(second, InvalidState)
    assert [e.event for e in await store.job_events(job.id)].count(EventKind.COMPLETED) == 1


async def test_completions_without_jobs_answer_each_by_id_and_status(store: Storage) -> None:
    await store.job_insert_many([new_job() for _ in range(5)], T0)
    held = await claim(store, limit=5)
    tokens = [j.lease_token or "" for j in held]
    batch = [
        FinishParams(held[0].id, tokens[0], "w", T0, result={"n": 0}),
        FinishParams(held[1].id, "not-the-token", "w", T0),
        FinishParams(10**12, "t", "w", T0),
        FinishParams(held[2].id, tokens[2], "w", T0),
    ]
    twice = FinishParams(held[3].id, tokens[3], "w", T0)  # the same job twice: item by item
    alone = FinishParams(held[4].id, tokens[4], "w", T0)  # a batch of one: item by item

    async def finish_all() -> list[list[Job | Finished | Exception]]:
        answers = []
        for items in (batch, [twice, twice], [alone]):
            answers.append(await store.job_finish_many(items, with_jobs=False))
        return answers

    outcomes, repeated, single = await finish_all()
    first, wrong_token, missing, third = outcomes
    assert first == Finished(held[0].id, JobStatus.COMPLETED)
    assert third == Finished(held[2].id, JobStatus.COMPLETED)
    assert isinstance(wrong_token, NotLeaseHolder) and isinstance(missing, NotFound)
    assert repeated[0] == Finished(held[3].id, JobStatus.COMPLETED)
    assert isinstance(repeated[1], InvalidState)
    assert single == [Finished(held[4].id, JobStatus.COMPLETED)]
    # Completed exactly as with the jobs answered: result, lease cleared, event written.
    stored = await store.job_get(held[0].id)
    assert stored is not None and stored.status == JobStatus.COMPLETED
    assert stored.result == {"n": 0} and stored.lease_token is None
    for job in (held[0], held[2], held[3], held[4]):
        assert [e.event for e in await store.job_events(job.id)][-1] == EventKind.COMPLETED
    assert await store.job_get(held[1].id) == held[1]


async def test_text_beyond_ascii_is_stored_and_read_back_unchanged(store: Storage) -> None:
    text = 'é ü 漢字 😀 \u2028 \u2029 \\ " \x01'
    payload = {"text": text, text: [text]}
    jobs = [replace(new_job(), payload=payload) for _ in range(3)]
    inserted = [job for job, _ in await store.job_insert_many(jobs, T0)]
    assert all(job.payload == payload for job in inserted)
    assert all([(await store.job_get(job.id)).payload == payload for job in inserted])  # type: ignore[union-attr]
    # A batch of jobs with keys is read by the other insert statement.
    keyed = [
        replace(new_job(key=f"ké{n}", fingerprint="f"), payload=payload, group=f"grüppe 漢{n}")
        for n in range(2)
    ]
    for (job, created), new in zip(await store.job_insert_many(keyed, T0), keyed, strict=True):
        stored = await store.job_get(job.id)
        assert created and stored == job and job.payload == payload
        assert (job.idempotency_key, job.group) == (new.idempotency_key, new.group)
    held = await claim(store, limit=3)
    assert [job.payload for job in held] == [payload] * 3
    result = {"echo": text}
    one = await finish(store, held[0], result=result)  # alone
    many = await store.job_finish_many(
        [FinishParams(j.id, j.lease_token or "", "w", T0, result=result) for j in held[1:]]
    )
    assert one.result == result and all(isinstance(j, Job) and j.result == result for j in many)
    assert all([(await store.job_get(j.id)).result == result for j in held])  # type: ignore[union-attr]


async def test_release_puts_a_held_job_back_unspent_under_its_guard(store: Storage) -> None:
    await store.job_insert_many([new_job(max_retries=0)], T0)
    (job,) = await claim(store)
    later = T0 + timedelta(seconds=3)
    assert job.lease_token is not None
    with pytest.raises(NotLeaseHolder):
        await store.job_release(HeldParams(job.id, "other", "w", later))
    with pytest.raises(NotFound):
        await store.job_release(HeldParams(10**12, job.lease_token, "w", later))
    back = await store.job_release(HeldParams(job.id, job.lease_token, "w", later))
    assert back.status == JobStatus.PENDING and back.retry_count == 0 and back.run_at == later
    assert back.lease_token is None and back.worker_id is None and back.claimed_at is None
    assert await store.job_get(job.id) == back
    assert [e.event for e in await store.job_events(job.id)][-1] == EventKind.RELEASED
    with pytest.raises(InvalidState):
        await store.job_release(HeldParams(job.id, job.lease_token, "w", later))
    (again,) = await claim(store, now=later)
    assert again.id == job.id


async def test_fail_retries_until_exhausted_then_fails(store: Storage) -> None:
    await store.job_insert_many([new_job(max_retries=1)], T0)
    (job,) = await claim(store)
    retry_at = T0 + timedelta(seconds=5)
    retried = await finish(store, job, error="boom", retry_at=retry_at)
    assert retried.status == JobStatus.PENDING and retried.retry_count == 1
    assert retried.run_at == retry_at and retried.worker_id is None and retried.error == "boom"
    assert await claim(store, T0 + timedelta(seconds=4)) == []
    (again,) = await claim(store, retry_at)
    failed = await finish(store, again, retry_at, error="boom again", retry_at=retry_at)
    assert failed.status == JobStatus.FAILED and failed.retry_count == 1
    kinds = [e.event for e in await store.job_events(job.id)]
    assert kinds == [
        EventKind.ENQUEUED,
        EventKind.CLAIMED,
        EventKind.RETRY_SCHEDULED,
        EventKind.CLAIMED,
        EventKind.FAILED,
    ]


async def test_fail_not_retryable_fails_at_once(store: Storage) -> None:
    await store.job_insert_many([new_job()], T0)
    (job,) = await claim(store)
    failed = await finish(store, job, error="bad input", retryable=False)
    assert failed.status == JobStatus.FAILED and failed.retry_count == 0


async def test_heartbeat_extends_the_lease(store: Storage) -> None:
    await store.job_insert_many([new_job()], T0)
    (job,) = await claim(store)
    token = job.lease_token or ""
    later, then = T0 + timedelta(seconds=20), T0 + timedelta(seconds=21)
    default = await store.job_heartbeat(HeldParams(job.id, token, "w", later, None))
    assert default.lease_expires_at == later + timedelta(seconds=30)
    beat = await store.job_heartbeat(HeldParams(job.id, token, "w", later, 100))
    assert beat.lease_expires_at == later + timedelta(seconds=100)
    # Without lease_seconds, for the lease last asked for; with it, for what it says.
    kept = await store.job_heartbeat(HeldParams(job.id, token, "w", then, None))
    assert kept.lease_expires_at == then + timedelta(seconds=100)
    shorter = await store.job_heartbeat(HeldParams(job.id, token, "w", then, 10))
    assert shorter.lease_expires_at == then + timedelta(seconds=10)
    with pytest.raises(NotLeaseHolder):
        await store.job_heartbeat(HeldParams(job.id, "stale", "w", later, None))


async def test_a_heartbeat_without_lease_seconds_renews_for_the_claim_s_lease(
    store: Storage,
) -> None:
    """Beat after beat: a worker that claimed for 600 s keeps 600 s ahead of it."""
    await store.job_insert_many([new_job(), new_job()], T0)
    (job,) = await claim(store, lease_seconds=600)
    for at in (200, 600, 1000):
        now = T0 + timedelta(seconds=at)
        beat = await store.job_heartbeat(HeldParams(job.id, job.lease_token or "", "w", now, None))
        assert beat.lease_expires_at == now + timedelta(seconds=600)
    # The next claim of another job, without lease_seconds, takes the type's lease again.
    (other,) = await claim(store, T0 + timedelta(seconds=1000))
    held = HeldParams(other.id, other.lease_token or "", "w", T0 + timedelta(seconds=1010), None)
    beat = await store.job_heartbeat(held)
    assert beat.lease_expires_at == T0 + timedelta(seconds=1040)


async def test_expired_leases_are_rescued_as_failed_attempts(store: Storage) -> None:
    await store.job_insert_many([new_job(max_retries=1)], T0)
    (job,) = await claim(store)
    just_before = T0 + timedelta(seconds=29, microseconds=999_999)
    assert await store.job_rescue_expired(just_before, lambda j: just_before) == []
    deadline = T0 + timedelta(seconds=30)
    (rescued,) = await store.job_rescue_expired(deadline, lambda j: deadline)
    assert rescued.status == JobStatus.PENDING and rescued.retry_count == 1
    assert rescued.error == "lease expired"
    (again,) = await claim(store, deadline)
    # The next claim rescues the expired lease in its own transaction.
    late = deadline + timedelta(seconds=31)
    assert await claim(store, late, retry_at=lambda j: late) == []
    final = await store.job_get(again.id)
    assert final is not None and final.status == JobStatus.FAILED
    assert [e.event for e in await store.job_events(job.id)].count(EventKind.LEASE_EXPIRED) == 2


async def test_cancel_and_requeue(store: Storage) -> None:
    ((job, _),) = await store.job_insert_many([new_job()], T0)
    cancelled = await store.job_cancel(job.id, "shop", T0)
    assert cancelled.status == JobStatus.CANCELLED
    with pytest.raises(InvalidState):
        await store.job_cancel(job.id, "shop", T0)
    with pytest.raises(NotFound):
        await store.job_cancel(12345, "shop", T0)
    requeued = await store.job_requeue(job.id, "root", T0 + timedelta(seconds=9))
    assert requeued.status == JobStatus.PENDING and requeued.retry_count == 0
    assert requeued.run_at == T0 + timedelta(seconds=9)
    with pytest.raises(InvalidState):
        await store.job_requeue(job.id, "root", T0)
    assert [e.actor for e in await store.job_events(job.id)][-2:] == ["shop", "root"]


async def test_list_filters_and_pages_newest_first(store: Storage) -> None:
    await store.job_insert_many([new_job() for _ in range(3)], T0)
    await store.job_insert_many([new_job("send_email", principal="other")], T0)
    ids = [j.id for j in (await store.job_list(JobListParams(limit=10))).jobs]
    assert ids == sorted(ids, reverse=True) and len(ids) == 4
    mine = (await store.job_list(JobListParams(limit=10, principal="shop"))).jobs
    assert {j.principal for j in mine} == {"shop"} and len(mine) == 3
    page = (await store.job_list(JobListParams(limit=2, before_id=ids[1]))).jobs
    assert [j.id for j in page] == ids[2:4]
    assert [
        j.type for j in (await store.job_list(JobListParams(limit=10, type="send_email"))).jobs
    ] == ["send_email"]
    await claim(store, types=["noop"])
    held = (await store.job_list(JobListParams(limit=10, holder="w"))).jobs
    assert len(held) == 1 and held[0].status == JobStatus.RUNNING
    running = (await store.job_list(JobListParams(limit=10, status=JobStatus.RUNNING))).jobs
    assert [j.id for j in running] == [held[0].id]


async def test_the_running_jobs_are_listed_newest_first_by_any_filter(store: Storage) -> None:
    await store.job_insert_many([new_job() for _ in range(4)], T0)
    await store.job_insert_many([new_job("send_email") for _ in range(2)], T0)
    taken = sorted(j.id for j in await claim(store, limit=5))  # one send_email left
    running = JobStatus.RUNNING
    ids = [j.id for j in (await store.job_list(JobListParams(limit=10, status=running))).jobs]
    assert ids == taken[::-1]
    page = (await store.job_list(JobListParams(limit=2, status=running, before_id=ids[1]))).jobs
    assert [j.id for j in page] == ids[2:4]
    emails = (await store.job_list(JobListParams(limit=10, status=running, type="send_email"))).jobs
    assert [(j.type, j.status) for j in emails] == [("send_email", running)]
    assert (
        await store.job_list(JobListParams(limit=10, status=running, holder="other"))
    ).jobs == []


async def test_prune_deletes_old_finished_jobs_and_their_events(store: Storage) -> None:
    await store.job_insert_many([new_job(key="k", fingerprint="f"), new_job()], T0)
    (job,) = await claim(store)
    await finish(store, job)
    later = T0 + timedelta(days=8)
    assert await store.job_prune({JobStatus.COMPLETED: later - timedelta(days=7)}) == 1
    assert await store.job_get(job.id) is None and await store.job_events(job.id) == []
    # The idempotency key is freed with its job.
    ((fresh, created),) = await store.job_insert_many([new_job(key="k", fingerprint="x")], later)
    assert created and fresh.id != job.id


async def test_stats_count_by_status_and_type(store: Storage) -> None:
    await store.job_insert_many([new_job(), new_job(), new_job("send_email")], T0)
    await claim(store, types=["send_email"])
    stats = await store.job_stats(T0 + timedelta(seconds=10))
    assert stats.counts == {("pending", "noop"): 2, ("running", "send_email"): 1}
    assert stats.oldest_ready_at == T0


async def test_keys_insert_lookup_revoke(store: Storage) -> None:
    assert not await store.key_has_active_admin()
    key = await store.key_insert(
        NewKey("root", frozenset({Role.ADMIN}), Priority.CRITICAL, None, "h1", "ql_abc"), T0
    )
    assert await store.key_has_active_admin()
    found = await store.key_by_hash("h1")
    assert found == key and found.roles == frozenset({Role.ADMIN})
    assert await store.key_by_hash("nope") is None
    assert await store.key_revoke(key.id, T0)
    assert not await store.key_revoke(key.id, T0)
    assert not await store.key_has_active_admin()
    revoked = await store.key_by_hash("h1")
    assert revoked is not None and revoked.revoked_at == T0
    assert [k.id for k in await store.key_list()] == [key.id]


async def test_ping(store: Storage) -> None:
    assert await store.ping()


async def test_stats_count_the_ready_queue(store: Storage) -> None:
    await store.job_insert_many([new_job(), new_job(run_at=T0 + timedelta(seconds=60))], T0)
    assert (await store.job_stats(T0)).ready == 1
    assert (await store.job_stats(T0 + timedelta(seconds=60))).ready == 2


async def test_event_counts_per_kind_and_bucket(store: Storage) -> None:
    await store.job_insert_many([new_job(), new_job()], T0)
    first, second = await claim(store, T0 + timedelta(seconds=30), limit=2, lease_seconds=300)
    await finish(store, first, T0 + timedelta(seconds=61))
    await finish(store, second, T0 + timedelta(seconds=119), error="boom", retryable=False)
    counts = await store.job_event_counts(T0, T0 + timedelta(seconds=120), 60)
    found = {(c.bucket_start, c.event): c.count for c in counts}
    minute = T0 + timedelta(seconds=60)
    assert found == {
        (T0, EventKind.ENQUEUED): 2,
        (T0, EventKind.CLAIMED): 2,
        (minute, EventKind.COMPLETED): 1,
        (minute, EventKind.FAILED): 1,
    }
    # The window is half-open: an event at ``until`` is left out.
    later = await store.job_event_counts(
        T0 + timedelta(seconds=60), T0 + timedelta(seconds=119), 60
    )
    assert [(c.event, c.count) for c in later] == [(EventKind.COMPLETED, 1)]


async def test_event_counts_take_a_lease_that_expired_for_good_as_a_failure(
    store: Storage,
) -> None:
    """The last attempt's lease expiring fails the job as a fail would: the overview's
    chart counts it among the failures; an expiry that leaves a retry does not."""
    await store.job_insert_many([new_job(max_retries=0), new_job(max_retries=1)], T0)
    await claim(store, limit=2)
    expired = T0 + timedelta(seconds=31)
    rescued = await store.job_rescue_expired(expired, lambda job: expired)
    assert sorted(job.status.value for job in rescued) == ["failed", "pending"]
    counts = await store.job_event_counts(expired, expired + timedelta(seconds=1), 60)
    assert {(c.event, c.count) for c in counts} == {
        (EventKind.FAILED, 1),
        (EventKind.LEASE_EXPIRED, 1),
    }


async def test_requeue_failed_moves_only_failed_jobs_of_the_type(store: Storage) -> None:
    await store.job_insert_many([new_job(), new_job(), new_job(), new_job("send_email")], T0)
    jobs = await claim(store, limit=4)
    for job in jobs[:2]:
        await finish(store, job, error="boom", retryable=False)
    await finish(store, jobs[2])
    await finish(store, jobs[3], error="boom", retryable=False)
    later = T0 + timedelta(seconds=5)
    assert await store.job_requeue_failed("noop", "root", later) == [j.id for j in jobs[:2]]
    for job in jobs[:2]:
        again = await store.job_get(job.id)
        assert again is not None and again.status == JobStatus.PENDING
        assert again.retry_count == 0 and again.run_at == later and again.worker_id is None
        last = (await store.job_events(job.id))[-1]
        assert (last.event, last.actor, last.from_status) == (
            EventKind.REQUEUED,
            "root",
            JobStatus.FAILED,
        )
    untouched = [await store.job_get(j.id) for j in jobs[2:]]
    assert [j.status for j in untouched if j] == [JobStatus.COMPLETED, JobStatus.FAILED]
    assert await store.job_requeue_failed("noop", "root", later) == []


async def test_requeue_failed_moves_a_chunk_after_the_last_in_id_order(store: Storage) -> None:
    """A redrive moves a type's failed jobs a chunk at a time, each after the last one's
    id: a job failing again after its chunk moved is not moved again."""
    kinds = ["noop", "send_email", "noop", "noop", "noop", "send_email", "noop"]
    await store.job_insert_many([new_job(kind, max_retries=0) for kind in kinds], T0)
    for job in await claim(store, limit=len(kinds)):
        await finish(store, job, error="boom")
    failed = [j.id for j in (await store.job_list(JobListParams(limit=10, type="noop"))).jobs][::-1]
    first = await store.job_requeue_failed("noop", "root", T0, limit=2)
    assert first == failed[:2]
    (again,) = await claim(store)
    assert again.id == first[0]
    await finish(store, again, error="boom again")
    second = await store.job_requeue_failed("noop", "root", T0, after_id=first[-1], limit=2)
    assert second == failed[2:4]
    last = await store.job_requeue_failed("noop", "root", T0, after_id=second[-1], limit=2)
    assert last == failed[4:]
    assert await store.job_requeue_failed("noop", "root", T0, after_id=last[-1]) == []
    assert (await store.job_get(first[0])).status is JobStatus.FAILED  # type: ignore[union-attr]


async def test_a_lease_past_its_deadline_is_no_longer_held(store: Storage) -> None:
    await store.job_insert_many([new_job()], T0)
    (job,) = await claim(store)
    deadline = T0 + timedelta(seconds=30)
    token = job.lease_token or ""
    with pytest.raises(NotLeaseHolder):
        await store.job_heartbeat(HeldParams(job.id, token, "w", deadline, None))
    late = [
        FinishParams(job.id, token, "w", deadline),
        FinishParams(job.id, token, "w", deadline, error="late"),
    ]
    assert [type(o) for o in await store.job_finish_many(late)] == [NotLeaseHolder, NotLeaseHolder]
    unchanged = await store.job_get(job.id)
    assert unchanged is not None and unchanged.status == JobStatus.RUNNING
    # Just before the deadline the lease still holds.
    before = deadline - timedelta(microseconds=1)
    assert (await finish(store, job, before)).status == JobStatus.COMPLETED


async def test_list_for_a_producer_and_worker_is_the_union_newest_first(store: Storage) -> None:
    await store.job_insert_many([new_job(principal="other")], T0)
    mine = [job.id for job, _ in await store.job_insert_many([new_job(), new_job()], T0)]
    await claim(store, limit=1)  # worker "w" now holds the other principal's job
    both = (await store.job_list(JobListParams(limit=10, principal="shop", holder="w"))).jobs
    assert [j.id for j in both] == sorted([*mine, mine[0] - 1], reverse=True)
    assert (
        len((await store.job_list(JobListParams(limit=2, principal="shop", holder="w"))).jobs) == 2
    )


async def test_first_admin_is_created_once_however_many_try_at_once(store: Storage) -> None:
    created: list[object] = []
    lock = threading.Lock()
    start = threading.Barrier(6)

    def bootstrap(n: int) -> None:
        start.wait(timeout=30)
        key = NewKey("admin", frozenset({Role.ADMIN}), Priority.CRITICAL, None, f"h{n}", "ql_x")
        outcome = asyncio.run(store.key_insert_first_admin(key, T0))
        with lock:
            created.append(outcome)

    threads = [threading.Thread(target=bootstrap, args=(n,)) for n in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sum(c is not None for c in created) == 1 and len(created) == 6
    assert len(await store.key_list()) == 1
