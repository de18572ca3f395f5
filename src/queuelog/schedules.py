"""When a schedule fires: its cadence (five-field cron in a time zone, or a fixed
interval) and the fire times it gives. Pure: no I/O, no clock of its own.

Cron fields are matched by cronsim on wall-clock times, which are then placed in
the schedule's time zone by these rules: a wall time that does not exist (the hour
skipped when clocks go forward) is skipped; a wall time that happens twice (the
hour repeated when clocks go back) fires once, at its first occurrence. Every node
computes the same fire times from the same schedule.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from cronsim import CronSim, CronSimError

from queuelog.clock import from_micros, to_micros
from queuelog.errors import quoted
from queuelog.models import JsonObject, Priority

# A schedule's name: it also names its jobs' principal, ``schedule:<name>``.
SCHEDULE_NAME = re.compile(r"[a-z0-9_.-]{1,64}")
# Its routes' path segment too (/schedules/NAME), where clients and browsers resolve
# these two to the folder or its parent before sending: nothing could reach it.
_DOT_SEGMENTS = frozenset({".", ".."})
# Both rules as one pattern for the published schema, so that what a client checks
# before sending is what is refused. Alternatives, not a look-ahead, which not every
# JSON Schema reader or test generator follows: a first character that is not a dot,
# a dot then one that is not, or two dots then at least one more character.
PUBLISHED_SCHEDULE_NAME = (
    r"^(?:[a-z0-9_-][a-z0-9_.-]{0,63}|\.[a-z0-9_-][a-z0-9_.-]{0,62}|\.\.[a-z0-9_.-]{1,62})$"
)


def schedule_name_error(name: str) -> str | None:
    """Why ``name`` cannot name a schedule; None when it can."""
    if not SCHEDULE_NAME.fullmatch(name):
        return "a schedule name is 1-64 of a-z 0-9 _ . -"
    if name in _DOT_SEGMENTS:
        return "a schedule name is not . or .. (its routes could not be reached)"
    return None


PRINCIPAL_PREFIX = "schedule:"
# Wall-clock matches looked at for one fire time: a match is passed over only when it
# falls in a skipped or repeated span of wall time (an hour or two when clocks change),
# so this covers four hours of a cron firing every minute. A cron whose every match
# falls in such spans (02:30 on the day clocks go forward at 02:00) matches no time:
# found within this many matches, not by a walk to the calendar's end.
_MATCHES_LOOKED_AT = 250


_NO_TIME = "matches no time that exists in its time zone"


class CadenceError(ValueError):
    """A cadence that cannot fire: the message names the bad field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def principal_of(name: str) -> str:
    """The principal that a schedule's jobs belong to."""
    return PRINCIPAL_PREFIX + name


@dataclass(frozen=True, slots=True)
class Cadence:
    """Either ``cron`` (five fields, read in ``timezone``) or ``every_seconds`` (a grid
    of multiples of the interval since the Unix epoch, whatever the time zone)."""

    cron: str | None
    every_seconds: int | None
    timezone: str = "UTC"

    @classmethod
    def parse(cls, cron: str | None, every_seconds: int | None, timezone: str) -> Cadence:
        """A checked cadence, or CadenceError naming the field that is wrong."""
        if (cron is None) == (every_seconds is None):
            raise CadenceError("cron", "give either cron or every_seconds, not both or neither")
        zone(timezone)
        if every_seconds is not None:
            if every_seconds < 1:
                raise CadenceError("every_seconds", "must be at least 1")
            return cls(None, every_seconds, timezone)
        assert cron is not None
        if len(cron.split()) != 5:
            raise CadenceError("cron", "must have five fields: minute hour day month weekday")
        try:
            CronSim(cron, datetime(2000, 1, 1))
        except CronSimError as exc:
            raise CadenceError("cron", f"not a valid cron expression ({exc})") from None
        return cls(" ".join(cron.split()), None, timezone)

    def next_after(self, after: datetime) -> datetime:
        """The first fire time strictly after ``after`` (UTC)."""
        if self.every_seconds is not None:
            step = self.every_seconds * 1_000_000
            return from_micros((to_micros(after) // step + 1) * step)
        tz = zone(self.timezone)
        wall = after.astimezone(tz).replace(tzinfo=None)
        for candidate in self._matches(CronSim(self._cron, wall)):
            at = _placed(candidate, tz)
            if at is not None and at > after:
                return at
        raise CadenceError("cron", _NO_TIME)

    def latest_at_or_before(self, at: datetime) -> datetime:
        """The last fire time at or before ``at`` (UTC): the one a late fire makes up."""
        if self.every_seconds is not None:
            step = self.every_seconds * 1_000_000
            return from_micros(to_micros(at) // step * step)
        tz = zone(self.timezone)
        wall = at.astimezone(tz).replace(tzinfo=None)
        # In a repeated hour's second pass the clock has already shown later wall times,
        # whose first occurrence came before ``at``: the walk starts from the latest shown
        # (``at`` read at the earlier offset). cronsim's reverse walk starts strictly
        # before its start: a microsecond on.
        shown = wall + (at - wall.replace(tzinfo=tz, fold=0).astimezone(UTC))
        start = shown + timedelta(microseconds=1)
        for candidate in self._matches(CronSim(self._cron, start, reverse=True)):
            placed = _placed(candidate, tz)
            if placed is not None and placed <= at:
                return placed
        raise CadenceError("cron", _NO_TIME)

    @property
    def _cron(self) -> str:
        assert self.cron is not None
        return self.cron

    @staticmethod
    def _matches(walk: CronSim) -> Iterator[datetime]:
        for _ in range(_MATCHES_LOOKED_AT):
            try:
                yield next(walk)
            except (StopIteration, OverflowError):  # the calendar's end (year 1 or 9999)
                return


# The zones a schedule may name: what the OpenAPI description lists, exactly. A name is
# looked up only once known, since ZoneInfo reads it as a path to a file. Not
# ``localtime`` (whatever each host is set to: nodes would disagree on fire times) nor
# ``Factory`` (a placeholder of the database, no place's time).
ZONES = frozenset(available_timezones()) - {"localtime", "Factory"}


def zone(name: str) -> ZoneInfo:
    """The IANA time zone ``name``, or CadenceError."""
    if name not in ZONES:
        raise CadenceError("timezone", f"unknown time zone {quoted(name[:100])}")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise CadenceError("timezone", f"unknown time zone {quoted(name[:100])}") from None


def _placed(wall: datetime, tz: ZoneInfo) -> datetime | None:
    """The UTC instant of the wall time ``wall`` in ``tz``: its first occurrence when it
    happens twice, None when it does not exist."""
    first = wall.replace(tzinfo=tz, fold=0)
    instant = first.astimezone(UTC)
    if instant.astimezone(tz).replace(tzinfo=None) != wall:
        return None  # skipped when the clocks went forward
    return instant


@dataclass(frozen=True, slots=True)
class ScheduleSpec:
    """A schedule as the config file or an API call gives it, checked for shape."""

    name: str
    cadence: Cadence
    type: str
    payload: JsonObject = field(default_factory=dict)
    priority: Priority = Priority.LOW
    overlap: bool = True


@dataclass(frozen=True, slots=True)
class ConfigSync:
    """What storing a config file's schedules changed in the database: every node stores
    its own file's as it starts, so nodes run with different files (or one restarted on
    an older one) show here."""

    replaced: tuple[str, ...] = ()  # the API's schedules a config one of their name took over
    changed: tuple[str, ...] = ()  # config schedules stored otherwise than this file has them
    removed: tuple[str, ...] = ()  # config schedules this file does not have (deleted)


@dataclass(frozen=True, slots=True)
class Schedule:
    """A schedule as stored: its spec, where it came from, and how it has fired."""

    spec: ScheduleSpec
    source: str  # "config" or "api"
    paused: bool
    next_run_at: datetime
    last_run_at: datetime | None
    last_job_id: int | None
    jobs_made: int
    fires_skipped: int
    created_at: datetime
    updated_at: datetime

    @property
    def name(self) -> str:
        return self.spec.name
