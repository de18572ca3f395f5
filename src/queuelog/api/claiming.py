"""A claim that waits: long-polls for a first job, then lingers for more, and answers
with what it holds or gives it back (a client gone, a key revoked)."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Sequence

from starlette.types import Receive

from queuelog.api.results import watching
from queuelog.api.schemas import ClaimRequest
from queuelog.auth import KeyRing
from queuelog.errors import QueueError, StorageUnavailable, Unauthenticated
from queuelog.models import ApiKey, Job
from queuelog.service import JobService
from queuelog.wakeup import Wakeup

log = logging.getLogger("queuelog.api")


async def claim_or_wait(
    service: JobService,
    wakeup: Wakeup,
    keys: KeyRing,
    caller: ApiKey,
    body: ClaimRequest,
    receive: Receive,
) -> list[Job]:
    """Claim now, or long-poll up to ``wait_seconds`` for a matching job to become ready;
    once it holds a job, take more as they become ready for ``linger_ms``.

    The wait sleeps until a notification (enqueue, retry, redrive, lease rescue)
    or until the next scheduled job's ``run_at``; it does not poll in a loop. A
    client that has gone away (heard on ``receive``, the request's ASGI channel,
    watched from the start of the wait) claims nothing: the jobs a lingering claim
    held for it are given back. A server shutting down stops waiting. A failure to take
    more after the claim took jobs answers with those jobs, so none is left leased to
    nobody. Each look after the first, and the answer, check the caller's key: a revoked
    one's claim takes no more, gives back what it held and is answered 401.
    """
    types = service.claimable_types(caller, body.types)
    if not body.wait_seconds and not body.linger_ms:
        return await service.claim(caller, types, body.limit, body.lease_seconds, body.instance)
    claiming = _Claiming(service, keys, caller, types, body)
    async with watching(receive) as gone:
        await asyncio.sleep(0)  # one step: a client gone already is heard at once
        try:
            await _claim_until_done(claiming, wakeup, gone)
        except QueueError:
            if not claiming.held:
                raise
            log.warning("a lingering claim failed to take more; answering with what it holds")
        finally:
            if gone.done():
                await _give_back(service, caller, claiming.held)
        if gone.done():
            gone.result()  # a failure to read the channel is raised, not hidden
            return []
        await claiming.key_check()
        return claiming.held


async def _claim_until_done(
    claiming: _Claiming, wakeup: Wakeup, gone: asyncio.Future[None]
) -> None:
    """Look for jobs, then sleep until a wake-up, until the claim is full, its time is up,
    its client has gone or the server closes."""
    while not gone.done():
        with wakeup.waiter(claiming.types) as waiter:  # registered before the look
            await claiming.look()
            remaining = claiming.remaining()
            if remaining <= 0 or wakeup.closed:
                return
            if not claiming.held:
                remaining = min(remaining, await claiming.until_due())
            await waiter.wait(min(remaining, wakeup.recheck_seconds), until=gone)
            if claiming.held and claiming.remaining() <= 0 and not waiter.notified:
                return  # the linger is over, and nothing came to look for


class _Claiming:
    """What one claim holds, and how long it may still wait: for a first job until its
    ``wait_seconds`` are up, then for more until its ``linger_ms`` are, and never past a
    third of a held job's lease, so that a worker heartbeating at that pace keeps it."""

    def __init__(
        self,
        service: JobService,
        keys: KeyRing,
        caller: ApiKey,
        types: Sequence[str],
        body: ClaimRequest,
    ) -> None:
        self.service, self.keys, self.caller, self.types = service, keys, caller, types
        self.body = body
        self.held: list[Job] = []
        self._until = time.monotonic() + float(body.wait_seconds)
        self._looked = False  # the first look follows the request's authentication
        self._unchecked = False  # the key could not be read again: it takes no more

    async def key_check(self) -> None:
        """Unauthenticated if the caller's key was revoked since the request began; then,
        or if the key cannot be read, what the claim held is given back first. Jobs that
        cannot be given back either (the database away) are answered at once, to a key
        that was good when the claim began, rather than left leased to nobody."""
        if self._unchecked:
            return
        try:
            active = await self.keys.still_active(self.caller)
        except QueueError:
            self.held = await _give_back(self.service, self.caller, self.held)
            if not self.held:
                raise
            log.warning("a claim could neither read its key again nor give its jobs back")
            self._unchecked, self._until = True, 0.0
            return
        if not active:
            held, self.held = self.held, []
            await _give_back(self.service, self.caller, held)
            raise Unauthenticated("A valid API key is required")

    async def look(self) -> None:
        """Claim what is ready, up to the room left, while the caller's key is active."""
        if self._looked:
            await self.key_check()
            if self._unchecked:
                return
        self._looked = True
        body = self.body
        wanted = body.limit - len(self.held)
        jobs = await self.service.claim(
            self.caller, self.types, wanted, body.lease_seconds, body.instance
        )
        now = time.monotonic()
        if jobs and not self.held:
            self._until = now + body.linger_ms / 1000
        for job in jobs:
            self._until = min(self._until, now + _lease_seconds(job) / 3)
        self.held += jobs

    def remaining(self) -> float:
        """Seconds left to wait (0 or less: answer now)."""
        if len(self.held) >= self.body.limit:
            return 0.0
        return self._until - time.monotonic()

    async def until_due(self) -> float:
        """Seconds until the next scheduled job of its types is due (inf if none waits)."""
        next_due = await self.service.next_due(self.types)
        if next_due is None:
            return math.inf
        return max((next_due - self.service.clock.now()).total_seconds(), 0.001)


def _lease_seconds(job: Job) -> float:
    assert job.claimed_at is not None and job.lease_expires_at is not None
    return (job.lease_expires_at - job.claimed_at).total_seconds()


async def _give_back(service: JobService, caller: ApiKey, jobs: list[Job]) -> list[Job]:
    """Release the jobs claimed for a client that hung up (or whose key was revoked
    meanwhile), their attempt not spent. Answers those still held because the database
    is away: from the first release it refuses, the rest are not tried (each would wait
    as long), and answered without them they run again when their lease expires."""
    for index, job in enumerate(jobs):
        try:
            await service.release(caller, job.id, job.lease_token or "")
        except StorageUnavailable:
            log.warning("could not give back %d job(s) of a claim", len(jobs) - index)
            return jobs[index:]
        except QueueError:  # no longer this claim's (its lease ended meanwhile)
            log.warning("could not give back job %s of a claim", job.id)
    return []
