"""Which calls are sent again after a broken connection, and that a resend never duplicates."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from queuelog.client import AsyncClient, Client, RetryPolicy, ServerUnavailable
from queuelog.client.transport import Broken, NotSent
from queuelog.models import JobStatus
from tests.client.pools import Noting, Sent
from tests.realserver import RealServer

FAST = RetryPolicy(attempts=3, base_delay=0.01, max_delay=0.05)


class DropFirstResponse(Noting):
    """Delivers every request, but loses the first answer as if the connection broke."""

    def forward(self, sent: Sent, send: Callable[[], Any]) -> Any:
        response = send()
        if sent is self.sent[0]:
            raise Broken("connection reset after the server answered")
        return response


class RefuseFirstConnection(Noting):
    """The first request never reaches the server."""

    def forward(self, sent: Sent, send: Callable[[], Any]) -> Any:
        if sent is self.sent[0]:
            raise NotSent("connection refused")
        return send()


class AsyncDropFirstResponse(httpx.AsyncBaseTransport):
    def __init__(self) -> None:
        self.inner = httpx.AsyncHTTPTransport()
        self.sent = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.sent += 1
        response = await self.inner.handle_async_request(request)
        if self.sent == 1:
            await response.aread()
            await response.aclose()
            raise httpx.ReadError("connection reset after the server answered", request=request)
        return response


def jobs_with_marker(server: RealServer, marker: str) -> list[int]:
    with Client(server.url, server.keys["root"]) as root:
        return [j.id for j in root.list(type="noop") if j.payload.get("marker") == marker]


def test_enqueue_resent_after_a_lost_answer_creates_one_job(real_server: RealServer) -> None:
    transport = DropFirstResponse()
    marker = uuid.uuid4().hex
    with Client(
        real_server.url, real_server.keys["shop"], retry_policy=FAST, transport=transport
    ) as c:
        job = c.enqueue("noop", {"marker": marker})
    assert transport.paths() == ["POST /jobs", "POST /jobs"]
    assert jobs_with_marker(real_server, marker) == [job.id]


def test_batch_enqueue_resent_after_a_lost_answer_creates_each_job_once(
    real_server: RealServer,
) -> None:
    transport = DropFirstResponse()
    marker = uuid.uuid4().hex
    with Client(
        real_server.url, real_server.keys["shop"], retry_policy=FAST, transport=transport
    ) as c:
        answers = c.enqueue_many([{"type": "noop", "payload": {"marker": marker}}] * 3)
    assert len(transport.sent) == 2
    assert not any(a.created for a in answers)  # the second delivery found them all
    assert sorted(jobs_with_marker(real_server, marker)) == sorted(a.job.id for a in answers)


def test_async_enqueue_resent_after_a_lost_answer_creates_one_job(
    real_server: RealServer,
) -> None:
    marker = uuid.uuid4().hex

    async def enqueue() -> int:
        transport = AsyncDropFirstResponse()
        async with AsyncClient(
            real_server.url, real_server.keys["shop"], retry_policy=FAST, transport=transport
        ) as client:
            job = await client.enqueue("noop", {"marker": marker})
        assert transport.sent == 2
        return job.id

    job_id = asyncio.run(asyncio.wait_for(enqueue(), timeout=60))
    assert jobs_with_marker(real_server, marker) == [job_id]


def test_claim_is_not_resent_once_it_may_have_reached_the_server(
    real_server: RealServer,
) -> None:
    with Client(real_server.url, real_server.keys["shop"]) as shop:
        job = shop.enqueue("noop", {"marker": uuid.uuid4().hex})
    transport = DropFirstResponse()
    worker_key = real_server.keys["mailer"]
    worker = Client(real_server.url, worker_key, retry_policy=FAST, transport=transport)
    with worker, pytest.raises(ServerUnavailable):
        worker.claim(types=["noop"], limit=100)
    assert transport.paths() == ["POST /jobs/claim"]
    with Client(real_server.url, real_server.keys["root"]) as root:
        # Held until its lease expires: a second claim could not have brought it back.
        assert root.get(job.id).status is JobStatus.RUNNING


def test_claim_is_resent_when_the_connection_was_refused(real_server: RealServer) -> None:
    with Client(real_server.url, real_server.keys["shop"]) as shop:
        shop.enqueue("noop")
    transport = RefuseFirstConnection()
    worker_key = real_server.keys["mailer"]
    with Client(real_server.url, worker_key, retry_policy=FAST, transport=transport) as worker:
        assert worker.claim(types=["noop"], limit=100)
    assert len(transport.sent) == 2


def test_key_creation_is_never_resent(real_server: RealServer) -> None:
    transport = DropFirstResponse()
    admin_key = real_server.keys["root"]
    root = Client(real_server.url, admin_key, retry_policy=FAST, transport=transport)
    with root, pytest.raises(ServerUnavailable):
        root.create_key("once", ["producer"])
    assert transport.paths() == ["POST /keys"]
