"""Flow control through the SDK (Client, AsyncClient, Worker's Snooze) and the CLI,
against a real server."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from queuelog.client import AsyncClient, Client, Job, Retry, Snooze, Worker
from queuelog.errors import NotFound
from queuelog.models import JobStatus
from tests.client.test_cli import cli
from tests.realserver import RealServer, closing

FLOW_TYPES: dict[str, dict[str, Any]] = {
    "partner": {"concurrency": 2, "group_concurrency": 1},
    "metered": {"rate_limit": {"jobs": 5, "per_seconds": 1}},
    "nap": {"max_retries": 0},
    "team/mail": {},  # a name with a slash: a path segment of its own routes
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealServer]:
    real = RealServer(Path(tmp_path_factory.mktemp("flow")), types=FLOW_TYPES)
    real.create_key("root", "admin")
    real.create_key("shop", "producer")
    real.create_key("mailer", "worker")
    with closing(real):
        real.start()
        yield real


def test_client_lists_pauses_and_resumes_types(server: RealServer) -> None:
    with Client(server.url, server.keys["root"]) as root:
        types = {t.name: t for t in root.list_types()}
        assert types["partner"].concurrency == 2 and types["partner"].group_concurrency == 1
        assert types["metered"].rate_limit == {"jobs": 5, "per_seconds": 1.0}
        paused = root.pause_type("metered")
        assert paused.paused and paused.paused_by == "root" and paused.paused_at is not None
        resumed = root.resume_type("metered")
        assert not resumed.paused and resumed.paused_by is None
        with pytest.raises(NotFound):
            root.pause_type("nope")
        assert root.pause_type("team/mail").paused
        assert [t.name for t in root.list_types() if t.paused] == ["team/mail"]
        assert not root.resume_type("team/mail").paused


def test_async_client_and_group_on_enqueue(server: RealServer) -> None:
    async def run() -> None:
        async with AsyncClient(server.url, server.keys["root"]) as root:
            assert "partner" in {t.name for t in await root.list_types()}
            assert (await root.pause_type("nap")).paused
            assert not (await root.resume_type("nap")).paused
        async with AsyncClient(server.url, server.keys["shop"]) as shop:
            job = await shop.enqueue("partner", {"n": 1}, group="acme")
            assert job.group == "acme"

    asyncio.run(run())
    with Client(server.url, server.keys["shop"]) as shop:
        assert shop.enqueue("partner", group="zeta").group == "zeta"


def test_a_handler_that_raises_snooze_gives_the_job_back_unrun(server: RealServer) -> None:
    worker = Worker(concurrency=1, wait_seconds=1)
    seen: list[int] = []

    @worker.handler("nap")
    def handle(job: Job) -> Any:
        seen.append(job.retry_count)
        if len(seen) == 1:
            raise Snooze(0.5)
        return {"slept": True}

    with Client(server.url, server.keys["shop"]) as shop:
        job_id = shop.enqueue("nap").id
    client = Client(server.url, server.keys["mailer"])
    thread = threading.Thread(target=worker.run, args=(client,), daemon=True)
    thread.start()
    try:
        with Client(server.url, server.keys["root"]) as root:
            deadline = time.monotonic() + 60
            while root.get(job_id).status != JobStatus.COMPLETED and time.monotonic() < deadline:
                time.sleep(0.1)
            done = root.get(job_id)
            events = [str(e.event) for e in root.events(job_id)]
    finally:
        worker.stop()
        thread.join(timeout=60)
        client.close()
    # max_retries = 0: a spent attempt would have failed it for good.
    assert done.status == JobStatus.COMPLETED and done.retry_count == 0
    assert seen == [0, 0] and "released" in events


def test_snooze_refuses_a_delay_out_of_range() -> None:
    with pytest.raises(ValueError):
        Snooze(-1)
    with pytest.raises(ValueError):
        Snooze(86_401)


def test_retry_refuses_a_delay_the_server_would_refuse() -> None:
    # A failure the server refused (422) left its job held until the lease ran out.
    for after in (-1, 366 * 86_400 + 1, float("nan")):
        with pytest.raises(ValueError):
            Retry("busy", after=after)
    assert Retry("busy", after=366 * 86_400).after == 366 * 86_400


def test_cli_types_list_pause_and_resume(server: RealServer) -> None:
    listed = cli(server, "root", "types", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert {t["name"] for t in json.loads(listed.stdout)} == set(FLOW_TYPES)
    table = cli(server, "root", "types", "list")
    assert "partner" in table.stdout and "/2" in table.stdout and "5/1s" in table.stdout
    assert "waiting" in table.stdout, "every count GET /types gives"
    paused = cli(server, "root", "types", "pause", "partner")
    assert paused.returncode == 0 and paused.stdout.strip() == "type partner paused"
    assert "yes, by root" in cli(server, "root", "types", "list").stdout
    resumed = cli(server, "root", "types", "resume", "partner")
    assert resumed.stdout.strip() == "type partner resumed"
    missing = cli(server, "root", "types", "pause", "nope")
    assert missing.returncode == 1 and len(missing.stderr.strip().splitlines()) == 1
    refused = cli(server, "shop", "types", "list")
    assert refused.returncode != 0
    grouped = cli(server, "shop", "enqueue", "partner", "--group", "acme", "--json")
    assert grouped.returncode == 0 and json.loads(grouped.stdout)["group"] == "acme"
