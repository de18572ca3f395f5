"""Flow control inside a claim: pauses, concurrency per type and per group, rate windows.

Both SQL backends run this in the claim's own transaction, after the rescue of
expired leases: SQLite under its write lock, PostgreSQL after taking a transaction
lock per limited type (``FlowSql.lock``), so two nodes never both count three of
four running and both take one. Running jobs are counted from the jobs themselves.

A claim of limited or paused types reads ready jobs type by type, each read one
index seek, and merges the reads into the usual claim order, so the claim takes the
first eligible jobs; jobs held back by a limit keep their place. For a type with
``group_concurrency`` the claim first reads a short run of the type's ready jobs in
claim order and takes those whose groups have room: the read grows with the claim,
not with the number of groups. Only when the run, read whole, leaves the claim short
(full groups held back too many of it) does it read the first ready job of every
group (one seek per group), so a big group at its limit is not walked job by job.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator, Sequence
from dataclasses import replace
from itertools import islice
from typing import Any, Protocol

from queuelog.clock import to_micros
from queuelog.models import FlowLimits, Job
from queuelog.storage.protocol import ClaimParams
from queuelog.storage.rows import Row, job_from_row
from queuelog.storage.statements import claim_order, claim_params, claimed_events

# Where a ready job stands in claim order: priority DESC, created_at, id.
Place = tuple[int, int, int]

PAUSED = "paused"
CONCURRENCY = "concurrency"
GROUP_CONCURRENCY = "group_concurrency"
RATE_LIMIT = "rate_limit"
_KEPT_PAST_WINDOW = 60_000_000  # microseconds: see _rate_used
# A group-limited type's first read: the claim's room, and this many more.
_RUN_SLACK = 32


class FlowSql(Protocol):
    """What a backend gives the flow claim: its named queries and parameter forms."""

    def rows(self, name: str, args: dict[str, Any]) -> list[Row]: ...
    def run(self, name: str, args: dict[str, Any]) -> None: ...
    def ids(self, ids: list[int]) -> Any: ...
    def types(self, types: Sequence[str]) -> Any: ...
    def lock(self, types: Sequence[str]) -> None: ...


def take(sql: FlowSql, params: ClaimParams) -> list[Job]:
    """The claim's pick once expired leases are rescued: jobs whose time has come are
    made pending, then up to ``params.limit`` ready ones are leased, in claim order,
    each with its ``claimed`` event. Without a limit or pause in the way this is one
    statement over the types' ready jobs; else they are read type by type (``claim``)."""
    paused = _paused(sql)
    types = scope(params, paused)
    if types is not None:
        limited = [name for name in types if name in params.limits]
        sql.lock(limited)
        if params.clock is not None:  # the locks may have been waited for
            params = replace(params, now=params.clock())
        if limited:
            # A pause answered while the locks were waited for holds from then on: on
            # PostgreSQL the pauses read before the wait may be out of date by seconds.
            paused = _paused(sql)
    sql.run("job_promote_due", {"now": to_micros(params.now)})
    if types is None:
        # Each named type's ready jobs are read once, however often the claim names it.
        named = list(dict.fromkeys(params.types))
        rows = sql.rows("job_claim", claim_params(params, sql.types(named)))
    else:
        rows = claim(sql, params, types, paused)
    jobs = sorted(map(job_from_row, rows), key=claim_order)
    if jobs:
        sql.run("event_insert_each", claimed_events(jobs, params))
    return jobs


def _paused(sql: FlowSql) -> set[str]:
    return {row["type"] for row in sql.rows("type_paused", {})}


def scope(params: ClaimParams, paused: set[str]) -> list[str] | None:
    """The types a claim must count, type by type: all it names once a limit or a pause
    applies to one of them; None otherwise (one statement then takes the ready jobs)."""
    if (params.limits.keys() | paused).isdisjoint(params.types):
        return None
    return sorted(set(params.types))


def claim(sql: FlowSql, params: ClaimParams, types: list[str], paused: set[str]) -> list[Row]:
    """Claim up to ``params.limit`` ready jobs of ``types`` that no limit holds back,
    once the limited types' locks are held."""
    params.skipped.clear()  # a transaction run again counts afresh
    streams: list[Iterator[Place]] = []
    for name in types:
        if name in paused:
            _held_back(sql, params, name, PAUSED)
            continue
        room = _room(sql, params, name)
        if room > 0:
            streams.append(_candidates(sql, params, name, room))
    picked = [place[2] for place in islice(heapq.merge(*streams), params.limit)]
    if not picked:
        return []
    args = claim_params(params, None) | {"ids": sql.ids(picked)}
    rows = sql.rows("job_claim_ids", args)
    _count_rate(sql, params, rows)
    return rows


def _room(sql: FlowSql, params: ClaimParams, name: str) -> int:
    """How many jobs of ``name`` this claim may take by the type's own limits."""
    room = params.limit
    limits = params.limits.get(name)
    if limits is None:
        return room
    if limits.concurrency is not None:
        (row,) = sql.rows("type_running", {"type": name, "now": to_micros(params.now)})
        room = min(room, limits.concurrency - int(row["n"]))
        if room <= 0:
            _held_back(sql, params, name, CONCURRENCY)
            return 0
    if limits.rate_jobs is not None:
        used = _rate_used(sql, params, name, limits)
        room = min(room, limits.rate_jobs - used)
        if room <= 0:
            _held_back(sql, params, name, RATE_LIMIT)
            return 0
    return room


def _rate_used(sql: FlowSql, params: ClaimParams, name: str, limits: FlowLimits) -> int:
    """Claims of ``name`` in the window ending now; older ones are forgotten."""
    assert limits.rate_per_seconds is not None
    since = window_start(to_micros(params.now), limits.rate_per_seconds)
    # Nodes' clocks differ a little, so the claim this one waited for may be stamped
    # later, and its window may have left claims this one still counts: a claim is
    # forgotten only _KEPT_PAST_WINDOW after it left the window.
    sql.run("type_claims_forget", {"type": name, "since": since - _KEPT_PAST_WINDOW})
    (row,) = sql.rows("type_claims_used", {"type": name, "since": since})
    return int(row["n"])


def window_start(now: int, per_seconds: float) -> int:
    """The start (excluded) of the rate window that ends at ``now``, in microseconds."""
    return now - round(per_seconds * 1_000_000)


def _count_rate(sql: FlowSql, params: ClaimParams, rows: list[Row]) -> None:
    """Record the claimed jobs of rate-limited types in their windows."""
    by_type: dict[str, list[int]] = {}
    for row in rows:
        limits = params.limits.get(row["type"])
        if limits is not None and limits.rate_jobs is not None:
            by_type.setdefault(row["type"], []).append(int(row["id"]))
    now = to_micros(params.now)
    for name, ids in by_type.items():
        sql.run("type_claims_record", {"type": name, "now": now, "ids": sql.ids(ids)})


def _held_back(sql: FlowSql, params: ClaimParams, name: str, reason: str) -> None:
    """Count a limit that held back a ready job (not one that had nothing to hold)."""
    if sql.rows("type_has_ready", {"type": name, "now": to_micros(params.now)}):
        params.skipped[(name, reason)] += 1


def _place(row: Row) -> Place:
    return (-int(row["priority"]), int(row["created_at"]), int(row["id"]))


def _candidates(sql: FlowSql, params: ClaimParams, name: str, room: int) -> Iterator[Place]:
    """The first ``room`` ready jobs of ``name`` that its group limit lets through."""
    limits = params.limits.get(name)
    now = to_micros(params.now)
    args = {"type": name, "now": now, "limit": room}
    if limits is None or limits.group_concurrency is None:
        return iter([_place(r) for r in sql.rows("ready_of_type", args)])
    running = {r["job_group"]: int(r["n"]) for r in sql.rows("type_running_groups", args)}
    taken = _from_run(sql, params, name, limits.group_concurrency, running, args)
    if taken is not None:
        return iter(taken)
    ungrouped = [_place(r) for r in sql.rows("ready_ungrouped", args)]
    heads: list[tuple[Place, str, int]] = []
    for row in sql.rows("ready_group_heads", args):
        free = limits.group_concurrency - running.get(row["job_group"], 0)
        if free > 0:
            heads.append((_place(row), row["job_group"], free))
        elif not params.skipped[(name, GROUP_CONCURRENCY)]:
            params.skipped[(name, GROUP_CONCURRENCY)] += 1
    groups = _by_group(sql, args, sorted(heads))
    return islice(heapq.merge(iter(ungrouped), groups), room)


def _from_run(
    sql: FlowSql,
    params: ClaimParams,
    name: str,
    slots: int,
    running: dict[str, int],
    args: dict[str, Any],
) -> list[Place] | None:
    """The claim's jobs of ``name`` from a short run of its ready jobs in claim order,
    each group's up to its free ``slots``; None when the run was read whole and gave
    fewer than the claim's room while more jobs may follow (the groups' heads then
    decide). A claim is counted as held back by its groups when a job of the run was
    skipped because its group's running jobs fill it."""
    room = args["limit"]
    length = room + _RUN_SLACK
    run = sql.rows("ready_run_of_type", {**args, "limit": length})
    held = dict(running)  # each group's running jobs, and those this claim takes
    places: list[Place] = []
    for row in run:
        group = row["job_group"]
        if group is not None and held.get(group, 0) >= slots:
            if running.get(group, 0) >= slots and not params.skipped[(name, GROUP_CONCURRENCY)]:
                params.skipped[(name, GROUP_CONCURRENCY)] += 1
            continue
        if group is not None:
            held[group] = held.get(group, 0) + 1
        places.append(_place(row))
        if len(places) == room:
            return places
    return places if len(run) < length else None


def _by_group(
    sql: FlowSql, args: dict[str, Any], heads: list[tuple[Place, str, int]]
) -> Iterator[Place]:
    """The grouped candidates in claim order, each group's up to its free slots.

    Every group's first ready job is known; once it is taken, the group's next ones (up
    to its free slots and the claim's room) are read in one list, so a claim reads at
    most one more list per group it takes from.
    """
    while heads:
        place, group, free = heapq.heappop(heads)
        yield place
        if free < 2:
            continue
        limit = min(free, args["limit"])  # the list begins with the job just taken...
        more = sql.rows("ready_of_group", {**args, "group": group, "limit": limit})
        # ... unless another transaction holds that job's row (PostgreSQL's SKIP LOCKED
        # passes it over) or moved it: the group gives free jobs in all, never more.
        after = [p for p in map(_place, more) if p > place and p[2] != place[2]]
        for later in after[: free - 1]:
            heapq.heappush(heads, (later, group, 1))  # read already: no list of its own
