"""What every request needs, built once by ``create_app``: shared by the API and the dashboard."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

from fastapi import Path
from starlette.requests import Request

from queuelog.auth import KeyRing, RateLimiter
from queuelog.config import Settings
from queuelog.models import MAX_ID
from queuelog.scheduler import Scheduler
from queuelog.service import JobService
from queuelog.wakeup import Finishes, Wakeup

if TYPE_CHECKING:  # the dashboard's package imports this module
    from queuelog.dashboard.throughput import Throughput


@dataclass
class AppState:
    """The service, the key ring, the rate limiter, the claimers' wake-ups, the
    result requests' wake-ups and the overview's chart of one app."""

    settings: Settings
    service: JobService
    keys: KeyRing
    limiter: RateLimiter
    wakeup: Wakeup
    finishes: Finishes
    schedules: Scheduler
    chart: Throughput

    def close_waits(self) -> None:
        """Shutdown: every long poll (claims, results) answers at once."""
        self.wakeup.close()
        self.finishes.close()


def state_of(request: Request) -> AppState:
    state: AppState = request.app.state.queuelog
    return state


# A job's or a key's id in a path: a positive 64-bit integer, else 422 (404 on the dashboard).
IdPath = Annotated[int, Path(ge=1, le=MAX_ID)]
