"""The asyncio side of the SDK under attack: what ``AsyncClient`` asks for and reads, as
``Client`` does, and ``Worker.arun`` on the caller's loop."""

from __future__ import annotations

import asyncio
import gzip
import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from queuelog.client import AsyncClient, Client, Job, RetryPolicy, ServerError, Worker
from queuelog.models import JobStatus
from tests.realserver import RealServer

DEADLINE = 90.0  # seconds any single wait in these tests may take, on a busy machine

JOB = {
    "id": 7, "type": "noop", "payload": {}, "priority": "low", "status": "pending",
    "retry_count": 0, "max_retries": 3, "run_at": "2026-11-30T03:32:31Z",
    "created_at": "2026-11-30T03:32:31Z", "updated_at": "2026-11-30T03:32:31Z",
}  # fmt: skip


@pytest.mark.parametrize("body", [b"not gzip at all", gzip.compress(json.dumps(JOB).encode())])
def test_hardening_111_async_client_asks_for_and_reads_answers_as_client_does(
    body: bytes,
) -> None:
    """``AsyncClient`` asked for gzip and decoded it; an answer in a coding it could not
    decode was ServerUnavailable ("cannot reach the server"), not the answer that is not
    JSON it is to ``Client`` (which asks for JSON as it is, and reads what comes)."""
    asked: list[httpx.Request] = []

    def coded(request: httpx.Request) -> httpx.Response:
        asked.append(request)
        headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
        return httpx.Response(200, headers=headers, stream=httpx.ByteStream(body))

    async def read() -> None:
        policy = RetryPolicy(attempts=1)
        transport = httpx.MockTransport(coded)
        async with AsyncClient("http://127.0.0.1:1", "ql_x", retry_policy=policy,
                               transport=transport) as awaited:  # fmt: skip
            with pytest.raises(ServerError) as raised:
                await awaited.get(7)
        assert raised.value.slug == "not-json"

    asyncio.run(read())
    (request,) = asked
    assert request.headers["Accept"] == "application/json"
    assert request.headers["Accept-Encoding"] == "identity"


def test_hardening_112_arun_leaves_the_loop_s_default_executor_to_its_handlers(
    server: RealServer,
) -> None:
    """``arun`` ran the worker on a thread of the loop's default executor, held as long
    as it ran: an async handler's ``to_thread`` then waited behind it (here, with one
    thread, forever), and so did every arun beyond the executor's threads."""
    worker = Worker(concurrency=1, wait_seconds=1, shutdown_seconds=5)

    @worker.handler("noop")
    async def handle(job: Job) -> dict[str, Any]:
        return {"read": await asyncio.to_thread(lambda: job.payload["n"])}

    async def main() -> dict[str, Any] | None:
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=1))
        async with AsyncClient(server.url, server.keys["shop"]) as shop:
            job = await shop.enqueue("noop", {"n": 3})
            with Client(server.url, server.keys["mailer"]) as client:
                run = asyncio.create_task(worker.arun(client))
                try:
                    return await shop.result(job, timeout=DEADLINE / 3)
                finally:
                    run.cancel()  # cancelling stops the worker gracefully
                    with pytest.raises(asyncio.CancelledError):
                        await run

    assert asyncio.run(asyncio.wait_for(main(), timeout=DEADLINE)) == {"read": 3}


def test_hardening_113_arun_cancelled_twice_returns_once_its_jobs_are_reported(
    server: RealServer,
) -> None:
    """Cancelled again while it wound down, ``arun`` returned at once: its threads went
    on without it and its job stayed running on the server, its async handler left to
    be cut off by the end of the loop. A second cancellation now stops it at once, as a
    second signal does, and arun still returns only once the job has been handed back."""
    worker = Worker(concurrency=1, wait_seconds=1, shutdown_seconds=DEADLINE)

    async def main() -> Job:
        started = asyncio.Event()

        @worker.handler("noop")
        async def handle(job: Job) -> None:
            started.set()
            await asyncio.sleep(DEADLINE)

        async with AsyncClient(server.url, server.keys["shop"]) as shop:
            job = await shop.enqueue("noop")
            with Client(server.url, server.keys["mailer"]) as client:
                run = asyncio.create_task(worker.arun(client))
                await started.wait()
                run.cancel()
                await asyncio.sleep(0.1)  # arun takes the first, and waits for its job
                run.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await run
            return await shop.get(job)

    job = asyncio.run(asyncio.wait_for(main(), timeout=DEADLINE))
    assert job.status is JobStatus.PENDING and job.retry_count == 1  # failed as retryable
