"""The dashboard's schedules page: next and last run, last job, pause, resume and trigger
buttons behind the session's CSRF token."""

from __future__ import annotations

import html
from pathlib import Path

import pytest

from queuelog.config import Settings
from tests.conftest import Api, make_settings
from tests.dashboard.conftest import Browser

SCHEDULES = {
    "nightly": {"cron": "0 3 * * *", "timezone": "Europe/Paris", "type": "noop"},
    "tick": {"every_seconds": 60, "type": "noop", "overlap": False},
}


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return make_settings(tmp_path, schedules=SCHEDULES)


def test_the_page_lists_schedules_with_next_and_last_run(browser: Browser) -> None:
    page = html.unescape(browser.get("/ui/schedules").text)
    assert '<a href="/ui/schedules" aria-current="page">' in page
    assert 'data-schedule="nightly"' in page and "<code>0 3 * * *</code> Europe/Paris" in page
    assert 'data-schedule="tick"' in page and "every 60 s" in page and "(no overlap)" in page
    assert "2026-01-01 02:00:00" in page  # nightly's next run: 03:00 in Paris, in UTC
    assert page.count('action="/ui/schedules/tick/pause"') == 1


def test_pause_resume_and_trigger_buttons(browser: Browser, admin: Api) -> None:
    paused = browser.post("/ui/schedules/tick/pause")
    assert paused.status_code == 303
    assert paused.headers["location"] == "/ui/schedules"
    page = browser.get(paused.headers["location"]).text
    assert "The schedule is paused" in page and 'action="/ui/schedules/tick/resume"' in page
    assert admin.get("/schedules/tick").json()["paused"] is True
    triggered = browser.post("/ui/schedules/tick/trigger")
    assert triggered.status_code == 303
    job_id = admin.get("/schedules/tick").json()["last_job_id"]
    assert triggered.headers["location"] == f"/ui/jobs/{job_id}"
    assert "The schedule made this job now." in browser.get(triggered.headers["location"]).text
    page = browser.get("/ui/schedules").text
    assert f'<a href="/ui/jobs/{job_id}">{job_id}</a>' in page
    job_page = browser.get(f"/ui/jobs/{job_id}").text
    assert '<dt>schedule</dt><dd><a href="/ui/schedules">tick</a></dd>' in job_page
    assert browser.post("/ui/schedules/tick/resume").status_code == 303
    assert admin.get("/schedules/tick").json()["paused"] is False


def test_a_form_without_the_csrf_token_changes_nothing(browser: Browser, admin: Api) -> None:
    refused = browser.client.post("/ui/schedules/tick/pause", data={}, follow_redirects=False)
    assert refused.status_code == 403
    assert admin.get("/schedules/tick").json()["paused"] is False
    forged = browser.client.post(
        "/ui/schedules/tick/trigger", data={"csrf_token": "x"}, follow_redirects=False
    )
    assert forged.status_code == 403
    assert admin.get("/schedules/tick").json()["jobs_made"] == 0


def test_an_unknown_schedule_is_the_not_found_page(browser: Browser) -> None:
    assert browser.post("/ui/schedules/nope/pause").status_code == 404
