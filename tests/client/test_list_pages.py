"""The SDK's ``list`` follows ``next_cursor`` through pages that the server ends at a
byte budget before their ``limit`` (hardening 74): every job, once, newest first."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from queuelog.client import AsyncClient, Client
from tests.realserver import RealServer, closing
from tests.storage.test_conformance_pages import BLOB, PER_PAGE


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RealServer]:
    """A server with the default payload limit (64 KiB) and a producer ``shop``."""
    started = RealServer(tmp_path, types={"noop": {}}, config={"durability": "normal"})
    started.create_key("shop", "producer")
    started.start()
    with closing(started):
        yield started


@pytest.mark.anyio
async def test_hardening_74_list_reaches_every_large_job_through_short_pages(
    server: RealServer,
) -> None:
    with Client(server.url, server.keys["shop"]) as shop:
        ids = [shop.enqueue("noop", {"blob": BLOB}).id for _ in range(PER_PAGE + 2)][::-1]
        page = shop.list_page(limit=500)
        assert len(page.jobs) == PER_PAGE and page.next_cursor is not None
        assert [job.id for job in shop.list(page_size=500)] == ids
    async with AsyncClient(server.url, server.keys["shop"]) as awaited:
        assert [job.id async for job in awaited.list(page_size=500)] == ids
