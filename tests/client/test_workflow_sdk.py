"""Workflows through the SDK (Client, AsyncClient, a Worker's job.dependencies()) and the
CLI, against a real server."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import pytest

from queuelog.client import AsyncClient, Client, Job, Worker, enqueue_body
from queuelog.models import JobStatus
from tests.client.test_cli import cli
from tests.realserver import RealServer


def test_client_enqueues_a_graph_and_reads_dependencies(real_server: RealServer) -> None:
    with Client(real_server.url, real_server.keys["shop"]) as shop:
        first = shop.enqueue("noop", {"n": 1})
        second = shop.enqueue("noop", depends_on=[first])  # a Job or its id
        assert second.status is JobStatus.WAITING and second.depends_on == (first.id,)
        made = shop.enqueue_many(
            [
                enqueue_body("noop"),
                enqueue_body("noop", depends_on=[first], depends_on_items=[0]),
                enqueue_body("noop", depends_on_items=[0, 1], on_dependency_failure="run"),
            ]
        )
        a, b, c = (item.job for item in made)
        assert b.depends_on == (first.id, a.id) and c.depends_on == (a.id, b.id)
        deps = shop.dependencies(c)
        assert [(d.id, d.status) for d in deps] == [(a.id, JobStatus.PENDING), (b.id, b.status)]
        assert deps[0].type == "noop" and deps[0].result is None
        dependents = [job.id for job in shop.list(depends_on=first)]
        assert dependents == [b.id, second.id]
        page = shop.list_page(depends_on=a.id, limit=1)
        assert [j.id for j in page.jobs] == [c.id] and page.next_cursor is not None


def test_async_client_enqueues_with_dependencies(real_server: RealServer) -> None:
    async def run() -> None:
        async with AsyncClient(real_server.url, real_server.keys["shop"]) as shop:
            first = await shop.enqueue("noop")
            second = await shop.enqueue("noop", depends_on=[first.id], on_dependency_failure="run")
            assert second.status is JobStatus.WAITING
            assert [d.id for d in await shop.dependencies(second.id)] == [first.id]
            assert [j.id async for j in shop.list(depends_on=first.id)] == [second.id]

    asyncio.run(run())


def test_dependencies_outside_a_worker_says_so() -> None:
    job = Job.from_json(
        {
            "id": 1,
            "type": "noop",
            "priority": "low",
            "status": "pending",
            "retry_count": 0,
            "max_retries": 3,
            "run_at": "2026-01-01T00:00:00Z",
            "created_at": "2026-01-01T00:00:00Z",
            "updated_at": "2026-01-01T00:00:00Z",
        }
    )
    assert job.depends_on == ()
    with pytest.raises(ValueError, match="Worker"):
        job.dependencies()


def test_a_handler_reads_what_its_dependencies_produced(server: RealServer) -> None:
    worker = Worker(concurrency=2, wait_seconds=1)
    seen: dict[int, list[Any]] = {}

    @worker.handler("noop")
    def handle(job: Job) -> dict[str, Any]:
        results = [dep.result for dep in job.dependencies()]
        seen[job.id] = results
        return {"sum": sum(r["sum"] for r in results if r) + int(job.payload.get("n", 0))}

    with Client(server.url, server.keys["shop"]) as shop:
        made = shop.enqueue_many(
            [
                enqueue_body("noop", {"n": 1}),
                enqueue_body("noop", {"n": 2}),
                enqueue_body("noop", {"n": 3}, depends_on_items=[0, 1]),
            ]
        )
    final = made[2].job.id
    client = Client(server.url, server.keys["mailer"])
    thread = threading.Thread(target=worker.run, args=(client,), daemon=True)
    thread.start()
    try:
        with Client(server.url, server.keys["shop"]) as shop:
            done = shop.wait(final, timeout=60)
    finally:
        worker.stop()
        thread.join(timeout=60)
        client.close()
    assert done.status is JobStatus.COMPLETED and done.result == {"sum": 6}
    assert seen[final] == [{"sum": 1}, {"sum": 2}]


def test_cli_shows_dependencies_and_dependents(real_server: RealServer) -> None:
    with Client(real_server.url, real_server.keys["shop"]) as shop:
        first = shop.enqueue("noop")
        second = shop.enqueue("noop", depends_on=[first])
        third = shop.enqueue("noop", depends_on=[first, second])
    shown = cli(real_server, "shop", "jobs", "show", str(second.id))
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    assert text.index("dependencies:") < text.index("dependents:")
    dependencies, dependents = text.split("dependencies:")[1].split("dependents:")
    assert str(first.id) in dependencies and "pending" in dependencies
    assert str(third.id) in dependents and "waiting" in dependents
    as_json = json.loads(cli(real_server, "shop", "jobs", "show", str(third.id), "--json").stdout)
    assert as_json["depends_on"] == [first.id, second.id]
    listed = cli(real_server, "shop", "jobs", "list", "--depends-on", str(first.id), "--json")
    assert [j["id"] for j in json.loads(listed.stdout)] == [third.id, second.id]
    alone = cli(real_server, "shop", "jobs", "show", str(third.id))
    assert "dependents:" not in alone.stdout and "dependencies:" in alone.stdout
