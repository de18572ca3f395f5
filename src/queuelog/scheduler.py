"""Scheduler: the rules of recurring jobs. Knows nothing of HTTP or SQL.

Every node runs ``fire_due`` from its maintenance loop; the storage's guarded
advance decides which node makes each fire's job, so no node leads. A schedule's
jobs pass the same intake as a producer's (type, payload limit and schema), as the
producer ``schedule:<name>``.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from queuelog.clock import Clock
from queuelog.config import ScheduleConfig, Settings
from queuelog.errors import (
    InvalidState,
    NotFound,
    QueueError,
    StorageUnavailable,
    ValidationFailed,
    quoted,
)
from queuelog.intake import Intake
from queuelog.models import ApiKey, Job, Priority, Role
from queuelog.schedules import (
    Cadence,
    CadenceError,
    Schedule,
    ScheduleSpec,
    principal_of,
    schedule_name_error,
)
from queuelog.specs import EnqueueSpec
from queuelog.storage.protocol import (
    FireOutcome,
    NewJob,
    NewSchedule,
    ScheduleFire,
    ScheduleSwitch,
    Storage,
)

log = logging.getLogger("queuelog.schedules")

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# How late a pass may be and still make each fire time since the node's previous pass:
# a busy loop's delay, not downtime.
_LATE_SWEEPS = 3
# The fires of one schedule a pass makes at most (a long sweep interval and a schedule
# every second).
_FIRES_PER_PASS = 100
_SAME_FILE = "run the same config file on every node"
# How often a resume reads its schedule again when other requests keep changing it.
_RESUME_READS = 5
_CHANGING = "The schedule kept changing while it was resumed; send the resume again"


class ScheduleIntake:
    """What a schedule may be: its cadence, and jobs the intake accepts from it."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._intake = Intake(settings)

    def spec(self, name: str, fields: ScheduleConfig, now: datetime) -> ScheduleSpec:
        """The schedule ``fields`` describe, or the 422 that says why it cannot fire."""
        try:
            cadence = fields.cadence()
            cadence.next_after(now)  # it fires: a cron may match only times that never are
        except CadenceError as exc:
            raise _refused(exc) from exc
        spec = ScheduleSpec(
            name=name,
            cadence=cadence,
            type=fields.type,
            payload=fields.payload,
            priority=Priority.from_label(fields.priority),
            overlap=fields.overlap,
        )
        self.job(spec, now)  # its jobs must pass the intake
        return spec

    def job(self, spec: ScheduleSpec, now: datetime) -> NewJob:
        """The job a fire of ``spec`` makes now; a QueueError if the intake refuses it."""
        producer = ApiKey(
            id=0,
            name=principal_of(spec.name),
            roles=frozenset({Role.PRODUCER}),
            max_priority=Priority.CRITICAL,
            types=None,
            key_hash="",
            prefix="",
            created_at=_EPOCH,
        )
        enqueue = EnqueueSpec(type=spec.type, payload=spec.payload, priority=spec.priority)
        return self._intake.new_job(producer, enqueue, now, None)

    def config_schedules(self, now: datetime) -> list[NewSchedule]:
        """The config file's schedules to store; a QueueError naming the first that cannot
        fire (its payload refused by its type's schema or the payload limit)."""
        schedules = []
        for name, fields in self.settings.schedules.items():
            try:
                spec = self.spec(name, fields, now)
            except QueueError as exc:
                cadence = exc.__cause__  # said as the config's own errors are: NAME.cron: ...
                where = f".{cadence}" if isinstance(cadence, CadenceError) else f": {exc.detail}"
                exc.detail = f"schedules.{name}{where}"
                raise
            schedules.append(NewSchedule(spec, "config", spec.cadence.next_after(now)))
        return schedules


def _refused(exc: CadenceError) -> ValidationFailed:
    """The 422 for a cadence that cannot fire, naming its field."""
    return ValidationFailed(str(exc), errors=[{"loc": ["body", exc.field], "msg": exc.message}])


class Scheduler:
    def __init__(
        self,
        storage: Storage,
        settings: Settings,
        clock: Clock,
        on_ready: Callable[[], None] | None = None,
    ) -> None:
        self.storage = storage
        self.settings = settings
        self.clock = clock
        self._on_ready = on_ready or (lambda: None)
        self.intake = ScheduleIntake(settings)
        # This node's previous look for due fires; before the first, when it started.
        self._last_pass: datetime = clock.now()

    def spec(self, name: str, fields: ScheduleConfig) -> ScheduleSpec:
        """The schedule ``fields`` describe (an API call's), or the 422 that says why not."""
        return self.intake.spec(name, fields, self.clock.now())

    async def sync_config(self) -> None:
        """Create or update the config file's schedules (their pause state is kept); say
        what that overrode: the file is the truth for its names, but nodes started with
        different files would otherwise undo each other's schedules without a word."""
        now = self.clock.now()
        synced = await self.storage.schedule_sync_config(self.intake.config_schedules(now), now)
        replaces = (
            "from the config file replaces the schedule of that name made through the API "
            "(POST /schedules); its pause state is kept, and its next run unless its cadence "
            "changed"
        )
        differs = (
            "from the config file differs from the one stored (another node's file, or this "
            f"node's before it changed): stored as this file has it; {_SAME_FILE}"
        )
        missing = (
            "is not in this config file: deleted (another node's file, or this node's before "
            f"it changed, had it); {_SAME_FILE}"
        )
        said = [(synced.replaced, replaces), (synced.changed, differs), (synced.removed, missing)]
        for names, what in said:
            for name in names:
                log.warning("schedule %s %s", quoted(name), what)

    # -- the API's verbs ---------------------------------------------------------

    async def create(self, spec: ScheduleSpec) -> Schedule:
        now = self.clock.now()
        new = NewSchedule(spec, "api", spec.cadence.next_after(now))
        created = await self.storage.schedule_insert(new, now)
        if created is None:
            raise InvalidState(f"A schedule named {quoted(spec.name)} exists")
        return created

    async def list(self) -> list[Schedule]:
        return [self._as_of_now(s) for s in await self.storage.schedule_list()]

    async def get(self, name: str) -> Schedule:
        schedule = await self.storage.schedule_get(_could_be(name))
        if schedule is None:
            raise NotFound("No such schedule")
        return self._as_of_now(schedule)

    def _as_of_now(self, schedule: Schedule) -> Schedule:
        """A paused schedule's next run is the one a resume now would give it: the time
        it stored may have passed while it was paused, and missed fires are not made up."""
        now = self.clock.now()
        if not schedule.paused or schedule.next_run_at > now:
            return schedule
        try:
            return dataclasses.replace(schedule, next_run_at=_resumed_at(schedule, now))
        except CadenceError:  # the time zone's rules changed since: as stored, a resume says why
            return schedule

    async def delete(self, name: str) -> None:
        await self.storage.schedule_delete(_could_be(name))

    async def pause(self, name: str) -> Schedule:
        """Pause: no fire after now makes a job. A pass of the due fires (every
        schedule's, as the sweeper's) runs first: a fire that came before the pause and
        that no pass made yet (one may come a sweep interval late) is made."""
        if (await self.storage.schedule_get(_could_be(name))) is None:
            raise NotFound("No such schedule")
        await self.fire_due()
        paused = await self.storage.schedule_set_paused(
            ScheduleSwitch(name, paused=True, now=self.clock.now())
        )
        assert paused is not None  # only a write that names what it read is refused
        return paused

    async def resume(self, name: str) -> Schedule:
        """Resume from the next fire time: fires missed while paused are not made up. A
        schedule not paused keeps its own (storage also leaves it as it is, should a
        pause and this resume cross). The next fire is worked out from the schedule as
        read, so it is written only if no other request changed the schedule since: one
        that resumed, fired and paused it meanwhile may have made that fire already.
        Else the schedule is read again."""
        for _ in range(_RESUME_READS):
            schedule = await self.get(name)
            if not schedule.paused:
                return schedule
            now = self.clock.now()
            try:
                next_run_at = _resumed_at(schedule, now)
            except CadenceError as exc:  # the time zone's rules changed since it was made
                raise _refused(exc) from None
            switch = ScheduleSwitch(name, False, now, next_run_at, seen=schedule.updated_at)
            resumed = await self.storage.schedule_set_paused(switch)
            if resumed is not None:
                return resumed
        # Counted as the stores count a write that lost to others on each try.
        raise self.storage.health.contended(StorageUnavailable(_CHANGING, reason="contention"))

    async def trigger(self, name: str) -> Job:
        """A job made now, whatever the pause and overlap: an explicit act."""
        schedule = await self.get(name)
        job = await self.storage.schedule_trigger(
            name, self.intake.job(schedule.spec, self.clock.now())
        )
        self._on_ready()
        return job

    # -- firing ------------------------------------------------------------------

    async def fire_due(self) -> dict[FireOutcome, int]:
        """Fire every due schedule; how many fires ended each way on this node.

        A schedule some node has been firing (its next fire at most ``_LATE_SWEEPS``
        sweep intervals old) makes a job for each fire time that has come: a pass may
        come late (a busy loop), and a node that just started passes beside others. One
        that no node fired for longer (the cluster down, a process suspended, the
        database out of reach) makes one job for the latest fire time it missed (before
        this node's previous pass, or its start), then one for each later.
        """
        now = self.clock.now()
        late = self._late(now)
        # (A clock set back makes the previous pass seem later than now: taken as now.)
        since = min(max(self._last_pass, late), now)
        self._last_pass = now
        outcomes = dict.fromkeys(FireOutcome, 0)
        for schedule in await self.storage.schedule_due(now):
            try:
                missed = schedule.next_run_at < late
                await self._fire(schedule, now, since if missed else None, outcomes)
            except StorageUnavailable as refused:
                # A fault is logged once, when it begins (storage/health.py), not with
                # each fire; what is no fault (contention, one row's lock) is said here.
                # The next schedules still fire: the refusal may be this one's alone.
                if self.storage.health.writable:
                    log.warning("schedule %s: the fire was refused: %s", schedule.name, refused)
            except Exception:  # one broken schedule must not keep the others from firing
                log.exception("schedule %s: the fire failed", schedule.name)
        if outcomes[FireOutcome.MADE]:
            self._on_ready()
        return outcomes

    def _late(self, now: datetime) -> datetime:
        """A fire due before this was made by no node that could: every node's pass
        would have come since."""
        return now - timedelta(seconds=_LATE_SWEEPS * self.settings.sweep_interval_seconds)

    async def _fire(
        self,
        schedule: Schedule,
        now: datetime,
        missed_until: datetime | None,
        outcomes: dict[FireOutcome, int],
    ) -> None:
        """Make the fires of ``schedule`` that have come, counting each in ``outcomes``:
        one for all those at or before ``missed_until`` (the latest of them), then each
        after it, up to ``_FIRES_PER_PASS`` (the next pass makes the rest)."""
        cadence: Cadence = schedule.spec.cadence
        due = schedule.next_run_at
        fire_at = (
            due if missed_until is None else max(cadence.latest_at_or_before(missed_until), due)
        )
        skipped, refused = 0, None
        for _ in range(_FIRES_PER_PASS):
            if fire_at > now:
                break
            next_at = cadence.next_after(fire_at)
            outcome, refused = await self._fire_one(schedule, due, fire_at, next_at, now)
            outcomes[outcome] += 1
            skipped += outcome is FireOutcome.SKIPPED
            # Another node fires it (or it was paused or deleted); or its intake refuses
            # its jobs, every fire's alike.
            if outcome is FireOutcome.TAKEN or refused is not None:
                break
            due = fire_at = next_at
        if skipped:  # said by the node that took the fires only, once a pass
            _log_skipped(schedule.name, skipped, refused)

    async def _fire_one(
        self, schedule: Schedule, due: datetime, fire_at: datetime, next_at: datetime, now: datetime
    ) -> tuple[FireOutcome, str | None]:
        """Make the job of the fire at ``fire_at``, if the schedule's next fire is still
        ``due`` (no other node took it); the schedule then fires next at ``next_at``.
        The outcome, and why the intake refused the job (if it did)."""
        job: NewJob | None = None
        refused: str | None = None
        try:
            job = dataclasses.replace(self.intake.job(schedule.spec, now), run_at=fire_at)
        except QueueError as exc:  # its type left the config, or its schema changed
            refused = exc.detail
            if due >= self._late(now):
                # Another node's config may take the job (a rolling change of the config
                # file reaches the nodes one by one): the fire is theirs, until it is late.
                return FireOutcome.TAKEN, refused
        fire = ScheduleFire(
            name=schedule.name, due=due, fire_at=fire_at, next_run_at=next_at, job=job, now=now
        )
        outcome, _ = await self.storage.schedule_fire(fire)
        return outcome, refused


def _resumed_at(schedule: Schedule, now: datetime) -> datetime:
    """Where a resume at ``now`` takes ``schedule``: its next fire after now, or after its
    last fire if that is later (this node's clock may be behind the one that made it),
    so that no fire time makes a second job."""
    last = schedule.last_run_at
    return schedule.spec.cadence.next_after(now if last is None else max(now, last))


def _log_skipped(name: str, skipped: int, refused: str | None) -> None:
    if refused is not None:
        log.warning("schedule %s: no job made, fire skipped: %s", name, refused)
    else:
        fires = "fire" if skipped == 1 else f"{skipped} fires"
        log.info("schedule %s: %s skipped, its last job is still active", name, fires)


def _could_be(name: str) -> str:
    """``name``, if a schedule could have it; else there is no such schedule (a name no
    schedule could have, such as one with a NUL, which PostgreSQL's text cannot hold, is
    not looked for)."""
    if schedule_name_error(name) is not None:
        raise NotFound("No such schedule")
    return name
