"""Run client tasks in separate processes that start together and report back."""

from __future__ import annotations

import multiprocessing as mp
import queue
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

# No client process may run longer than this, whatever its own bounds say.
HARD_TIMEOUT = 150.0


class ClientTask(Protocol):
    def open(self) -> None:
        """Get ready (connections, warm-up); not measured."""

    def run(self) -> tuple[int, dict[str, Any]]:
        """The measured work: (jobs done, anything else to report)."""


@dataclass
class Share:
    """What one client process did between the common start and its own end."""

    count: int
    started: float
    ended: float
    extra: dict[str, Any] = field(default_factory=dict)


def _child(task: ClientTask, barrier: Any, out: Any) -> None:
    try:
        task.open()
        barrier.wait(timeout=60)
        started = time.monotonic()
        count, extra = task.run()
        ended = extra.pop("ended", None) or time.monotonic()  # a task may say when work ended
        out.put(Share(count, started, ended, extra))
    except Exception as exc:  # reported to the parent, which fails the section
        out.put(RuntimeError(f"{type(task).__name__}: {exc!r}"))


def run_parallel(tasks: list[Any]) -> tuple[float, list[Share]]:
    """Run each task in its own process; return (jobs per second over all, shares).

    The rate is the total count over the span from the first start to the last end.
    """
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(len(tasks))
    out = ctx.Queue()
    procs = [ctx.Process(target=_child, args=(task, barrier, out)) for task in tasks]
    for proc in procs:
        proc.start()
    shares: list[Share] = []
    try:
        for _ in procs:
            item = out.get(timeout=HARD_TIMEOUT)
            if isinstance(item, Exception):
                raise item
            shares.append(item)
    except queue.Empty:
        raise RuntimeError("a client process did not report in time") from None
    finally:
        for proc in procs:
            proc.join(timeout=10)
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=5)
    total = sum(s.count for s in shares)
    span = max(s.ended for s in shares) - min(s.started for s in shares)
    return (total / span if span > 0 else 0.0), shares
