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
from queuelog.errors import StorageUnavailable
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
    jobs = await claims.claim_or_wait(service, Wakeup(), KeyRing(sqlite, clock), worker, body, gone)
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
        await claims.claim_or_wait(service, Wakeup(), KeyRing(sqlite, clock), worker, body, broken)


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
                jobs = await claims.claim_or_wait(
                    service, wakeup, KeyRing(sqlite, clock), worker, body, never_gone
                )
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


async def _never_gone() -> dict[str, Any]:
    await anyio.sleep_forever()
    raise AssertionError


async def test_a_lingering_claim_whose_channel_fails_gives_its_jobs_back_and_raises(
    sqlite: SqliteStorage, settings: Settings, clock: FakeClock
) -> None:
    service, producer, worker = await _service_and_keys(sqlite, settings, clock)
    ((job, _),) = await service.enqueue_many(producer, [EnqueueSpec(type="noop")])

    async def broken_later() -> dict[str, Any]:
        await anyio.sleep(0.1)  # the claim holds the job and lingers by then
        raise RuntimeError("channel broken")

    body = ClaimRequest(limit=5, linger_ms=1000)
    with pytest.raises(RuntimeError, match="channel broken"):
        await claims.claim_or_wait(
            service, Wakeup(), KeyRing(sqlite, clock), worker, body, broken_later
        )
    after = await service.get(producer, job.id)
    assert (after.status, after.retry_count) == (JobStatus.PENDING, 0)
    events = [e.event.value for e in (await service.events(producer, job.id, 500))[0]]
    assert events == ["enqueued", "claimed", "released"]


class _FailingAfterFirstLook(JobService):
    """A service whose claims fail after the first, as a database that goes away would."""

    looks = 0

    async def claim(self, *args: Any, **kwargs: Any) -> list[Any]:
        self.looks += 1
        if self.looks > 1:
            raise StorageUnavailable()
        return await super().claim(*args, **kwargs)


async def test_a_lingering_claim_that_fails_to_take_more_answers_with_what_it_holds(
    sqlite: SqliteStorage, settings: Settings, clock: FakeClock
) -> None:
    _, producer, worker = await _service_and_keys(sqlite, settings, clock)
    service = _FailingAfterFirstLook(sqlite, settings, clock)
    ((job, _),) = await service.enqueue_many(producer, [EnqueueSpec(type="noop")])
    wakeup = Wakeup(recheck_seconds=0.05)  # the lingering claim looks again, and fails
    body = ClaimRequest(limit=5, linger_ms=1000)
    jobs = await claims.claim_or_wait(
        service, wakeup, KeyRing(sqlite, clock), worker, body, _never_gone
    )
    assert service.looks > 1 and [j.id for j in jobs] == [job.id] and jobs[0].lease_token


async def test_a_lingering_claim_answers_with_what_it_holds_when_the_server_closes(
    sqlite: SqliteStorage, settings: Settings, clock: FakeClock
) -> None:
    service, producer, worker = await _service_and_keys(sqlite, settings, clock)
    ((job, _),) = await service.enqueue_many(producer, [EnqueueSpec(type="noop")])
    wakeup = Wakeup()
    answers: list[list[Any]] = []

    async def claim() -> None:
        body = ClaimRequest(limit=5, linger_ms=1000)
        answers.append(
            await claims.claim_or_wait(
                service, wakeup, KeyRing(sqlite, clock), worker, body, _never_gone
            )
        )

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(claim)
        await anyio.sleep(0.1)  # the claim holds the job and lingers
        wakeup.close()
    assert [j.id for j in answers[0]] == [job.id]


async def test_a_claim_lingers_no_longer_than_a_third_of_a_held_jobs_lease(
    sqlite: SqliteStorage, settings: Settings, clock: FakeClock
) -> None:
    service, producer, worker = await _service_and_keys(sqlite, settings, clock)
    ((job, _),) = await service.enqueue_many(producer, [EnqueueSpec(type="noop")])
    body = ClaimRequest(limit=5, linger_ms=1000, lease_seconds=1)
    started = anyio.current_time()
    jobs = await claims.claim_or_wait(
        service, Wakeup(), KeyRing(sqlite, clock), worker, body, _never_gone
    )
    assert [j.id for j in jobs] == [job.id]
    assert anyio.current_time() - started < 0.9  # a third of its 1 s lease, not the 1 s linger


class _KeysUnreadable(KeyRing):
    """A key ring that cannot read a key again, as when the database goes away."""

    async def still_active(self, key: ApiKey) -> bool:
        raise StorageUnavailable()


async def test_hardening_11_a_claim_that_cannot_read_its_key_again_gives_back_what_it_held(
    sqlite: SqliteStorage, settings: Settings, clock: FakeClock
) -> None:
    service, producer, worker = await _service_and_keys(sqlite, settings, clock)
    ((job, _),) = await service.enqueue_many(producer, [EnqueueSpec(type="noop")])
    wakeup = Wakeup(recheck_seconds=0.05)  # the lingering claim looks again
    body = ClaimRequest(limit=5, linger_ms=1000)
    with pytest.raises(StorageUnavailable):
        await claims.claim_or_wait(
            service, wakeup, _KeysUnreadable(sqlite, clock), worker, body, _never_gone
        )
    after = await service.get(producer, job.id)
    assert (after.status, after.retry_count) == (JobStatus.PENDING, 0)
    events = [e.event.value for e in (await service.events(producer, job.id, 500))[0]]
    assert events == ["enqueued", "claimed", "released"]
