"""GET /jobs answers a page bounded in bytes as well as in count: one producer's 500
jobs of 64 KiB payloads made every `limit=500` answer 32-64 MB, and sixty at once took
the server from 96 MB to 3 GB (hardening 74). Following `next_cursor` reaches every job."""

from __future__ import annotations

from typing import Any

from tests.conftest import Api, enqueue
from tests.storage.test_conformance_pages import BLOB, PER_PAGE


def every_page(api: Api, **params: Any) -> list[list[int]]:
    """The ids of each page `GET /jobs` answers (`limit=500` unless given), following its
    cursors."""
    pages: list[list[int]] = []
    cursor = None
    while True:
        query = {"limit": 500, **params, **({"cursor": cursor} if cursor else {})}
        response = api.get("/jobs", params=query)
        assert response.status_code == 200, response.text
        pages.append([job["id"] for job in response.json()["jobs"]])
        cursor = response.json()["next_cursor"]
        if cursor is None:
            return pages


def enqueued(api: Api, count: int, job_type: str = "noop", **body: Any) -> list[int]:
    """The ids of new large jobs, newest first, as a listing answers them."""
    ids = [enqueue(api, job_type, payload={"blob": BLOB}, **body)["id"] for _ in range(count)]
    return ids[::-1]


def test_hardening_74_a_producer_s_large_jobs_come_a_budget_at_a_time(
    producer: Api, admin: Api
) -> None:
    ids = enqueued(producer, PER_PAGE + 3)
    for api, params in (
        (producer, {}),
        (admin, {"status": "pending"}),
        (admin, {"type": "noop"}),
    ):
        pages = every_page(api, **params)
        assert [len(page) for page in pages] == [PER_PAGE, 3], params
        assert [job_id for page in pages for job_id in page] == ids, params


def test_hardening_74_a_worker_s_and_a_dependency_s_views_come_a_budget_at_a_time(
    producer: Api, worker: Api
) -> None:
    first = enqueue(producer, "resize_image")["id"]
    waiting = enqueued(producer, PER_PAGE + 2, depends_on=[first])
    ids = enqueued(producer, PER_PAGE + 2)
    claimed = worker.post("/jobs/claim", json={"types": ["noop"], "limit": 100})
    assert len(claimed.json()["jobs"]) == len(ids)
    for api, params, expected in (
        (worker, {}, ids),
        (producer, {"depends_on": first}, waiting),
    ):
        pages = every_page(api, **params)
        assert [len(page) for page in pages] == [PER_PAGE, 2], params
        assert [job_id for page in pages for job_id in page] == expected, params


def test_hardening_74_small_jobs_still_fill_the_limit(producer: Api) -> None:
    ids = [enqueue(producer)["id"] for _ in range(7)][::-1]
    assert every_page(producer, limit=3) == [ids[:3], ids[3:6], ids[6:]]
