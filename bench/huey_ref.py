"""The reference: Huey's SqliteStorage with fsync, on the same workload, in the same run.

Huey is a library, not a server: its producers and its consumer's worker
threads call the storage directly. This runs them as Huey's thread consumer
does (``dequeue`` then ``execute`` in each worker thread), in one child process.
"""

from __future__ import annotations

import multiprocessing as mp
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.clients import PAYLOAD


def _open(path: Path) -> tuple[Any, Callable[..., Any]]:
    from huey import SqliteHuey

    huey = SqliteHuey("bench", filename=str(path), fsync=True)

    @huey.task()
    def noop(payload: dict[str, Any]) -> None:
        return None

    return huey, noop


def _threads(target: Callable[[], int], n: int) -> tuple[int, float]:
    counts: list[int] = []
    lock = threading.Lock()

    def body() -> None:
        done = target()
        with lock:
            counts.append(done)

    threads = [threading.Thread(target=body) for _ in range(n)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts), time.monotonic() - started


def _worker(huey: Any, deadline: float, stop_when_empty: bool) -> int:
    done = 0
    while time.monotonic() < deadline:
        task = huey.dequeue()
        if task is None:
            if stop_when_empty:
                break
            time.sleep(0.001)
            continue
        huey.execute(task)
        done += 1
    return done


def _enqueue(noop: Callable[..., Any], jobs: int, threads: int) -> float:
    """Jobs per second of ``jobs`` enqueued one per call from ``threads`` threads."""
    share = jobs // threads

    def enqueue() -> int:
        for _ in range(share):
            noop(PAYLOAD)
        return share

    enqueued, took = _threads(enqueue, threads)
    return enqueued / took


def _measure(
    workdir: Path, jobs: int, seconds: float, threads: int, one_by_one: int
) -> dict[str, float]:
    huey, noop = _open(workdir / "huey.db")
    deadline = time.monotonic() + 60
    result = {"enqueue_single": _enqueue(noop, jobs, threads)}
    # The users' shapes: one producer thread, then a pool of 16 (drained by the burn-down).
    result["enqueue_one"] = _enqueue(noop, one_by_one, 1)
    result["enqueue_16"] = _enqueue(noop, one_by_one, 16)
    drained, took = _threads(lambda: _worker(huey, deadline, True), threads)
    result["burn_down"] = drained / took
    result["steady"] = _steady(huey, noop, seconds, threads)
    return result


def _steady(huey: Any, noop: Callable[..., Any], seconds: float, threads: int) -> float:
    stop = time.monotonic() + seconds

    def produce() -> None:
        while time.monotonic() < stop:
            noop(PAYLOAD)

    producer = threading.Thread(target=produce)
    producer.start()
    done, took = _threads(lambda: _worker(huey, stop, False), threads)
    producer.join()
    return done / took


def _child(workdir: Path, jobs: int, seconds: float, threads: int, one: int, out: Any) -> None:
    try:
        out.put(_measure(workdir, jobs, seconds, threads, one))
    except Exception as exc:
        out.put(RuntimeError(repr(exc)))


def huey_reference(
    workdir: Path, jobs: int, seconds: float, one_by_one: int, threads: int = 4
) -> dict[str, float]:
    """Huey's jobs per second: enqueue one by one (from ``threads`` threads, then
    ``one_by_one`` jobs from one thread and from 16), burn-down, steady state."""
    workdir.mkdir(parents=True, exist_ok=True)
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    proc = ctx.Process(target=_child, args=(workdir, jobs, seconds, threads, one_by_one, out))
    proc.start()
    try:
        result = out.get(timeout=150)
    finally:
        proc.join(timeout=10)
        if proc.is_alive():
            proc.terminate()
    if isinstance(result, Exception):
        raise result
    assert isinstance(result, dict)
    return result
