"""Flow control as the service sees it: the configured limits, pauses, and what they
held back. The limits are enforced by the storage's claim (storage/flow.py)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from queuelog.clock import Clock
from queuelog.config import JobTypeConfig, Settings
from queuelog.errors import NotFound
from queuelog.models import ApiKey, FlowLimits, JobStatus, TypeEvent, TypePause
from queuelog.storage.protocol import ClaimParams, Storage

# The counts GET /types gives per type.
COUNTED = ("pending", "waiting", "running", "failed")


class OnReady(Protocol):
    """Called once jobs may have become ready: of ``types`` (None: of any), at most
    ``ready`` of them (None: no count), to wake as many long polls as may take them."""

    def __call__(self, types: Collection[str] | None = None, ready: int | None = None) -> None: ...


@dataclass(frozen=True, slots=True)
class TypeState:
    """A configured job type: its limits, whether it is paused, its jobs by status."""

    name: str
    config: JobTypeConfig
    pause: TypePause | None
    counts: dict[str, int]


def _limits(cfg: JobTypeConfig) -> FlowLimits:
    rate = cfg.rate_limit
    return FlowLimits(
        concurrency=cfg.concurrency,
        group_concurrency=cfg.group_concurrency,
        rate_jobs=rate.jobs if rate else None,
        rate_per_seconds=rate.per_seconds if rate else None,
    )


class FlowControl:
    def __init__(
        self, storage: Storage, settings: Settings, clock: Clock, on_ready: OnReady
    ) -> None:
        self.storage = storage
        self.settings = settings
        self.clock = clock
        self._on_ready = on_ready
        self.limits = {name: _limits(cfg) for name, cfg in settings.types.items() if cfg.limited}
        self.configured = tuple(sorted(settings.types))
        # (type, reason) -> claims in which that limit held back a ready job.
        self.skipped: Counter[tuple[str, str]] = Counter()
        # Claims run against the storage (each look of a long poll), by whether they found
        # jobs: empty ones are the cost of waiting.
        self.claims: Counter[bool] = Counter()
        # The types whose running jobs hold slots: their end may let a waiting claim in.
        self.slot_types = frozenset(
            name
            for name, lim in self.limits.items()
            if lim.concurrency is not None or lim.group_concurrency is not None
        )

    def claimed(self, params: ClaimParams, found: int) -> None:
        """Count a claim that ran against the storage and the limits that held jobs back."""
        self.skipped.update(params.skipped)
        self.claims[found > 0] += 1

    def slots_freed(self) -> None:
        """A running job ended: a claim waiting on a concurrency limit may now succeed."""
        if self.slot_types:
            self._on_ready()

    async def windows_open(self, types: Sequence[str], now: datetime) -> list[datetime]:
        """When the full rate windows of ``types`` next have room."""
        times = []
        for name, limits in self.limits.items():
            if limits.rate_jobs is None or name not in types:
                continue
            opens = await self.storage.type_window_opens(name, now, limits)
            if opens is not None:
                times.append(opens)
        return times

    async def list_types(self) -> list[TypeState]:
        """Every configured type, by name."""
        pauses = {p.type: p for p in await self.storage.type_pauses()}
        counts = (await self.storage.job_stats(self.clock.now())).counts
        return [
            TypeState(
                name,
                cfg,
                pauses.get(name),
                {s: counts.get((s, name), 0) for s in COUNTED},
            )
            for name, cfg in sorted(self.settings.types.items())
        ]

    async def get_type(self, name: str) -> TypeState:
        for state in await self.list_types():
            if state.name == name:
                return state
        raise NotFound("No such job type")

    async def set_paused(self, caller: ApiKey, name: str, paused: bool) -> TypeState:
        """Pause or resume a configured type (the caller is an admin); its entry after."""
        if self.settings.job_type(name) is None:
            raise NotFound("No such job type")
        await self.storage.type_set_paused(name, paused, caller.name, self.clock.now())
        if not paused:
            self._on_ready()
        return await self.get_type(name)

    async def events(self, name: str) -> list[TypeEvent]:
        """What admins did to a configured type, oldest first."""
        if self.settings.job_type(name) is None:
            raise NotFound("No such job type")
        return await self.storage.type_events(name)

    def running_counts(self, counts: dict[tuple[str, str], int]) -> dict[str, int]:
        """Running jobs of every configured type, from the stats' counts."""
        return {name: counts.get((JobStatus.RUNNING.value, name), 0) for name in self.configured}
