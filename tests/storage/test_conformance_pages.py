"""A listing's page is bounded in bytes as well as in count, on every backend: 500 jobs
of 64 KiB payloads were 64 MB a page (hardening 74)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from queuelog.models import JobStatus
from queuelog.storage.protocol import LISTED_BYTES, JobListParams, NewJob, Storage
from tests.storage.test_conformance import T0, claim, finish, new_job

pytestmark = pytest.mark.anyio

BLOB = "x" * 60_000  # near the default 64 KiB payload limit
# Jobs of BLOB's payload a page holds: those the jobs before them leave under the budget.
PER_PAGE = LISTED_BYTES // len(f'{{"blob":"{BLOB}"}}') + 1


def large_job(job_type: str = "noop", principal: str = "shop", **fields: Any) -> NewJob:
    return replace(new_job(job_type, principal=principal), payload={"blob": BLOB}, **fields)


async def every_page(store: Storage, limit: int = 500, **filters: Any) -> list[list[int]]:
    """The ids of each page a listing answers, following it to its end."""
    pages: list[list[int]] = []
    before = None
    while True:
        page = await store.job_list(JobListParams(limit=limit, before_id=before, **filters))
        pages.append([job.id for job in page.jobs])
        if not page.more:
            return pages
        before = page.jobs[-1].id


def joined(pages: list[list[int]]) -> list[int]:
    return [job_id for page in pages for job_id in page]


async def made(store: Storage, jobs: list[NewJob]) -> list[int]:
    """The ids of new jobs, newest first, as a listing answers them."""
    return sorted((job.id for job, _ in await store.job_insert_many(jobs, T0)), reverse=True)


async def test_hardening_74_a_listing_of_large_jobs_stops_at_its_byte_budget(
    store: Storage,
) -> None:
    ids = await made(store, [large_job() for _ in range(2 * PER_PAGE + 3)])
    pages = await every_page(store)
    assert [len(page) for page in pages] == [PER_PAGE, PER_PAGE, 3]
    assert joined(pages) == ids  # every job once, newest first


async def test_hardening_74_a_job_larger_than_the_budget_is_listed_one_per_page(
    store: Storage,
) -> None:
    huge = {"blob": "y" * (LISTED_BYTES + 1)}
    ids = await made(store, [replace(new_job(), payload=huge) for _ in range(3)])
    assert await every_page(store) == [[job_id] for job_id in ids]


async def test_hardening_74_small_jobs_still_fill_the_limit(store: Storage) -> None:
    ids = await made(store, [new_job() for _ in range(30)])
    assert await every_page(store, limit=10) == [ids[:10], ids[10:20], ids[20:]]


async def test_hardening_74_results_and_progress_count_toward_a_page_s_bytes(
    store: Storage,
) -> None:
    ids = await made(store, [new_job() for _ in range(2 * PER_PAGE)])
    for job in await claim(store, limit=len(ids)):
        await finish(store, job, result={"blob": BLOB})
    pages = await every_page(store, status=JobStatus.COMPLETED)
    assert [len(page) for page in pages] == [PER_PAGE, PER_PAGE]
    assert joined(pages) == ids


async def test_hardening_74_every_filtered_view_stops_at_its_byte_budget(
    store: Storage,
) -> None:
    ((first, _),) = await store.job_insert_many([new_job()], T0)
    count = PER_PAGE + 2
    keyed = await made(store, [large_job(idempotency_key=f"k{n}") for n in range(count)])
    emails = await made(store, [large_job("send_email", principal="other") for _ in range(count)])
    waiting = await made(store, [large_job(depends_on=(first.id,)) for _ in range(count)])
    held = sorted(job.id for job in await claim(store, limit=count, types=["send_email"]))
    views: list[tuple[dict[str, Any], list[int]]] = [
        ({"principal": "shop"}, [*waiting, *keyed, first.id]),
        ({"type": "send_email"}, emails),
        ({"status": JobStatus.RUNNING}, held[::-1]),
        ({"holder": "w"}, held[::-1]),
        ({"principal": "shop", "holder": "w"}, [*waiting, *emails, *keyed, first.id]),
        ({"depends_on": first.id}, waiting),
        ({"idempotency_key": "k3"}, [keyed[-4]]),
    ]
    for filters, ids in views:
        pages = await every_page(store, **filters)
        assert joined(pages) == ids, filters
        assert all(len(page) <= PER_PAGE for page in pages), filters
    assert len(await every_page(store, principal="shop")) > 1
