"""The PostgreSQL reference: pgqueuer on the same server, in the users' shapes.

pgqueuer is a library over asyncpg: its producers insert straight into the table and
its ``QueueManager`` workers dequeue, run and log jobs themselves, with their defaults
(batches of 10, completions logged in batches). Every process gets its own event loop
and connections; the 16 threads of a web app are 16 tasks on a pool of 16 connections.
Its tables live in a fresh schema of their own, durable (logged, ``synchronous_commit``
on) like queuelog's.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass
from typing import Any

from bench.clients import PAYLOAD
from bench.pg import fresh_schema
from bench.shapes import ShapePlan, measure_shapes

BODY = json.dumps(PAYLOAD).encode()


@dataclass
class _Pgq:
    dsn: str
    schema: str
    seconds: float

    def open(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.loop.run_until_complete(self._connect())

    def run(self) -> tuple[int, dict[str, Any]]:
        try:
            return self.loop.run_until_complete(self.work(time.monotonic() + self.seconds))
        finally:
            self.loop.run_until_complete(self.closing.close())

    async def _connect(self, size: int = 1) -> None:
        import asyncpg
        from pgqueuer import Queries

        settings = {"search_path": self.schema}
        self.pool = await asyncpg.create_pool(
            self.dsn, min_size=size, max_size=size, server_settings=settings
        )
        self.queries = Queries.from_asyncpg_pool(self.pool)
        self.closing: Any = self.pool

    async def work(self, deadline: float) -> tuple[int, dict[str, Any]]:
        raise NotImplementedError


@dataclass
class PgqEnqueue(_Pgq):
    """``Queries.enqueue`` of one job per call from ``tasks`` tasks."""

    count: int = 1000
    tasks: int = 1

    async def _connect(self, size: int = 1) -> None:
        await super()._connect(self.tasks)

    async def work(self, deadline: float) -> tuple[int, dict[str, Any]]:
        share = self.count // self.tasks

        async def loop() -> int:
            n = 0
            while n < share and time.monotonic() < deadline:
                await self.queries.enqueue("noop", BODY)
                n += 1
            return n

        return sum(await asyncio.gather(*(loop() for _ in range(self.tasks)))), {}


@dataclass
class PgqProducer(_Pgq):
    async def work(self, deadline: float) -> tuple[int, dict[str, Any]]:
        done = 0
        while time.monotonic() < deadline:
            await self.queries.enqueue("noop", BODY)
            done += 1
        return 0, {"enqueued": done}


@dataclass
class PgqBulk(_Pgq):
    count: int = 1000
    size: int = 500

    async def work(self, deadline: float) -> tuple[int, dict[str, Any]]:
        names, bodies, priorities = ["noop"] * self.size, [BODY] * self.size, [0] * self.size
        done = 0
        while done < self.count and time.monotonic() < deadline:
            await self.queries.enqueue(names, bodies, priorities)
            done += self.size
        return done, {}


@dataclass
class PgqWorker(_Pgq):
    """A ``QueueManager`` with its defaults and a no-op entrypoint. ``drain``: until the
    queue is empty (its own drain mode; the run ends once its logs are written); else
    for ``seconds``, counting the jobs run by then."""

    drain: bool = True

    async def _connect(self, size: int = 1) -> None:
        import asyncpg
        from pgqueuer import Queries

        settings = {"search_path": self.schema}
        self.closing = await asyncpg.connect(self.dsn, server_settings=settings)
        self.queries = Queries.from_asyncpg_connection(self.closing)

    async def work(self, deadline: float) -> tuple[int, dict[str, Any]]:
        from pgqueuer import QueueManager
        from pgqueuer.types import QueueExecutionMode

        manager = QueueManager(self.queries)
        done = 0

        @manager.entrypoint("noop")
        async def noop(job: Any) -> None:
            nonlocal done
            done += 1

        if self.drain:
            await asyncio.wait_for(manager.run(mode=QueueExecutionMode.drain), self.seconds)
            return done, {}
        stop = asyncio.get_running_loop().call_later(self.seconds, manager.shutdown.set)
        counted: list[int] = []
        asyncio.get_running_loop().call_later(self.seconds, lambda: counted.append(done))
        await manager.run()
        stop.cancel()
        return (counted or [done])[0], {"ended": deadline}


@dataclass
class PgqueuerShapes:
    dsn: str
    schema: str

    def enqueue(self, count: int, threads: int) -> PgqEnqueue:
        return PgqEnqueue(self.dsn, self.schema, 60, count=count, tasks=threads)

    def producer(self, seconds: float) -> PgqProducer:
        return PgqProducer(self.dsn, self.schema, seconds)

    def worker(self, drain: bool, seconds: float, idle: float) -> PgqWorker:
        # No idle wait: pgqueuer's own drain mode asks the table whether work is left.
        return PgqWorker(self.dsn, self.schema, seconds, drain=drain)

    def bulk(self, count: int, size: int) -> PgqBulk:
        return PgqBulk(self.dsn, self.schema, 60, count=count, size=size)


async def _install(dsn: str, schema: str) -> None:
    import asyncpg
    from pgqueuer import Queries

    conn = await asyncpg.connect(dsn, server_settings={"search_path": schema})
    try:
        await Queries.from_asyncpg_connection(conn).install()
    finally:
        await conn.close()


def pgqueuer_reference(plan: ShapePlan, dsn: str) -> dict[str, float]:
    """pgqueuer's jobs per second in each shape, in a fresh schema on ``dsn``."""
    with fresh_schema(dsn, "bench_pgq") as schema:
        asyncio.run(_install(dsn, schema))
        return measure_shapes(plan, PgqueuerShapes(dsn, schema))
