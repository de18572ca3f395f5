"""JobService: the queue's rules. Knows nothing of HTTP or SQL."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

import anyio
import jsonschema

from queuelog.clock import Clock
from queuelog.config import JobTypeConfig, Settings
from queuelog.errors import (
    Forbidden,
    NotFound,
    PayloadTooLarge,
    QueueError,
    UnknownJobType,
    ValidationFailed,
)
from queuelog.models import (
    ApiKey,
    EventKind,
    Finished,
    Job,
    JobEvent,
    JobStatus,
    MinuteCounts,
    QueueStats,
    Role,
)
from queuelog.retry import backoff_seconds
from queuelog.sanitize import sanitize_error
from queuelog.specs import (
    EnqueueSpec,
    FinishSpec,
    decode_cursor,
    encode_cursor,
    stored_json,
)
from queuelog.storage.base import (
    ClaimParams,
    FinishParams,
    JobListParams,
    NewJob,
    Storage,
)

Answer = TypeVar("Answer", bound=Job | Finished)  # what a finished spec is answered with
_DEFAULT_TYPE = JobTypeConfig()
# One prune pass deletes at most this many batches (of up to 1,000 jobs per status).
_PRUNE_MAX_BATCHES = 100


def _unindex(exc: QueueError, batch: bool) -> None:
    """A refusal of a single enqueue does not name an ``index``; a batch's does."""
    if not batch:
        exc.extra.pop("index", None)


def _held_token(token: str) -> str:
    """The lease token to check a held job against.

    Lease tokens are hexadecimal. One with characters no token has (a lone
    surrogate, NUL) cannot hold a lease, and neither database can store or
    compare it; it is checked as the empty token, which matches no lease, so the
    answer is the one any wrong token gets (404, or 409 by the job's state).
    """
    return token if token.isascii() and token.isprintable() else ""


class JobService:
    def __init__(
        self,
        storage: Storage,
        settings: Settings,
        clock: Clock,
        rng: random.Random | None = None,
        on_ready: Callable[[], None] | None = None,
        on_coming: Callable[[Iterable[str]], None] | None = None,
    ) -> None:
        """Args:
        storage: the backend.
        settings: limits, job types, retention.
        clock: the source of ``now``.
        rng: randomness for backoff jitter; tests pass a seeded one.
        on_ready: called whenever a job may have become ready (wakes long polls).
        on_coming: called on the event loop with the types of the ready jobs an
            awaited enqueue is about to commit, before its write, for a storage whose
            writes awaited on a loop commit together (``Wakeup.coming``).
        """
        self.storage = storage
        self.settings = settings
        self.clock = clock
        self._rng = rng or random.Random()
        self._on_ready = on_ready or (lambda: None)
        self._on_coming = on_coming
        self._schemas = {
            name: jsonschema.Draft202012Validator(cfg.payload_schema)
            for name, cfg in settings.types.items()
            if cfg.payload_schema is not None
        }

    # -- producers ---------------------------------------------------------

    def enqueue_many(
        self, caller: ApiKey, specs: Sequence[EnqueueSpec], batch: bool = False
    ) -> list[tuple[Job, bool]]:
        """Enqueue all or nothing; ``(job, created)`` per spec, in order."""
        now = self.clock.now()
        new_jobs = self._new_jobs(caller, specs, now, batch)
        try:
            results = self.storage.job_insert_many(new_jobs, now)
        except QueueError as exc:
            _unindex(exc, batch)
            raise
        return self._enqueued(results)

    # The async forms below serve routes on the event loop through the storage's
    # awaited writes (storage.base.ThreadedWrites); the rules are the same code
    # as the blocking forms'.

    async def enqueue_many_async(
        self, caller: ApiKey, specs: Sequence[EnqueueSpec], batch: bool = False
    ) -> list[tuple[Job, bool]]:
        """``enqueue_many``, awaited."""
        now = self.clock.now()
        new_jobs = self._new_jobs(caller, specs, now, batch)
        if self._on_coming is not None:
            # A generator: nothing is built when no claimer is waiting.
            self._on_coming(job.type for job in new_jobs if job.run_at <= now)
        try:
            results = await self.storage.job_insert_many_async(new_jobs, now)
        except QueueError as exc:
            _unindex(exc, batch)
            raise
        return self._enqueued(results)

    async def enqueue_async(self, caller: ApiKey, spec: EnqueueSpec) -> tuple[Job, bool]:
        """``enqueue_many`` of one job, awaited."""
        ((job, created),) = await self.enqueue_many_async(caller, [spec])
        return job, created

    def _new_jobs(
        self, caller: ApiKey, specs: Sequence[EnqueueSpec], now: datetime, batch: bool
    ) -> list[NewJob]:
        return [
            self._new_job(caller, spec, now, index if batch else None)
            for index, spec in enumerate(specs)
        ]

    def _enqueued(self, results: list[tuple[Job, bool]]) -> list[tuple[Job, bool]]:
        if any(created for _, created in results):
            self._on_ready()
        return results

    def _new_job(
        self, caller: ApiKey, spec: EnqueueSpec, now: datetime, index: int | None
    ) -> NewJob:
        where = {"index": index} if index is not None else {}
        cfg = self.settings.job_type(spec.type)
        if cfg is None:
            raise UnknownJobType(f"Job type {spec.type!r} is not configured", **where)
        if caller.types is not None and spec.type not in caller.types:
            raise Forbidden(f"This key may not enqueue jobs of type {spec.type!r}", **where)
        if spec.priority > caller.max_priority:
            raise Forbidden(f"This key may set priority up to {caller.max_priority.label}", **where)
        limit = self.settings.limits.max_payload_bytes
        payload_text = stored_json(spec.payload)
        if len(payload_text.encode()) > limit:
            raise PayloadTooLarge(f"The payload exceeds {limit} bytes", **where)
        self._check_schema(spec, where)
        if spec.run_at is not None:
            run_at = max(spec.run_at, now)
        elif spec.delay_seconds is not None and spec.delay_seconds > 0:
            run_at = now + timedelta(seconds=spec.delay_seconds)
        else:
            run_at = now
        max_retries = cfg.max_retries if spec.max_retries is None else spec.max_retries
        return NewJob(
            type=spec.type,
            payload=spec.payload,
            priority=spec.priority,
            max_retries=max_retries,
            lease_seconds=cfg.lease_seconds,
            run_at=run_at,
            principal=caller.name,
            idempotency_key=spec.idempotency_key,
            fingerprint=spec.fingerprint(max_retries) if spec.idempotency_key else None,
            payload_text=payload_text,
        )

    def _check_schema(self, spec: EnqueueSpec, where: dict[str, Any]) -> None:
        validator = self._schemas.get(spec.type)
        if validator is None:
            return
        problems = sorted(validator.iter_errors(spec.payload), key=lambda e: list(e.path))
        if problems:
            prefix = ["body", "jobs", where["index"]] if where else ["body"]
            errors = [
                {"loc": [*prefix, "payload", *p.absolute_path], "msg": p.message}
                for p in problems[:20]
            ]
            raise ValidationFailed("The payload does not match the type's schema", errors=errors)

    def cancel(self, caller: ApiKey, job_id: int) -> Job:
        job = self.get(caller, job_id)
        if not (caller.has(Role.ADMIN) or job.principal == caller.name):
            raise NotFound("No such job")
        return self.storage.job_cancel(job_id, caller.name, self.clock.now())

    def retry(self, caller: ApiKey, job_id: int) -> Job:
        """Dead-letter redrive (admin): failed or cancelled back to pending."""
        job = self.storage.job_requeue(job_id, caller.name, self.clock.now())
        self._on_ready()
        return job

    # -- reading -----------------------------------------------------------

    def _visible(self, caller: ApiKey, job: Job) -> bool:
        if caller.has(Role.ADMIN):
            return True
        if caller.has(Role.PRODUCER) and job.principal == caller.name:
            return True
        return (
            caller.has(Role.WORKER)
            and job.status == JobStatus.RUNNING
            and job.claimed_by == caller.name
        )

    def get(self, caller: ApiKey, job_id: int) -> Job:
        job = self.storage.job_get(job_id)
        if job is None or not self._visible(caller, job):
            raise NotFound("No such job")
        return job

    def events(self, caller: ApiKey, job_id: int) -> list[JobEvent]:
        self.get(caller, job_id)
        return self.storage.job_events(job_id)

    def list_jobs(
        self,
        caller: ApiKey,
        limit: int,
        cursor: str | None = None,
        status: JobStatus | None = None,
        job_type: str | None = None,
        idempotency_key: str | None = None,
    ) -> tuple[list[Job], str | None]:
        """Newest first; the cursor is opaque to clients."""
        admin = caller.has(Role.ADMIN)
        params = JobListParams(
            limit=limit + 1,
            before_id=decode_cursor(cursor) if cursor else None,
            status=status,
            type=job_type,
            principal=None if admin or not caller.has(Role.PRODUCER) else caller.name,
            holder=None if admin or not caller.has(Role.WORKER) else caller.name,
            idempotency_key=idempotency_key,
        )
        if not admin and params.principal is None and params.holder is None:
            return [], None
        jobs = self.storage.job_list(params)
        if len(jobs) > limit:
            return jobs[:limit], encode_cursor(jobs[limit - 1].id)
        return jobs, None

    def stats(self) -> QueueStats:
        return self.storage.job_stats(self.clock.now())

    # -- workers -----------------------------------------------------------

    def claim(
        self,
        caller: ApiKey,
        types: Sequence[str] | None = None,
        limit: int = 1,
        lease_seconds: int | None = None,
        instance: str | None = None,
    ) -> list[Job]:
        """Atomically hand up to ``limit`` ready jobs to this worker."""
        return self.storage.job_claim(
            self._claim_params(caller, types, limit, lease_seconds, instance)
        )

    async def claim_async(
        self,
        caller: ApiKey,
        types: Sequence[str] | None = None,
        limit: int = 1,
        lease_seconds: int | None = None,
        instance: str | None = None,
    ) -> list[Job]:
        """``claim``, awaited."""
        params = self._claim_params(caller, types, limit, lease_seconds, instance)
        return await self.storage.job_claim_async(params)

    def _claim_params(
        self,
        caller: ApiKey,
        types: Sequence[str] | None,
        limit: int,
        lease_seconds: int | None,
        instance: str | None,
    ) -> ClaimParams:
        types = self.claimable_types(caller, types)
        now = self.clock.now()
        return ClaimParams(
            worker_name=caller.name,
            worker_id=f"{caller.name}/{instance}" if instance else caller.name,
            limit=limit,
            now=now,
            types=types,
            lease_seconds=lease_seconds,
            retry_at=lambda job: self._retry_at(job, now),
        )

    def claimable_types(self, caller: ApiKey, types: Sequence[str] | None) -> Sequence[str] | None:
        """The types a claim looks at (None: all); 422/403 for types it may not name."""
        if types is None:
            return caller.types
        for name in types:
            if self.settings.job_type(name) is None:
                raise UnknownJobType(f"Job type {name!r} is not configured")
            if caller.types is not None and name not in caller.types:
                raise Forbidden(f"This key may not claim jobs of type {name!r}")
        return types

    def next_due(self, types: Sequence[str] | None) -> datetime | None:
        """When the next scheduled job of ``types`` becomes ready, if any is waiting."""
        return self.storage.job_next_due(self.clock.now(), types)

    def heartbeat(
        self, caller: ApiKey, job_id: int, lease_token: str, lease_seconds: int | None = None
    ) -> Job:
        return self.storage.job_heartbeat(
            job_id, _held_token(lease_token), caller.name, lease_seconds, self.clock.now()
        )

    async def heartbeat_async(
        self, caller: ApiKey, job_id: int, lease_token: str, lease_seconds: int | None = None
    ) -> Job:
        """``heartbeat``, awaited."""
        return await self.storage.job_heartbeat_async(
            job_id, _held_token(lease_token), caller.name, lease_seconds, self.clock.now()
        )

    async def release_async(self, caller: ApiKey, job_id: int, lease_token: str) -> Job:
        """Give a held job back unrun: pending at once, the attempt not spent."""
        job = await self.storage.job_release_async(
            job_id, _held_token(lease_token), caller.name, self.clock.now()
        )
        self._on_ready()
        return job

    def finish_many(self, caller: ApiKey, specs: Sequence[FinishSpec]) -> list[Job | QueueError]:
        """Complete or fail each held job; one answer per spec, in order."""
        params, ready = self._finish_params_all(caller, specs)
        return self._finished(params, self.storage.job_finish_many(ready) if ready else [])

    async def finish_many_async(
        self, caller: ApiKey, specs: Sequence[FinishSpec], with_jobs: bool = True
    ) -> list[Job | Finished | QueueError]:
        """``finish_many``, awaited; without ``with_jobs`` a finished job is answered by its
        id and new status alone."""
        if any(spec.error is not None for spec in specs):
            # A failure's retry time depends on the job, which is read first: a read
            # that may block (a database round trip), so it is made off the loop.
            params, ready = await anyio.to_thread.run_sync(self._finish_params_all, caller, specs)
        else:
            params, ready = self._finish_params_all(caller, specs)
        outcomes = await self.storage.job_finish_many_async(ready, with_jobs) if ready else []
        return self._finished(params, outcomes)

    async def finish_async(self, caller: ApiKey, spec: FinishSpec) -> Job:
        """``finish``, awaited."""
        (outcome,) = await self.finish_many_async(caller, [spec])
        if isinstance(outcome, QueueError):
            raise outcome
        assert isinstance(outcome, Job)  # asked with its job
        return outcome

    def _finish_params_all(
        self, caller: ApiKey, specs: Sequence[FinishSpec]
    ) -> tuple[list[FinishParams | QueueError], list[FinishParams]]:
        """Each spec's parameters or its refusal, and the parameters that go to storage."""
        now = self.clock.now()
        params = [self._finish_params(caller, s, now) for s in specs]
        return params, [p for p in params if isinstance(p, FinishParams)]

    def _finished(
        self, params: Sequence[FinishParams | QueueError], outcomes: Sequence[Answer | QueueError]
    ) -> list[Answer | QueueError]:
        """Each spec's answer, in order: its outcome, or why it never reached the storage."""
        if any(not isinstance(o, QueueError) and o.status == JobStatus.PENDING for o in outcomes):
            self._on_ready()
        done = iter(outcomes)
        return [next(done) if isinstance(p, FinishParams) else p for p in params]

    def finish(self, caller: ApiKey, spec: FinishSpec) -> Job:
        (outcome,) = self.finish_many(caller, [spec])
        if isinstance(outcome, QueueError):
            raise outcome
        return outcome

    def _finish_params(
        self, caller: ApiKey, spec: FinishSpec, now: datetime
    ) -> FinishParams | QueueError:
        common = {
            "job_id": spec.job_id,
            "lease_token": _held_token(spec.lease_token),
            "worker_name": caller.name,
        }
        if spec.error is None:
            limit = self.settings.limits.max_result_bytes
            text = None if spec.result is None else stored_json(spec.result)
            if text is not None and len(text.encode()) > limit:
                return PayloadTooLarge(f"The result exceeds {limit} bytes")
            return FinishParams(now=now, result=spec.result, result_text=text, **common)  # type: ignore[arg-type]
        job = self.storage.job_get(spec.job_id)
        if job is None:
            return NotFound("No such job")
        if spec.retry_in_seconds is not None:
            retry_at = now + timedelta(seconds=spec.retry_in_seconds)
        else:
            retry_at = self._retry_at(job, now)
        return FinishParams(
            now=now,
            error=sanitize_error(spec.error),
            retryable=spec.retryable,
            retry_at=retry_at,
            **common,  # type: ignore[arg-type]
        )

    def _retry_at(self, job: Job, now: datetime) -> datetime:
        cfg = self.settings.job_type(job.type) or _DEFAULT_TYPE
        delay = backoff_seconds(
            job.retry_count, cfg.backoff_base_seconds, cfg.backoff_cap_seconds, rng=self._rng
        )
        return now + timedelta(seconds=delay)

    # -- maintenance -------------------------------------------------------

    def rescue_expired(self) -> list[Job]:
        """Treat jobs whose lease has passed as failed attempts."""
        now = self.clock.now()
        rescued = self.storage.job_rescue_expired(now, lambda job: self._retry_at(job, now))
        if any(job.status == JobStatus.PENDING for job in rescued):
            self._on_ready()
        return rescued

    def prune(self) -> int:
        """Delete finished jobs (and their events) older than the retention settings."""
        now = self.clock.now()
        keep = self.settings.retention
        ages = {
            JobStatus.COMPLETED: keep.completed_seconds,
            JobStatus.CANCELLED: keep.cancelled_seconds,
            JobStatus.FAILED: keep.failed_seconds,
        }
        cutoffs = {s: now - timedelta(seconds=age) for s, age in ages.items() if age > 0}
        if not cutoffs:
            return 0
        # Batch after batch (each its own short transaction) until caught up: a busy
        # queue finishes more jobs between two passes than one batch holds.
        pruned = 0
        for _ in range(_PRUNE_MAX_BATCHES):
            deleted = self.storage.job_prune(cutoffs)
            pruned += deleted
            if deleted == 0:
                break
        return pruned

    # -- dashboard -----------------------------------------------------------

    def retry_failed(self, caller: ApiKey, job_type: str) -> int:
        """Dead-letter redrive of every failed job of one type (admin); how many moved."""
        if not caller.has(Role.ADMIN):
            raise Forbidden("Only an admin may retry jobs")
        count = self.storage.job_requeue_failed(job_type, caller.name, self.clock.now())
        if count:
            self._on_ready()
        return count

    def throughput(self, minutes: int = 60) -> list[MinuteCounts]:
        """Jobs completed and failed (for good) in each of the last ``minutes`` whole minutes.

        The current, unfinished minute is the last one.
        """
        now = self.clock.now()
        until = now.replace(second=0, microsecond=0) + timedelta(minutes=1)
        since = until - timedelta(minutes=minutes)
        slots = [MinuteCounts(since + timedelta(minutes=i)) for i in range(minutes)]
        for count in self.storage.job_event_counts(since, until, 60):
            index = int((count.bucket_start - since).total_seconds()) // 60
            if count.event == EventKind.COMPLETED:
                slots[index].completed += count.count
            elif count.event == EventKind.FAILED:
                slots[index].failed += count.count
        return slots
