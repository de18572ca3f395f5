"""Random sequences of queue operations against JobService, checked against a small model.

Real SQLite in a temp directory, a fake clock. The model knows the state
machine of API.md; every operation must be answered as it predicts (the new
state, or the 409 kind), and after every step the stored jobs must match it.
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from queuelog.auth import KeyRing
from queuelog.clock import FakeClock
from queuelog.errors import QueueError
from queuelog.models import ApiKey, EventKind, Job, JobStatus, Priority, Role
from queuelog.service import JobService
from queuelog.specs import EnqueueSpec, FinishSpec
from queuelog.storage.protocol import JobListParams
from queuelog.storage.sqlite.store import SqliteStorage
from tests.conftest import make_settings, run_blocking

BASE, CAP = 2.0, 3600.0  # the "noop" type's backoff
TERMINAL = {JobStatus.COMPLETED, JobStatus.FAILED, JobStatus.CANCELLED}


@dataclass
class ModelJob:
    id: int
    priority: int
    created_at: datetime
    max_retries: int
    run_at: datetime
    status: JobStatus = JobStatus.PENDING
    retry_count: int = 0
    token: str | None = None
    lease_expires_at: datetime | None = None
    held_lease: int = 30  # the lease last asked for: a heartbeat without one renews for it
    old_tokens: list[str] = field(default_factory=list)


def _slug(call: object) -> str:
    """Run ``call``; 'ok' or the error's slug."""
    try:
        call()  # type: ignore[operator]
    except QueueError as exc:
        return exc.slug
    return "ok"


class QueueMachine(RuleBasedStateMachine):
    @initialize()
    def open_queue(self) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="queuelog-sm-"))
        cfg = make_settings(self.directory)
        assert cfg.sqlite_path is not None
        # No fsync per step: durability is not what this test is about.
        self.storage = SqliteStorage(cfg.sqlite_path, durability="normal")
        self.clock = FakeClock()
        self.service = JobService(self.storage, cfg, self.clock)
        ring = KeyRing(self.storage, self.clock)
        self.shop = self._key(ring, "shop", Role.PRODUCER)
        self.mailer = self._key(ring, "mailer", Role.WORKER)
        self.other = self._key(ring, "other", Role.WORKER)
        self.root = self._key(ring, "root", Role.ADMIN)
        self.jobs: dict[int, ModelJob] = {}
        self.redriven: set[int] = set()

    @staticmethod
    def _key(ring: KeyRing, name: str, role: Role) -> ApiKey:
        return run_blocking(ring.create(name, frozenset({role}), Priority.CRITICAL))[0]

    def teardown(self) -> None:
        if hasattr(self, "storage"):
            self.storage.close()
            shutil.rmtree(self.directory, ignore_errors=True)

    # -- helpers ---------------------------------------------------------------

    def _pick(self, index: int) -> ModelJob | None:
        if not self.jobs:
            return None
        ids = sorted(self.jobs)
        return self.jobs[ids[index % len(ids)]]

    def _token(self, job: ModelJob, which: str) -> str:
        if which == "current" and job.token is not None:
            return job.token
        if which == "old" and job.old_tokens:
            return job.old_tokens[0]
        return "0" * 32

    def _real(self, job_id: int) -> Job:
        job = run_blocking(self.storage.job_get(job_id))
        assert job is not None
        return job

    def _release(self, job: ModelJob) -> None:
        if job.token is not None:
            job.old_tokens.append(job.token)
        job.token = None
        job.lease_expires_at = None

    def _failed_attempt(self, job: ModelJob, retryable: bool, retry_in: float | None) -> None:
        """The model of fail and of lease expiry; the backoff is read back and bounded."""
        now = self.clock.now()
        self._release(job)
        if retryable and job.retry_count < job.max_retries:
            real = self._real(job.id)
            if retry_in is not None:
                assert real.run_at == now + timedelta(seconds=retry_in)
            else:
                delay = (real.run_at - now).total_seconds()
                expected = min(CAP, BASE * 2**job.retry_count)
                assert 0.8 * expected - 1e-6 <= delay <= 1.2 * expected + 1e-6
            job.status = JobStatus.PENDING
            job.retry_count += 1
            job.run_at = real.run_at
        else:
            job.status = JobStatus.FAILED

    def _expected_rescue(self) -> set[int]:
        now = self.clock.now()
        return {
            j.id
            for j in self.jobs.values()
            if j.status == JobStatus.RUNNING
            and j.lease_expires_at is not None
            and j.lease_expires_at <= now
        }

    def _apply_rescue(self, ids: set[int]) -> None:
        for job_id in ids:
            self._failed_attempt(self.jobs[job_id], retryable=True, retry_in=None)

    def _guard(self, job: ModelJob, token: str, worker: ApiKey) -> str:
        if job.status != JobStatus.RUNNING:
            return "invalid-state"
        if token != job.token or worker is not self.mailer:
            return "not-lease-holder"
        # A lease past its deadline is no longer held, even before any sweep.
        if job.lease_expires_at is not None and job.lease_expires_at <= self.clock.now():
            return "not-lease-holder"
        return "ok"

    # -- rules -----------------------------------------------------------------

    @rule(
        max_retries=st.integers(0, 3),
        priority=st.sampled_from([Priority.LOW, Priority.HIGH]),
        delay=st.sampled_from([0.0, 0.0, 3.0]),
    )
    def enqueue(self, max_retries: int, priority: Priority, delay: float) -> None:
        spec = EnqueueSpec(
            type="noop", priority=priority, max_retries=max_retries, delay_seconds=delay or None
        )
        ((job, created),) = run_blocking(self.service.enqueue_many(self.shop, [spec]))
        now = self.clock.now()
        assert created and job.status == JobStatus.PENDING
        assert job.run_at == now + timedelta(seconds=delay)
        self.jobs[job.id] = ModelJob(job.id, int(priority), now, max_retries, job.run_at)

    @rule(limit=st.integers(1, 3), lease=st.sampled_from([None, 5, 10]))
    def claim(self, limit: int, lease: int | None) -> None:
        now = self.clock.now()
        rescued = self._expected_rescue()
        claimed = run_blocking(self.service.claim(self.mailer, limit=limit, lease_seconds=lease))
        # Expired leases are rescued first; a rescued job waits out its backoff.
        self._apply_rescue(rescued)
        ready = sorted(
            (j for j in self.jobs.values() if j.status == JobStatus.PENDING and j.run_at <= now),
            key=lambda j: (-j.priority, j.created_at, j.id),
        )
        expected = [j.id for j in ready[:limit]]
        assert [j.id for j in claimed] == expected
        for real in claimed:
            job = self.jobs[real.id]
            assert real.lease_token is not None
            assert real.lease_token not in job.old_tokens, "a lease token is never reused"
            job.status = JobStatus.RUNNING
            job.token = real.lease_token
            job.held_lease = lease or 30
            job.lease_expires_at = now + timedelta(seconds=job.held_lease)

    @rule(
        index=st.integers(0, 50),
        which=st.sampled_from(["current", "current", "old", "bogus"]),
        by_other=st.booleans(),
        lease=st.sampled_from([None, 5]),
    )
    def heartbeat(self, index: int, which: str, by_other: bool, lease: int | None) -> None:
        job = self._pick(index)
        if job is None:
            return
        worker = self.other if by_other else self.mailer
        token = self._token(job, which)
        expected = self._guard(job, token, worker)
        got = _slug(lambda: run_blocking(self.service.heartbeat(worker, job.id, token, lease)))
        assert got == expected, (got, expected, job)
        if got == "ok":
            job.held_lease = lease or job.held_lease
            job.lease_expires_at = self.clock.now() + timedelta(seconds=job.held_lease)

    @rule(
        index=st.integers(0, 50),
        which=st.sampled_from(["current", "current", "old", "bogus"]),
        by_other=st.booleans(),
    )
    def complete(self, index: int, which: str, by_other: bool) -> None:
        job = self._pick(index)
        if job is None:
            return
        worker = self.other if by_other else self.mailer
        token = self._token(job, which)
        expected = self._guard(job, token, worker)
        got = _slug(lambda: run_blocking(self.service.finish(worker, FinishSpec(job.id, token))))
        assert got == expected, (got, expected, job)
        if got == "ok":
            self._release(job)
            job.status = JobStatus.COMPLETED

    @rule(
        index=st.integers(0, 50),
        which=st.sampled_from(["current", "current", "old"]),
        retryable=st.booleans(),
        retry_in=st.sampled_from([None, None, 0.0, 4.0]),
    )
    def fail(self, index: int, which: str, retryable: bool, retry_in: float | None) -> None:
        job = self._pick(index)
        if job is None:
            return
        token = self._token(job, which)
        expected = self._guard(job, token, self.mailer)
        spec = FinishSpec(
            job.id, token, error="boom", retryable=retryable, retry_in_seconds=retry_in
        )
        got = _slug(lambda: run_blocking(self.service.finish(self.mailer, spec)))
        assert got == expected, (got, expected, job)
        if got == "ok":
            self._failed_attempt(job, retryable, retry_in)

    @rule(index=st.integers(0, 50))
    def cancel(self, index: int) -> None:
        job = self._pick(index)
        if job is None:
            return
        expected = "ok" if job.status == JobStatus.PENDING else "invalid-state"
        assert _slug(lambda: run_blocking(self.service.cancel(self.shop, job.id))) == expected
        if expected == "ok":
            job.status = JobStatus.CANCELLED

    @rule(index=st.integers(0, 50))
    def admin_retry(self, index: int) -> None:
        job = self._pick(index)
        if job is None:
            return
        redrivable = job.status in (JobStatus.FAILED, JobStatus.CANCELLED)
        expected = "ok" if redrivable else "invalid-state"
        assert _slug(lambda: run_blocking(self.service.redrive.job(self.root, job.id))) == expected
        if expected == "ok":
            job.status = JobStatus.PENDING
            job.retry_count = 0
            job.run_at = self.clock.now()
            self.redriven.add(job.id)

    @rule(seconds=st.sampled_from([0.5, 1.0, 2.5, 5.0, 10.0, 31.0]))
    def advance_clock(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @rule()
    def rescue(self) -> None:
        expected = self._expected_rescue()
        rescued = run_blocking(self.service.rescue_expired())
        assert {j.id for j in rescued} == expected
        self._apply_rescue(expected)

    # -- invariants ------------------------------------------------------------

    @invariant()
    def stored_jobs_match_the_model(self) -> None:
        if not hasattr(self, "storage"):
            return
        real = {
            j.id: j for j in run_blocking(self.storage.job_list(JobListParams(limit=1000))).jobs
        }
        assert set(real) == set(self.jobs)
        for job_id, model in self.jobs.items():
            job = real[job_id]
            assert job.status == model.status, (job, model)
            assert job.retry_count == model.retry_count
            assert 0 <= job.retry_count <= job.max_retries == model.max_retries
            if job.status == JobStatus.RUNNING:
                # One live lease per job: the single current token, known to the model.
                assert job.lease_token == model.token
                assert job.lease_expires_at == model.lease_expires_at
            else:
                assert job.lease_token is None and job.lease_expires_at is None
            if job.status == JobStatus.PENDING:
                assert job.run_at == model.run_at

    @invariant()
    def terminal_jobs_leave_only_by_admin_retry(self) -> None:
        if not hasattr(self, "storage"):
            return
        for model in self.jobs.values():
            events = run_blocking(self.storage.job_events(model.id))
            assert events[0].event == EventKind.ENQUEUED
            assert events[-1].to_status == model.status
            for before, after in itertools.pairwise(events):
                assert after.from_status == before.to_status, events
                if before.to_status in TERMINAL:
                    assert after.event == EventKind.REQUEUED, events


QueueMachine.TestCase.settings = settings(
    max_examples=75,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_queue_state_machine = QueueMachine.TestCase
