"""SIGTERM and SIGINT, while workers run: they stop every worker running in the process,
and still reach the handler the process had before (a hosting server's, say).

One handler serves all the workers of the process: installed when the first starts, the
process's own put back when the last ends, whatever order they end in. Signals reach the
main thread only; a worker run elsewhere is stopped by its caller.
"""

from __future__ import annotations

import asyncio
import functools
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

SIGNALS = (signal.SIGTERM, signal.SIGINT)

_stops: list[Callable[[], object]] = []  # one per worker running on the main thread
_before: dict[int, Any] = {}  # the process's handlers, while ours is installed
_raised: list[BaseException] = []  # by those handlers, kept until the workers have stopped


@contextmanager
def stopped_by_signals(stop: Callable[[], object]) -> Iterator[None]:
    """While inside, SIGTERM and SIGINT call ``stop``, then the handler the process had.

    What that handler raises (``sys.exit`` in it, say) is raised once the last worker
    has wound down, not in the middle of its jobs. Python's and asyncio's own SIGINT
    handlers are not called: they would interrupt the program, where the worker stops
    gracefully instead (and returns)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if not _stops:
        _before.update({s: signal.getsignal(s) for s in SIGNALS})
        for signum in SIGNALS:
            signal.signal(signum, _on_signal)
    _stops.append(stop)
    try:
        yield
    finally:
        _stops.remove(stop)
        if not _stops:
            for number, before in _before.items():
                signal.signal(number, signal.SIG_DFL if before is None else before)
            _before.clear()
            if _raised:
                raised = _raised.pop()
                _raised.clear()
                raise raised


def _on_signal(signum: int, frame: FrameType | None) -> None:
    for stop in list(_stops):
        stop()
    before = _before.get(signum)
    if callable(before) and not _interrupts(before):
        try:
            before(signum, frame)
        except BaseException as raised:  # raised again once the workers have stopped
            _raised.append(raised)


def _interrupts(handler: Callable[..., Any]) -> bool:
    """Whether ``handler`` is Python's or ``asyncio.run``'s SIGINT handler (raise
    KeyboardInterrupt; cancel the main task, a partial of a runner's method)."""
    method = handler.func if isinstance(handler, functools.partial) else handler
    return method is signal.default_int_handler or isinstance(
        getattr(method, "__self__", None), asyncio.Runner
    )
