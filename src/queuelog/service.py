"""JobService: the queue's rules. Knows nothing of HTTP or SQL."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta

from queuelog.clock import Clock
from queuelog.config import JobTypeConfig, Settings
from queuelog.errors import Forbidden, NotFound, PayloadTooLarge, QueueError, UnknownJobType, quoted
from queuelog.flow import FlowControl, OnReady
from queuelog.intake import Intake
from queuelog.models import (
    TERMINAL,
    ApiKey,
    Finished,
    Job,
    JobEvent,
    JobStatus,
    JsonObject,
    OnDuplicate,
    QueueStats,
    Role,
)
from queuelog.redrive import Redrive
from queuelog.retry import backoff_seconds
from queuelog.sanitize import sanitize_error
from queuelog.specs import (
    EnqueueSpec,
    FinishSpec,
    decode_cursor,
    encode_cursor,
    held_token,
    holds,
    paged,
    progress_text,
    stored_json,
)
from queuelog.storage.protocol import ClaimParams, FinishParams, HeldParams, JobListParams, Storage
from queuelog.storage.statements import guard_failure
from queuelog.workflows import Workflows

_DEFAULT_TYPE = JobTypeConfig()
# One prune pass deletes at most this many batches (of up to 1,000 jobs per status).
_PRUNE_MAX_BATCHES = 100


def _nobody(types: Collection[str] | None = None, ready: int | None = None) -> None:
    """No long poll to wake (a service without a server)."""


class JobService:
    def __init__(
        self,
        storage: Storage,
        settings: Settings,
        clock: Clock,
        rng: random.Random | None = None,
        on_ready: OnReady | None = None,
        on_finished: Callable[[Iterable[int]], None] | None = None,
    ) -> None:
        """Args:
        storage: the backend.
        settings: limits, job types, retention.
        clock: the source of ``now``.
        rng: randomness for backoff jitter; tests pass a seeded one.
        on_ready: called whenever a job may have become ready (wakes long polls).
        on_finished: called with the ids of jobs just finished (wakes awaiting reads).
        """
        self.storage = storage
        self.settings = settings
        self.clock = clock
        self._rng = rng or random.Random()
        self._on_ready: OnReady = on_ready or _nobody
        self._on_finished = on_finished or (lambda _: None)
        self._intake = Intake(settings)
        self.flow = FlowControl(storage, settings, clock, self._on_ready)
        self.workflows = Workflows(storage, self._owns)
        self.redrive = Redrive(storage, settings, clock, self._on_ready)

    # -- producers ---------------------------------------------------------

    async def enqueue_many(
        self, caller: ApiKey, specs: Sequence[EnqueueSpec], batch: bool = False
    ) -> list[tuple[Job, bool]]:
        """Enqueue all or nothing; ``(job, created)`` per spec, in order."""
        now = self.clock.now()
        new_jobs = [
            self._intake.new_job(caller, spec, now, index if batch else None)
            for index, spec in enumerate(specs)
        ]
        await self.workflows.check(caller, specs, batch)
        try:
            results = await self.storage.job_insert_many(new_jobs, now)
        except QueueError as exc:
            if not batch:  # a single enqueue's refusal names no ``index``; a batch's does
                exc.extra.pop("index", None)
            raise
        # Items that met one job (a unique key's) answer with it as the last of them left
        # it, not each as it was at its own turn.
        last = {job.id: job for job, _ in results}
        # Per type, as many claims as jobs made pending (a replace may have moved one's
        # run_at to now): counted together, one type's claims took another's wake-ups.
        replacing = any(s.unique_key and s.on_duplicate is OnDuplicate.REPLACE for s in specs)
        made = {job.id for job, created in results if created or replacing}
        pending = Counter(last[i].type for i in made if last[i].status is JobStatus.PENDING)
        for job_type, count in sorted(pending.items()):
            self._on_ready({job_type}, count)
        return [(last[job.id], created) for job, created in results]

    async def enqueue(self, caller: ApiKey, spec: EnqueueSpec) -> tuple[Job, bool]:
        """``enqueue_many`` of one job."""
        ((job, created),) = await self.enqueue_many(caller, [spec])
        return job, created

    async def cancel(self, caller: ApiKey, job_id: int) -> Job:
        job = await self.get(caller, job_id)
        if not self._owns(caller, job):
            raise NotFound("No such job")
        cancelled = await self.storage.job_cancel(job_id, caller.name, self.clock.now())
        self._on_finished([cancelled.id])
        return cancelled

    # -- reading -----------------------------------------------------------

    def _owns(self, caller: ApiKey, job: Job) -> bool:
        """Whether ``caller`` sees ``job`` for good: it enqueued it, or it is an admin."""
        if caller.has(Role.ADMIN):
            return True
        return caller.has(Role.PRODUCER) and job.principal == caller.name

    def _visible(self, caller: ApiKey, job: Job) -> bool:
        """Whether ``caller`` sees ``job`` now: it owns it, or holds it as a worker."""
        if self._owns(caller, job):
            return True
        return (
            caller.has(Role.WORKER)
            and job.status == JobStatus.RUNNING
            and job.claimed_by == caller.name
        )

    async def get(self, caller: ApiKey, job_id: int) -> Job:
        job = await self.storage.job_get(job_id)
        if job is None or not self._visible(caller, job):
            raise NotFound("No such job")
        return job

    async def events(
        self, caller: ApiKey, job_id: int, limit: int, cursor: str | None = None
    ) -> tuple[list[JobEvent], str | None]:
        """A page of a job's history, oldest first, after the event ``cursor`` names."""
        await self.get(caller, job_id)
        after = decode_cursor(cursor) if cursor else 0
        return paged(await self.storage.job_events(job_id, after, limit + 1), limit)

    async def dependencies(self, caller: ApiKey, job_id: int) -> list[Job]:
        """A job's dependencies, for whoever sees the job (the worker holding it too)."""
        return await self.workflows.dependencies(await self.get(caller, job_id))

    async def list_jobs(
        self,
        caller: ApiKey,
        limit: int,
        cursor: str | None = None,
        status: JobStatus | None = None,
        job_type: str | None = None,
        idempotency_key: str | None = None,
        depends_on: int | None = None,
    ) -> tuple[list[Job], str | None]:
        """Newest first (with ``depends_on``: only that job's dependents), up to ``limit``
        jobs and fewer where their size ends the page; the cursor is opaque to clients."""
        admin = caller.has(Role.ADMIN)
        params = JobListParams(
            limit=limit,
            before_id=decode_cursor(cursor) if cursor else None,
            status=status,
            type=job_type,
            principal=None if admin or not caller.has(Role.PRODUCER) else caller.name,
            holder=None if admin or not caller.has(Role.WORKER) else caller.name,
            idempotency_key=idempotency_key,
            depends_on=depends_on,
        )
        if not admin and params.principal is None and params.holder is None:
            return [], None
        page = await self.storage.job_list(params)
        return page.jobs, encode_cursor(page.jobs[-1].id) if page.more else None

    async def stats(self) -> QueueStats:
        """Jobs by status and type: every status of every configured type (and of any
        type that has jobs), zero too, so that a count that falls to zero reads 0 in
        /stats and /metrics instead of vanishing (a gap on a dashboard)."""
        found = await self.storage.job_stats(self.clock.now())
        types = sorted({job_type for _, job_type in found.counts} | set(self.flow.configured))
        every = [(status.value, job_type) for job_type in types for status in JobStatus]
        return replace(found, counts={key: found.counts.get(key, 0) for key in every})

    # -- workers -----------------------------------------------------------

    async def claim(
        self,
        caller: ApiKey,
        types: Sequence[str] | None = None,
        limit: int = 1,
        lease_seconds: int | None = None,
        instance: str | None = None,
    ) -> list[Job]:
        """Atomically hand up to ``limit`` ready jobs to this worker."""
        types = self.claimable_types(caller, types)
        now = self.clock.now()
        params = ClaimParams(
            worker_name=caller.name,
            worker_id=f"{caller.name}/{instance}" if instance else caller.name,
            limit=limit,
            now=now,
            types=types,
            lease_seconds=lease_seconds,
            retry_at=lambda job: self._retry_at(job, now),
            limits=self.flow.limits,
            clock=self.clock.now,
        )
        jobs = await self.storage.job_claim(params)
        self.flow.claimed(params, len(jobs))
        return jobs

    def claimable_types(self, caller: ApiKey, types: Sequence[str] | None) -> Sequence[str]:
        """The types a claim looks at; 422/403 for types it may not name. Naming none, every
        type this node configures that the key may claim: jobs of a type the node does not
        know (another node's, or this one's before its config changed) are not its to
        hand out, past the limits the nodes that know the type keep."""
        if types is None:
            allowed = caller.types
            return [name for name in self.flow.configured if allowed is None or name in allowed]
        for name in types:
            if self.settings.job_type(name) is None:
                raise UnknownJobType(f"Job type {quoted(name)} is not configured")
            if caller.types is not None and name not in caller.types:
                raise Forbidden(f"This key may not claim jobs of type {quoted(name)}")
        return types

    async def next_due(self, types: Sequence[str]) -> datetime | None:
        """When the next scheduled job of ``types`` becomes ready (past: it is due and no
        claim has made it ready yet), or a rate window of one of them reopens."""
        now = self.clock.now()
        times = [await self.storage.job_next_due(types)]
        times += await self.flow.windows_open(types, now)
        return min((at for at in times if at is not None), default=None)

    def _held(
        self,
        caller: ApiKey,
        job_id: int,
        lease_token: str,
        lease_seconds: int | None = None,
        delay_seconds: float = 0,
    ) -> HeldParams:
        token = held_token(lease_token)
        return HeldParams(
            job_id,
            token,
            caller.name,
            self.clock.now(),
            lease_seconds=lease_seconds,
            delay_seconds=delay_seconds,
        )

    async def heartbeat(
        self,
        caller: ApiKey,
        job_id: int,
        lease_token: str,
        lease_seconds: int | None = None,
        progress: JsonObject | None = None,
    ) -> Job:
        """Extend a held job's lease; ``progress`` (if any) becomes the job's last one."""
        held = self._held(caller, job_id, lease_token, lease_seconds)
        if progress is not None:
            held = replace(held, progress_text=progress_text(progress))
        return await self.storage.job_heartbeat(held)

    async def release(
        self, caller: ApiKey, job_id: int, lease_token: str, delay_seconds: float = 0
    ) -> Job:
        """Give a held job back unrun: pending again after ``delay_seconds`` (a snooze),
        the attempt not spent."""
        held = self._held(caller, job_id, lease_token, delay_seconds=delay_seconds)
        job = await self.storage.job_release(held)
        self._on_ready()
        return job

    async def finish_many(
        self, caller: ApiKey, specs: Sequence[FinishSpec], with_jobs: bool = True
    ) -> list[Job | Finished | QueueError]:
        """Complete or fail each held job; one answer per spec, in order. Without
        ``with_jobs`` a finished job is answered by its id and new status alone."""
        now = self.clock.now()
        params = [await self._finish_params(caller, spec, now) for spec in specs]
        ready = [p for p in params if isinstance(p, FinishParams)]
        outcomes = await self.storage.job_finish_many(ready, with_jobs) if ready else []
        answered = [o for o in outcomes if not isinstance(o, QueueError)]
        if any(o.status == JobStatus.PENDING for o in answered):
            self._on_ready()
        elif outcomes:
            self.flow.slots_freed()
        self._finished(answered)
        done = iter(outcomes)
        # Each spec's answer, in order: its outcome, or why it never reached the storage.
        return [next(done) if isinstance(p, FinishParams) else p for p in params]

    async def finish(self, caller: ApiKey, spec: FinishSpec) -> Job:
        """Complete or fail one held job; its refusal is raised."""
        (outcome,) = await self.finish_many(caller, [spec])
        if isinstance(outcome, QueueError):
            raise outcome
        assert isinstance(outcome, Job)  # asked with its job
        return outcome

    async def _finish_params(
        self, caller: ApiKey, spec: FinishSpec, now: datetime
    ) -> FinishParams | QueueError:
        token = held_token(spec.lease_token)
        if spec.error is None:
            limit = self.settings.limits.max_result_bytes
            text = None if spec.result is None else stored_json(spec.result)
            if text is not None and len(text.encode()) > limit:
                return PayloadTooLarge(f"The result exceeds {limit} bytes")
            return FinishParams(
                spec.job_id,
                token,
                caller.name,
                now,
                result=spec.result,
                result_text=text,
                slot_types=self.flow.slot_types,
            )
        # A failure's retry time depends on the job, which is read first. A caller who
        # does not hold the job is answered from that read, before its error text is
        # sanitised: the redaction's work is spent only on a holder's failure. The
        # guarded update still decides.
        job = await self.storage.job_get(spec.job_id)
        if not holds(job, caller.name, token):
            return guard_failure(job)
        assert job is not None
        if spec.retry_in_seconds is not None:
            retry_at = now + timedelta(seconds=spec.retry_in_seconds)
        else:
            retry_at = self._retry_at(job, now)
        return FinishParams(
            spec.job_id,
            token,
            caller.name,
            now,
            error=sanitize_error(spec.error),
            retryable=spec.retryable,
            retry_at=retry_at,
            slot_types=self.flow.slot_types,
        )

    def _retry_at(self, job: Job, now: datetime) -> datetime:
        cfg = self.settings.job_type(job.type) or _DEFAULT_TYPE
        delay = backoff_seconds(
            job.retry_count, cfg.backoff_base_seconds, cfg.backoff_cap_seconds, rng=self._rng
        )
        return now + timedelta(seconds=delay)

    # -- maintenance -------------------------------------------------------

    async def rescue_expired(self) -> list[Job]:
        """Treat jobs whose lease has passed as failed attempts."""
        now = self.clock.now()
        rescued = await self.storage.job_rescue_expired(now, lambda job: self._retry_at(job, now))
        if any(job.status == JobStatus.PENDING for job in rescued):
            self._on_ready()
        elif rescued:
            self.flow.slots_freed()
        self._finished(rescued)
        return rescued

    def _finished(self, jobs: Sequence[Job | Finished]) -> None:
        """Wake the requests awaiting the results of the ``jobs`` that finished."""
        ids = [job.id for job in jobs if job.status in TERMINAL]
        if ids:
            self._on_finished(ids)

    async def prune(self) -> int:
        """Delete finished jobs (and their events) older than the retention settings."""
        cutoffs = self.settings.retention.cutoffs(self.clock.now())
        if not cutoffs:
            return 0
        # Batch after batch (each its own short transaction) until caught up: a busy
        # queue finishes more jobs between two passes than one batch holds.
        pruned = 0
        for _ in range(_PRUNE_MAX_BATCHES):
            deleted = await self.storage.job_prune(cutoffs)
            pruned += deleted
            if deleted == 0:
                break
        return pruned
