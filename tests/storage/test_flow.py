"""Flow control in the claim, on every backend: limits per type and group, pauses,
rate windows, snoozes. Counts come from the store itself and from what claims return."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from queuelog.models import FlowLimits, JobStatus, Priority, TypeEventKind
from queuelog.storage.protocol import ClaimParams, FinishParams, HeldParams, NewJob, Storage

pytestmark = pytest.mark.anyio

T0 = datetime(2026, 1, 1, tzinfo=UTC)
TYPES = ("limited", "grouped", "rated", "free")
LIMITS = {
    "limited": FlowLimits(concurrency=3),
    "grouped": FlowLimits(group_concurrency=1),
    "rated": FlowLimits(rate_jobs=2, rate_per_seconds=10),
}


def job(job_type: str, group: str | None = None, n: int = 0, at: datetime = T0) -> NewJob:
    return NewJob(
        type=job_type,
        payload={"n": n},
        priority=Priority.LOW,
        max_retries=3,
        lease_seconds=30,
        run_at=at,
        principal="shop",
        group=group,
    )


def params(now: datetime = T0, limit: int = 1, types: tuple[str, ...] = TYPES) -> ClaimParams:
    return ClaimParams(
        worker_name="w", worker_id="w/1", limit=limit, now=now, types=types, limits=LIMITS
    )


async def complete(store: Storage, claimed: list, now: datetime = T0) -> None:
    items = [FinishParams(j.id, j.lease_token, "w", now) for j in claimed]
    for outcome in await store.job_finish_many(items):
        assert not isinstance(outcome, Exception)


async def running(store: Storage, job_type: str) -> int:
    counts = (await store.job_stats(T0)).counts
    return counts.get((JobStatus.RUNNING.value, job_type), 0)


async def test_group_is_stored_and_read_back(store: Storage) -> None:
    ((made, _), (plain, _)) = await store.job_insert_many(
        [job("grouped", "acme"), job("grouped")], T0
    )
    assert made.group == "acme" and plain.group is None
    again = await store.job_get(made.id)
    assert again is not None and again.group == "acme"


async def test_concurrency_is_never_exceeded_by_concurrent_claims(store: Storage) -> None:
    await store.job_insert_many([job("limited", n=i) for i in range(40)], T0)
    seen_max = 0
    for _ in range(12):  # rounds: 8 claimers at once, then finish what they got
        got = await asyncio.gather(*(store.job_claim(params(limit=2)) for _ in range(8)))
        claimed = [j for jobs in got for j in jobs]
        now_running = await running(store, "limited")
        seen_max = max(seen_max, len(claimed), now_running)
        assert len(claimed) <= 3 and now_running <= 3
        await complete(store, claimed)
    assert seen_max == 3
    assert await running(store, "limited") == 0


async def test_a_limited_claim_takes_the_next_eligible_jobs_in_order(store: Storage) -> None:
    await store.job_insert_many([job("limited", n=i) for i in range(5)], T0)
    await store.job_insert_many([job("free", n=10)], T0 + timedelta(seconds=1))
    first = await store.job_claim(params(limit=10))
    assert [j.payload["n"] for j in first] == [0, 1, 2, 10]
    # The skipped job kept its place: it is the next one claimed once a slot frees.
    await complete(store, first[:1])
    (nxt,) = await store.job_claim(params(limit=10))
    assert nxt.payload["n"] == 3
    held = params()
    assert await store.job_claim(held) == []
    assert held.skipped[("limited", "concurrency")] == 1


async def test_group_concurrency_one_with_two_groups_and_ungrouped_jobs(store: Storage) -> None:
    specs = [
        job("grouped", "a", 0),
        job("grouped", "a", 1),
        job("grouped", "b", 2),
        job("grouped", None, 3),
        job("grouped", None, 4),
        job("grouped", "b", 5),
    ]
    for i, spec in enumerate(specs):  # distinct creation times: a strict claim order
        await store.job_insert_many([spec], T0 + timedelta(microseconds=i))
    first = await store.job_claim(params(T0 + timedelta(seconds=1), limit=10))
    assert [j.payload["n"] for j in first] == [0, 2, 3, 4]
    claim = params(T0 + timedelta(seconds=1), limit=10)
    assert await store.job_claim(claim) == []
    assert claim.skipped[("grouped", "group_concurrency")] == 1
    await complete(store, [j for j in first if j.group == "a"])
    (nxt,) = await store.job_claim(params(T0 + timedelta(seconds=1), limit=10))
    assert nxt.payload["n"] == 1  # group a's next, still ahead of b's second
    await complete(store, [j for j in first if j.group == "b"])
    (last,) = await store.job_claim(params(T0 + timedelta(seconds=1), limit=10))
    assert last.payload["n"] == 5


async def test_jobs_behind_a_long_run_of_a_full_group_are_still_claimed(store: Storage) -> None:
    """A claim first reads a short run of the type's ready jobs; when a full group holds
    back that whole run, the first job of every group decides, in claim order."""
    ((first, _),) = await store.job_insert_many([job("grouped", "big", -1)], T0)
    (held,) = await store.job_claim(params(T0 + timedelta(seconds=1)))
    assert held.id == first.id  # group big is at its limit from here on
    later = T0 + timedelta(microseconds=1)
    await store.job_insert_many([job("grouped", "big", i, later) for i in range(80)], later)
    behind = [job("grouped", "small", 100), job("grouped", None, 101), job("grouped", "x", 102)]
    for i, spec in enumerate(behind):
        await store.job_insert_many([spec], T0 + timedelta(milliseconds=1 + i))
    claim = params(T0 + timedelta(seconds=1), limit=2)
    assert [j.payload["n"] for j in await store.job_claim(claim)] == [100, 101]
    assert claim.skipped[("grouped", "group_concurrency")] == 1
    (last,) = await store.job_claim(params(T0 + timedelta(seconds=1), limit=5))
    assert last.payload["n"] == 102


async def test_behind_a_long_run_of_a_full_group_a_group_of_two_slots_gives_both(
    store: Storage,
) -> None:
    """The groups' heads, merged with the ungrouped jobs in claim order, each group up to
    its free slots (read past its first job only once that is taken)."""
    two = {"grouped": FlowLimits(group_concurrency=2)}
    for n in (-2, -1):
        await store.job_insert_many([job("grouped", "big", n)], T0)
        await store.job_claim(replace(params(T0 + timedelta(seconds=1)), limits=two))
    later = T0 + timedelta(microseconds=1)
    await store.job_insert_many([job("grouped", "big", i, later) for i in range(60)], later)
    behind = [("a", 0), (None, 1), ("a", 2), (None, 3), ("a", 4)]
    for i, (group, n) in enumerate(behind):
        await store.job_insert_many([job("grouped", group, n)], T0 + timedelta(milliseconds=1 + i))
    claim = replace(params(T0 + timedelta(seconds=1), limit=3), limits=two)
    assert [j.payload["n"] for j in await store.job_claim(claim)] == [0, 1, 2]
    claim = replace(params(T0 + timedelta(seconds=1), limit=5), limits=two)
    assert [j.payload["n"] for j in await store.job_claim(claim)] == [3]


async def test_group_concurrency_two_takes_two_of_a_group(store: Storage) -> None:
    two = {"grouped": FlowLimits(group_concurrency=2)}
    for i in range(4):
        await store.job_insert_many([job("grouped", "a", i)], T0 + timedelta(microseconds=i))
    claim = replace(params(T0 + timedelta(seconds=1), limit=10), limits=two)
    assert [j.payload["n"] for j in await store.job_claim(claim)] == [0, 1]


@pytest.mark.parametrize("slots", [3, 5])
async def test_a_group_gives_a_claim_every_free_slot_before_later_jobs(
    store: Storage, slots: int
) -> None:
    wide = {"grouped": FlowLimits(group_concurrency=slots)}
    specs = [job("grouped", "a", i) for i in range(slots + 1)] + [job("grouped", None, 9)]
    for i, spec in enumerate(specs):  # distinct creation times: a strict claim order
        await store.job_insert_many([spec], T0 + timedelta(microseconds=i))
    claim = replace(params(T0 + timedelta(seconds=1), limit=slots + 1), limits=wide)
    taken = [j.payload["n"] for j in await store.job_claim(claim)]
    assert taken == [*range(slots), 9], "the group's older jobs first, up to its slots"


async def test_rate_limit_counts_claims_in_a_sliding_window(store: Storage) -> None:
    await store.job_insert_many([job("rated", n=i) for i in range(6)], T0)
    assert len(await store.job_claim(params(T0, limit=5))) == 2
    held = params(T0 + timedelta(seconds=9), limit=5)
    assert await store.job_claim(held) == []
    assert held.skipped[("rated", "rate_limit")] == 1
    opens = await store.type_window_opens("rated", T0 + timedelta(seconds=9), LIMITS["rated"])
    assert opens == T0 + timedelta(seconds=10)
    # The window slides: ten seconds after the claims they no longer count.
    assert len(await store.job_claim(params(T0 + timedelta(seconds=10), limit=1))) == 1
    assert len(await store.job_claim(params(T0 + timedelta(seconds=12), limit=5))) == 1
    later = T0 + timedelta(seconds=15)
    assert await store.job_claim(params(later, limit=5)) == []
    assert await store.type_window_opens("rated", later, LIMITS["rated"]) == T0 + timedelta(
        seconds=20
    )


async def test_rate_limit_holds_for_a_claim_stamped_before_the_one_it_waited_for(
    store: Storage,
) -> None:
    # Nodes' clocks differ a little, so a claim may be stamped before the one it waited
    # for: the earlier stamp must still find the claims of its window, though the later
    # claim's window has left them.
    await store.job_insert_many([job("rated", n=i) for i in range(6)], T0)
    assert len(await store.job_claim(params(T0, limit=2))) == 2
    assert len(await store.job_claim(params(T0 + timedelta(seconds=10.5), limit=1))) == 1
    late = params(T0 + timedelta(seconds=5), limit=5)
    assert await store.job_claim(late) == [], "three claims in the window ending at T0+5s"
    assert late.skipped[("rated", "rate_limit")] == 1


async def test_hardening_56_a_claim_is_stamped_when_it_takes_its_jobs_not_when_asked(
    store: Storage,
) -> None:
    """A claim of a limited type reads its clock again once it holds the type's lock
    (on PostgreSQL another claim may hold it for seconds): its jobs and rate window are
    stamped then, so a claim that waited does not add a window's worth to the next one."""
    await store.job_insert_many([job("rated", n=i) for i in range(6)], T0)
    taken_at = T0 + timedelta(seconds=20)
    waited = replace(params(T0, limit=5), clock=lambda: taken_at)
    claimed = await store.job_claim(waited)
    assert len(claimed) == 2 and {j.claimed_at for j in claimed} == {taken_at}
    assert {j.lease_expires_at for j in claimed} == {taken_at + timedelta(seconds=30)}
    (event, *_) = reversed(await store.job_events(claimed[0].id))
    assert event.at == taken_at
    next_one = params(taken_at + timedelta(seconds=5), limit=5)
    assert await store.job_claim(next_one) == [], "two claims in the window ending at +25 s"


async def test_a_claim_that_waited_for_its_lock_takes_a_job_due_meanwhile(
    store: Storage,
) -> None:
    """Jobs whose time came while the claim waited are made ready at the claim's time."""
    await store.job_insert_many([job("rated", n=1, at=T0 + timedelta(seconds=10))], T0)
    waited = replace(params(T0, limit=5), clock=lambda: T0 + timedelta(seconds=20))
    assert [j.payload["n"] for j in await store.job_claim(waited)] == [1]


async def test_a_paused_type_is_never_claimed_until_resumed(store: Storage) -> None:
    await store.job_insert_many([job("free", n=1), job("limited", n=2)], T0)
    await store.type_set_paused("free", True, "root", T0)
    await store.type_set_paused("free", True, "root", T0)  # already paused: no new record
    (only,) = await store.job_claim(params(limit=5))
    assert only.type == "limited"
    held = params(types=("free",))
    assert await store.job_claim(held) == []
    assert held.skipped[("free", "paused")] == 1
    (pause,) = await store.type_pauses()
    assert (pause.type, pause.paused_by) == ("free", "root")
    await store.type_set_paused("free", False, "ops", T0 + timedelta(seconds=1))
    assert await store.type_pauses() == []
    (got,) = await store.job_claim(params(types=("free",)))
    assert got.type == "free"
    events = await store.type_events("free")
    assert [(e.event, e.actor) for e in events] == [
        (TypeEventKind.PAUSED, "root"),
        (TypeEventKind.RESUMED, "ops"),
    ]


async def test_lease_expiry_frees_a_slot(store: Storage) -> None:
    await store.job_insert_many([job("limited", n=i) for i in range(4)], T0)
    assert len(await store.job_claim(params(limit=5))) == 3
    later = T0 + timedelta(seconds=31)
    claim = replace(params(later, limit=5), retry_at=lambda j: later)
    got = await store.job_claim(claim)
    # The three expired leases were rescued (their slots freed), so three run again.
    assert len(got) == 3 and await running(store, "limited") == 3


async def test_hardening_101_a_lease_that_expired_while_the_claim_waited_frees_its_slot(
    store: Storage,
) -> None:
    """A claim rescues the leases expired when it was asked, then waits for its types'
    locks (or SQLite's writer): a lease that expired meanwhile no longer holds its type's
    or its group's slot, though no rescue has moved its job yet."""
    made = [job("limited", n=i) for i in range(4)] + [job("grouped", "g", n=i) for i in (4, 5)]
    await store.job_insert_many(made, T0)
    assert len(await store.job_claim(params(limit=5))) == 4  # three limited, one of g
    asked = T0 + timedelta(seconds=20)
    taken_at = T0 + timedelta(seconds=31)  # every lease of T0 has expired by then
    waited = replace(params(asked, limit=5), retry_at=lambda j: asked, clock=lambda: taken_at)
    got = await store.job_claim(waited)
    assert sorted(j.payload["n"] for j in got) == [3, 5]


async def test_release_with_a_delay_snoozes_the_job(store: Storage) -> None:
    await store.job_insert_many([job("free")], T0)
    (held,) = await store.job_claim(params())
    assert held.lease_token is not None
    back = await store.job_release(HeldParams(held.id, held.lease_token, "w", T0, delay_seconds=60))
    assert back.status == JobStatus.PENDING and back.retry_count == 0
    assert back.run_at == T0 + timedelta(seconds=60)
    assert await store.job_claim(params(T0 + timedelta(seconds=59))) == []
    assert await store.job_next_due(TYPES) == T0 + timedelta(seconds=60)
    (again,) = await store.job_claim(params(T0 + timedelta(seconds=60)))
    assert again.id == held.id and again.retry_count == 0
