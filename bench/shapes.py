"""The users' shapes: how applications use a queue, run the same way for queuelog (through
its SDK) and for pgqueuer.

One producer process enqueues one job per call, sequentially; then the same from 16
threads (or tasks) of one process, a web app's pool; then 4 worker processes with
their defaults burn down every job those left; then one producer enqueues one job per
call while 4 workers keep up (the steady state); last, bulk enqueues of 500 jobs from
2 processes. Each system gives the tasks, ``measure_shapes`` runs the sequence.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from bench.clients import PAYLOAD, acks_counted
from bench.parallel import run_parallel


class Shapes(Protocol):
    """One system's tasks, each run in a process of its own by ``run_parallel``."""

    def enqueue(self, count: int, threads: int) -> Any: ...

    def producer(self, seconds: float) -> Any: ...

    def worker(self, drain: bool, seconds: float, idle: float) -> Any: ...

    def bulk(self, count: int, size: int) -> Any: ...


@dataclass(frozen=True)
class ShapePlan:
    jobs: int  # per enqueue mode; the burn-down takes both modes' jobs
    steady_seconds: float
    bulk_jobs: int
    threads: int = 16
    workers: int = 4
    idle: float = 0.5  # a burn-down's worker takes the queue for drained after this
    bracket: bool = True  # the reference runs before and after queuelog, not only before


def _rate(value: float) -> float:
    return round(value, 1)


def measure_shapes(plan: ShapePlan, system: Shapes) -> dict[str, float]:
    """Jobs per second of each shape, in the order the module's docstring gives."""
    result = {"enqueue_one": _rate(run_parallel([system.enqueue(plan.jobs, 1)])[0])}
    many = system.enqueue(plan.jobs, plan.threads)
    result["enqueue_16"] = _rate(run_parallel([many])[0])
    pending = plan.jobs - plan.jobs % plan.threads + plan.jobs
    burn = [system.worker(True, 90, plan.idle) for _ in range(plan.workers)]
    rate, shares = run_parallel(burn)
    if sum(s.count for s in shares) != pending:
        raise RuntimeError(f"burn-down: {sum(s.count for s in shares)} != {pending} jobs")
    result["burn_down"] = _rate(rate)
    tasks = [system.producer(plan.steady_seconds)]
    tasks += [system.worker(False, plan.steady_seconds, 0) for _ in range(plan.workers)]
    rate, shares = run_parallel(tasks)
    span = max(s.ended for s in shares) - min(s.started for s in shares)
    result["steady"] = _rate(rate)
    result["steady_enqueued"] = _rate(sum(s.extra.get("enqueued", 0) for s in shares) / span)
    result["bulk"] = _rate(run_parallel([system.bulk(plan.bulk_jobs // 2, 500) for _ in "ab"])[0])
    return result


def in_threads(count: int, threads: int, deadline: float, send: Any) -> int:
    """``count`` calls of ``send()`` shared by ``threads`` threads, until ``deadline``;
    the calls made. A thread that failed fails the whole."""
    share = count // threads
    done: list[int] = []

    def loop() -> None:
        n = 0
        while n < share and time.monotonic() < deadline:
            send()
            n += 1
        done.append(n)

    pool = [threading.Thread(target=loop) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    if len(done) != threads:
        raise RuntimeError("an enqueue thread failed")
    return sum(done)


# -- queuelog, through its SDK -------------------------------------------------------


@dataclass
class _Sdk:
    url: str
    key: str
    seconds: float

    def open(self) -> None:
        from queuelog.client import Client

        self.client = Client(self.url, self.key, timeout=30.0)


@dataclass
class SdkEnqueue(_Sdk):
    """``Client.enqueue``, one job per call, from ``threads`` threads sharing one client."""

    count: int = 1000
    threads: int = 1

    def run(self) -> tuple[int, dict[str, Any]]:
        deadline = time.monotonic() + self.seconds
        send = lambda: self.client.enqueue("noop", PAYLOAD)  # noqa: E731
        return in_threads(self.count, self.threads, deadline, send), {}


@dataclass
class SdkProducer(_Sdk):
    """``Client.enqueue``, one job per call, for ``seconds``."""

    def run(self) -> tuple[int, dict[str, Any]]:
        deadline = time.monotonic() + self.seconds
        done = 0
        while time.monotonic() < deadline:
            self.client.enqueue("noop", PAYLOAD)
            done += 1
        return 0, {"enqueued": done}


@dataclass
class SdkBulk(_Sdk):
    """``Client.enqueue_many`` of ``size`` jobs at a time."""

    count: int = 1000
    size: int = 500

    def run(self) -> tuple[int, dict[str, Any]]:
        deadline = time.monotonic() + self.seconds
        jobs = [{"type": "noop", "payload": PAYLOAD} for _ in range(self.size)]
        done = 0
        while done < self.count and time.monotonic() < deadline:
            self.client.enqueue_many(jobs)
            done += self.size
        return done, {}


@dataclass
class SdkWorker(_Sdk):
    """The SDK ``Worker`` with its defaults and a no-op handler, on a thread of this process.

    ``drain``: until no job has come for ``idle`` seconds (a burn-down), its time ending
    when the server answered its last acknowledgement; else for ``seconds`` (the steady
    state), counting what was acknowledged by then. The claim still out at the end is
    not waited for: the process ends, and the server, hearing the hang-up, claims nothing
    for it.
    """

    drain: bool = True
    idle: float = 0.5
    options: dict[str, Any] = field(default_factory=dict)

    def open(self) -> None:
        from queuelog.client import Worker

        task = self
        self.acked, self.acked_at, self.last = 0, 0.0, time.monotonic()
        self.client = acks_counted(self.url, self.key, self)
        self.worker = Worker(**self.options)

        @self.worker.handler("noop")
        def noop(job: Any) -> None:
            task.last = time.monotonic()

    def run(self) -> tuple[int, dict[str, Any]]:
        deadline = time.monotonic() + self.seconds
        self.last = time.monotonic()
        runner = threading.Thread(target=self.worker.run, args=(self.client,), daemon=True)
        runner.start()
        while time.monotonic() < deadline and runner.is_alive():
            if self.drain and time.monotonic() - self.last > self.idle:
                break
            time.sleep(0.01)
        if not self.drain:
            return self.acked, {"ended": time.monotonic()}
        return self.acked, {"ended": self.acked_at} if self.acked else {}


@dataclass
class QueuelogShapes:
    url: str
    producer_key: str
    worker_key: str

    def enqueue(self, count: int, threads: int) -> SdkEnqueue:
        return SdkEnqueue(self.url, self.producer_key, 60, count=count, threads=threads)

    def producer(self, seconds: float) -> SdkProducer:
        return SdkProducer(self.url, self.producer_key, seconds)

    def worker(self, drain: bool, seconds: float, idle: float) -> SdkWorker:
        return SdkWorker(self.url, self.worker_key, seconds, drain=drain, idle=idle)

    def bulk(self, count: int, size: int) -> SdkBulk:
        return SdkBulk(self.url, self.producer_key, 60, count=count, size=size)
