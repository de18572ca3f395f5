"""The dashboard's types page: limits, running against the limit, pause and resume."""

from __future__ import annotations

import html
import re
from pathlib import Path
from typing import Any

import pytest

from queuelog.config import Settings
from tests.conftest import TYPES, Api, claim_one, enqueue, make_settings
from tests.dashboard.conftest import Browser


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    types: dict[str, Any] = {
        **TYPES,
        "partner": {
            "concurrency": 3,
            "group_concurrency": 1,
            "rate_limit": {"jobs": 10, "per_seconds": 2},
        },
        "team/mail": {},  # a name with a slash: its buttons' path has it
        "a/../noop": {},  # a browser would resolve its dot segment: it must not
    }
    return make_settings(tmp_path, types=types)


def _row(page: str, name: str) -> str:
    start = page.index(f'data-type="{name}"')
    return page[start : page.index("</tr>", start)]


def test_types_page_shows_limits_and_running_against_them(
    browser: Browser, producer: Api, worker: Api
) -> None:
    first = enqueue(producer, "partner", group="a")
    enqueue(producer, "partner", group="a")
    enqueue(producer, "partner", depends_on=[first["id"]])
    claim_one(worker, types=["partner"])
    page = html.unescape(browser.get("/ui/types").text)
    assert '<a href="/ui/types" aria-current="page">' in page
    row = _row(page, "partner")
    assert "1 / 3" in row and "10 per 2.0 s" in row and "not paused" in row
    pending, waiting, failed = re.findall(r'<td class="num">(\d+)</td>', row)[-3:]
    assert (pending, waiting, failed) == ("1", "1", "0")
    job_page = browser.get(f"/ui/jobs/{first['id']}").text
    assert "<dt>group</dt><dd>a</dd>" in job_page
    assert "Pause" in row
    assert "no limit" in _row(page, "noop")


def test_pause_and_resume_from_the_page(browser: Browser, producer: Api, worker: Api) -> None:
    enqueue(producer, "noop")
    paused = browser.post("/ui/types/noop/pause")
    assert paused.status_code == 303
    assert paused.headers["location"] == "/ui/types"
    page = html.unescape(browser.get("/ui/types").text)
    assert "The type is paused" in page and "paused by root" in _row(page, "noop")
    assert worker.post("/jobs/claim", json={}).json()["jobs"] == []
    resumed = browser.post("/ui/types/noop/resume")
    assert resumed.headers["location"] == "/ui/types"
    page = browser.get("/ui/types").text
    assert "The type is resumed" in page and "Pause" in _row(page, "noop")
    claim_one(worker)


def test_pause_forms_need_the_csrf_token_and_a_configured_type(browser: Browser) -> None:
    assert browser.client.post("/ui/types/noop/pause", data={}).status_code == 403
    refused = browser.client.post("/ui/types/noop/pause", data={"csrf_token": "wrong"})
    assert refused.status_code == 403
    assert "paused by" not in browser.get("/ui/types").text
    assert browser.post("/ui/types/nope/pause").status_code == 404


def test_hardening_20_a_type_named_with_a_slash_is_paused_and_resumed_from_its_buttons(
    browser: Browser, admin: Api
) -> None:
    page = browser.get("/ui/types").text
    assert 'action="/ui/types/team%2Fmail/pause"' in _row(page, "team/mail")
    assert 'action="/ui/types/a%2F..%2Fnoop/pause"' in _row(page, "a/../noop")
    assert browser.post("/ui/types/team%2Fmail/pause").status_code == 303
    paused = {t["name"]: t["paused"] for t in admin.get("/types").json()["types"]}
    assert paused["team/mail"] and not paused["noop"]
    assert browser.post("/ui/types/team/mail/resume").status_code == 303
    assert not {t["name"]: t for t in admin.get("/types").json()["types"]}["team/mail"]["paused"]
