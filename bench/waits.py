"""Claims while requests await results: the burn-down of ``claim 50 + batch complete``
alone, then beside requests that each await a job that does not finish
(``GET /jobs/{id}?wait_seconds=30``, sent again as each is answered)."""

from __future__ import annotations

import asyncio
import multiprocessing as mp
from typing import Any

from bench import clients
from bench.parallel import run_parallel
from bench.server import Keys

WAITS = 200


def _burn(plan: Any, url: str, keys: Keys) -> float:
    clients.fill_queue(url, keys.producer, plan.jobs)
    workers = [clients.BurnWorker(url, keys.worker, 90, limit=50) for _ in range(plan.workers)]
    rate, shares = run_parallel(workers)
    if sum(s.count for s in shares) != plan.jobs:
        raise RuntimeError(f"burn-down beside waits: {sum(s.count for s in shares)} != {plan.jobs}")
    return rate


def _hold_waits(url: str, key: str, job_id: int, count: int, ready: Any) -> None:
    """In a process of its own until it is stopped: ``count`` connections, each awaiting
    ``job_id``'s result, again and again; ``ready`` is set once every request was sent."""
    host, _, port = url.removeprefix("http://").partition(":")
    request = (
        f"GET /jobs/{job_id}?wait_seconds=30 HTTP/1.1\r\nHost: {host}\r\n"
        f"Authorization: Bearer {key}\r\n\r\n"
    ).encode()

    async def one(sent: asyncio.Queue[None]) -> None:
        reader, writer = await asyncio.open_connection(host, int(port))
        for _ in range(1000):  # bounded: the process is stopped long before
            writer.write(request)
            await writer.drain()
            sent.put_nowait(None)
            head = await reader.readuntil(b"\r\n\r\n")
            length = next(
                int(line.split(b":")[1])
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"content-length:")
            )
            await reader.readexactly(length)

    async def main() -> None:
        sent: asyncio.Queue[None] = asyncio.Queue()
        tasks = [asyncio.ensure_future(one(sent)) for _ in range(count)]
        for _ in range(count):
            await sent.get()
        ready.set()
        await asyncio.gather(*tasks)

    asyncio.run(main())


def bench_waiting(plan: Any, url: str, keys: Keys) -> dict[str, float]:
    alone = _burn(plan, url, keys)
    with clients.client(url, keys.producer) as c:
        job = clients.expect(c.post("/jobs", json={"type": "noop", "delay_seconds": 3600}), 201)
    context = mp.get_context("fork")
    ready = context.Event()
    holder = context.Process(
        target=_hold_waits, args=(url, keys.producer, job["id"], WAITS, ready), daemon=True
    )
    holder.start()
    try:
        if not ready.wait(60):
            raise RuntimeError("the awaiting requests were not all sent")
        beside = _burn(plan, url, keys)
    finally:
        holder.terminate()
        holder.join(10)
    return {
        "claims_alone": round(alone, 1),
        f"claims_beside_{WAITS}_waits": round(beside, 1),
        "slowdown_pct": round(100 * (1 - beside / alone), 1),
    }
