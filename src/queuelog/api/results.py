"""Awaiting a job's result: ``GET /jobs/{id}?wait_seconds=N``, and how a long poll hears
that its client has gone."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.types import Receive

from queuelog.models import TERMINAL, ApiKey, Job
from queuelog.service import JobService
from queuelog.wakeup import Finishes


async def job_or_wait(
    service: JobService,
    finishes: Finishes,
    caller: ApiKey,
    job_id: int,
    wait_seconds: float,
    receive: Receive,
) -> Job:
    """The job once it is completed, failed or cancelled, or as it is after
    ``wait_seconds``.

    A job the caller may not see is 404 at once. The wait sleeps until the
    transition that finishes the job (on this node, or another's notification)
    wakes it, or the time is up: each wake-up reads the job once, and no timer looks
    in between. A client that hangs up (heard on ``receive``) ends the wait, which
    frees its waiter; so does a server shutting down.
    """
    job = await service.get(caller, job_id)
    if job.status in TERMINAL or wait_seconds <= 0:
        return job
    deadline = time.monotonic() + wait_seconds
    async with watching(receive) as gone:
        while True:
            with finishes.waiter(job_id) as waiter:
                # Registered before the read: a finish between the two wakes the wait.
                job = await service.get(caller, job_id)
                remaining = deadline - time.monotonic()
                if job.status in TERMINAL or remaining <= 0 or finishes.closed or gone.done():
                    return job
                await waiter.wait(remaining, until=gone)


@asynccontextmanager
async def watching(receive: Receive) -> AsyncIterator[asyncio.Future[None]]:
    """A future done once the client has hung up, watched while the block runs."""
    gone = asyncio.ensure_future(hang_up(receive))
    try:
        yield gone
    finally:
        gone.cancel()
        if gone.done() and not gone.cancelled():
            gone.exception()  # a channel that failed: read here, so it is not logged later


async def hang_up(receive: Receive) -> None:
    """Return when the client has gone (its request's body has been read already)."""
    while (await receive())["type"] != "http.disconnect":
        pass
