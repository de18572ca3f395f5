"""SIGTERM and SIGINT, while a worker runs: they stop it, and still reach whatever
handler the process had before (an application's own, or another worker's)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextmanager
def stopped_by_signals(on_signal: Callable[[], object]) -> Iterator[None]:
    """While inside, SIGTERM and SIGINT call ``on_signal``, then the handler the process
    had (a server's that hosts the worker, a second worker's), which is put back after.
    Python's default for SIGINT (raising KeyboardInterrupt) is not called: the worker
    winds down instead. Signals reach the main thread only; elsewhere this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    serving = True

    def handle(signum: int, frame: FrameType | None) -> None:
        if serving:
            on_signal()
        before = previous[signum]
        if callable(before) and before is not signal.default_int_handler:
            before(signum, frame)

    previous: dict[int, Any] = {s: signal.signal(s, handle) for s in SIGNALS}
    try:
        yield
    finally:
        serving = False
        for signum, before in previous.items():
            # A handler set since, which calls this one in turn, is left in place.
            if signal.getsignal(signum) is handle:
                signal.signal(signum, signal.SIG_DFL if before is None else before)
