"""The asyncio side of the SDK under attack: what ``AsyncClient`` asks for and reads, as
``Client`` does, and ``Worker.arun`` on the caller's loop."""

from __future__ import annotations

import asyncio
import gzip
import json

import httpx
import pytest

from queuelog.client import AsyncClient, RetryPolicy, ServerError

JOB = {
    "id": 7, "type": "noop", "payload": {}, "priority": "low", "status": "pending",
    "retry_count": 0, "max_retries": 3, "run_at": "2026-11-30T03:32:31Z",
    "created_at": "2026-11-30T03:32:31Z", "updated_at": "2026-11-30T03:32:31Z",
}  # fmt: skip


@pytest.mark.parametrize("body", [b"not gzip at all", gzip.compress(json.dumps(JOB).encode())])
def test_hardening_115_async_client_asks_for_and_reads_answers_as_client_does(
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
