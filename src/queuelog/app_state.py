"""What every request needs, built once by ``create_app``: shared by the API and the dashboard."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated

from fastapi import Path
from starlette.convertors import Convertor, register_url_convertor
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


class IdConvertor(Convertor[int]):
    """``{name:id}`` in a route's path: an id written as the API writes it, digits with
    no leading zero (``010`` names no route: one spelling per job, for proxies' rules and
    caches). Digits too many for any id (int() refuses over 4,300 of them) read as one
    past the largest id, which ``IdPath`` then refuses, instead of failing the request."""

    regex = "0|[1-9][0-9]*"

    def convert(self, value: str) -> int:
        return int(value) if len(value) <= len(str(MAX_ID)) else MAX_ID + 1

    def to_string(self, value: int) -> str:
        return str(value)


register_url_convertor("id", IdConvertor())
