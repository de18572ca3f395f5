"""A long-polling claim watches its request's channel: a client gone claims nothing."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from queuelog.api.routes import claims
from queuelog.api.schemas import ClaimRequest
from queuelog.auth import KeyRing
from queuelog.clock import FakeClock
from queuelog.config import Settings
from queuelog.models import ApiKey, JobStatus, Role
from queuelog.service import JobService
from queuelog.specs import EnqueueSpec
from queuelog.storage.sqlite.store import SqliteStorage
from queuelog.wakeup import Wakeup

pytestmark = pytest.mark.anyio


async def _service_and_keys(
    sqlite: SqliteStorage, settings: Settings, clock: FakeClock
) -> tuple[JobService, ApiKey, ApiKey]:
    ring = KeyRing(sqlite, clock)
    producer, _ = await ring.create("shop", frozenset({Role.PRODUCER}))
    worker, _ = await ring.create("mailer", frozenset({Role.WORKER}))
    return JobService(sqlite, settings, clock), producer, worker


async def test_a_long_poll_from_a_client_already_gone_claims_nothing(
    sqlite: SqliteStorage, settings: Settings, clock: FakeClock
) -> None:
    service, producer, worker = await _service_and_keys(sqlite, settings, clock)
    ((job, _),) = await service.enqueue_many(producer, [EnqueueSpec(type="noop")])

    async def gone() -> dict[str, Any]:
        return {"type": "http.disconnect"}

    body = ClaimRequest(wait_seconds=5)
    jobs = await claims.claim_or_wait(service, Wakeup(), worker, body, gone)
    assert jobs == []
    assert (await service.get(producer, job.id)).status == JobStatus.PENDING


async def test_a_long_poll_whose_channel_fails_raises_the_failure(
    sqlite: SqliteStorage, settings: Settings, clock: FakeClock
) -> None:
    service, _, worker = await _service_and_keys(sqlite, settings, clock)

    async def broken() -> dict[str, Any]:
        raise RuntimeError("channel broken")

    body = ClaimRequest(wait_seconds=5)
    with pytest.raises(RuntimeError, match="channel broken"):
        await claims.claim_or_wait(service, Wakeup(), worker, body, broken)


async def test_a_long_poll_looks_again_every_recheck_for_jobs_it_was_not_told_of(
    sqlite: SqliteStorage, settings: Settings, clock: FakeClock
) -> None:
    service, producer, worker = await _service_and_keys(sqlite, settings, clock)
    assert settings.sqlite_path is not None
    other = SqliteStorage(settings.sqlite_path)  # another process: it notifies no one here
    try:

        async def never_gone() -> dict[str, Any]:
            await anyio.sleep_forever()
            raise AssertionError

        body = ClaimRequest(wait_seconds=20)
        async with anyio.create_task_group() as tasks:
            answers: list[list[Any]] = []

            async def wait_for_a_job() -> None:
                wakeup = Wakeup(recheck_seconds=0.2)
                jobs = await claims.claim_or_wait(service, wakeup, worker, body, never_gone)
                answers.append(jobs)

            tasks.start_soon(wait_for_a_job)
            await anyio.sleep(0.5)
            assert answers == []
            ((job, _),) = await JobService(other, settings, clock).enqueue_many(
                producer, [EnqueueSpec(type="noop")]
            )
            with anyio.fail_after(10):  # far before the wait's 20 s: found by a recheck
                while not answers:
                    await anyio.sleep(0.05)
        assert [j.id for j in answers[0]] == [job.id]
    finally:
        other.close()
