"""The dashboard's job page shows a job's history a page at a time."""

from __future__ import annotations

import html
import re

from tests.api.test_reading import replaced
from tests.conftest import Api
from tests.dashboard.conftest import Browser


def test_hardening_46_a_job_page_shows_its_history_a_hundred_events_at_a_time(
    browser: Browser, producer: Api
) -> None:
    """5,000 replacements made a 1 MB page: the page shows 100 events and links to the
    next hundred, and back to the first."""
    job_id = replaced(producer, 150)
    page = browser.get(f"/ui/jobs/{job_id}").text
    assert page.count('<strong class="event">') == 100 and "« The first events" not in page
    later = re.search(r'href="(/ui/jobs/\d+\?events_cursor=\d+#events)">Later events', page)
    assert later, "no link to the later events"
    rest = browser.get(html.unescape(later.group(1))).text
    assert rest.count('<strong class="event">') == 51 and "Later events" not in rest
    assert f'href="/ui/jobs/{job_id}#events">« The first events' in rest
    assert browser.get(f"/ui/jobs/{job_id}?events_cursor=x").status_code == 422
