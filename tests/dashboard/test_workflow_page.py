"""The dashboard's job page shows a job's dependencies and dependents, linked both ways."""

from __future__ import annotations

import re

from tests.api.test_workflows import run
from tests.conftest import Api, enqueue
from tests.dashboard.conftest import Browser


def _section(page: str, name: str) -> str:
    match = re.search(rf'<section class="card" id="{name}">(.*?)</section>', page, re.S)
    assert match, f"no {name} section"
    return match.group(1)


def test_a_job_page_lists_dependencies_and_dependents_with_links_both_ways(
    browser: Browser, producer: Api, worker: Api
) -> None:
    a = enqueue(producer)
    b = enqueue(producer, depends_on=[a["id"]])
    c = enqueue(producer, depends_on=[b["id"]], on_dependency_failure="run")
    run(worker, a)
    page = browser.get(f"/ui/jobs/{b['id']}").text
    dependencies, dependents = _section(page, "dependencies"), _section(page, "dependents")
    assert f'href="/ui/jobs/{a["id"]}"' in dependencies and "s-completed" in dependencies
    assert f'href="/ui/jobs/{c["id"]}"' in dependents and "s-waiting" in dependents
    assert "cancel this job" in dependencies
    back = browser.get(f"/ui/jobs/{a['id']}").text
    assert f'href="/ui/jobs/{b["id"]}"' in _section(back, "dependents")
    assert "run it anyway" in browser.get(f"/ui/jobs/{c['id']}").text
    assert 'id="dependencies"' not in browser.get(f"/ui/jobs/{enqueue(producer)['id']}").text


def test_a_waiting_job_can_be_cancelled_and_its_dependents_listed(
    browser: Browser, producer: Api
) -> None:
    a = enqueue(producer)
    b = enqueue(producer, depends_on=[a["id"]])
    page = browser.get(f"/ui/jobs/{b['id']}").text
    assert f'action="/ui/jobs/{b["id"]}/cancel"' in page and "s-waiting" in page
    listing = browser.get(f"/ui/jobs?depends_on={a['id']}").text
    assert listing.count("data-job-id=") == 1 and f'data-job-id="{b["id"]}"' in listing
    refused = browser.get("/ui/jobs?depends_on=x")  # as any bad query value: 422, named
    assert refused.status_code == 422 and "depends_on" in refused.text
    done = browser.post(f"/ui/jobs/{b['id']}/cancel")
    assert done.status_code == 303
    assert "s-cancelled" in browser.get(f"/ui/jobs/{b['id']}").text


def test_a_retried_job_with_a_failed_dependency_is_said_to_wait(
    browser: Browser, producer: Api, worker: Api
) -> None:
    a = enqueue(producer)
    b = enqueue(producer, depends_on=[a["id"]])
    run(worker, a, fail=True)
    done = browser.post(f"/ui/jobs/{b['id']}/retry")
    assert done.headers["location"] == f"/ui/jobs/{b['id']}"
    assert (
        "The job is waiting again, for its dependencies."
        in browser.get(done.headers["location"]).text
    )
