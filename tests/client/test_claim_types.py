"""``claim(types=...)`` sends the types it is given: an empty list is no type at all,
which the server refuses, not every type."""

from __future__ import annotations

import asyncio

import pytest

from queuelog import JobStatus
from queuelog.client import AsyncClient, Client
from queuelog.errors import ValidationFailed
from tests.realserver import RealServer


def test_hardening_87_a_claim_of_an_empty_list_of_types_is_refused_and_takes_nothing(
    real_server: RealServer,
) -> None:
    url, keys = real_server.url, real_server.keys
    with Client(url, keys["shop"]) as shop, Client(url, keys["mailer"]) as worker:
        made = shop.enqueue("noop", {"for": "no worker"})
        with pytest.raises(ValidationFailed):
            worker.claim(types=[], limit=100)

        async def claim_async() -> None:
            async with AsyncClient(url, keys["mailer"]) as aworker:
                await aworker.claim(types=(), limit=100)

        with pytest.raises(ValidationFailed):
            asyncio.run(claim_async())
        assert shop.get(made).status is JobStatus.PENDING
