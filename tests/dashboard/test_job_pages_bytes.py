"""The dashboard's job list and a job's dependents come a byte budget at a time, as
GET /jobs does (hardening 74): an older page's link reaches every job."""

from __future__ import annotations

import re

from tests.api.test_listing_pages import enqueued
from tests.conftest import Api, enqueue
from tests.dashboard.conftest import Browser
from tests.storage.test_conformance_pages import PER_PAGE


def shown(page: str) -> list[int]:
    return [int(job_id) for job_id in re.findall(r'data-job-id="(\d+)"', page)]


def test_hardening_74_the_jobs_page_of_large_jobs_links_on_to_the_rest(
    browser: Browser, producer: Api
) -> None:
    first = enqueue(producer, "resize_image")["id"]
    ids = enqueued(producer, PER_PAGE + 2, depends_on=[first])
    for url in ("/ui/jobs", f"/ui/jobs?depends_on={first}"):
        listed = browser.get(url).text
        assert shown(listed) == ids[:PER_PAGE], url
        older = re.search(r'href="(/ui/jobs\?[^"]*cursor=[^"]+)"', listed)
        assert older, url
        rest = shown(browser.get(older.group(1).replace("&amp;", "&")).text)
        assert rest == ids[PER_PAGE:] + ([first] if url == "/ui/jobs" else []), url
    job_page = browser.get(f"/ui/jobs/{first}").text
    assert f'href="/ui/jobs?depends_on={first}"' in job_page  # every dependent, a link away
