"""The dashboard's pages and forms, through the same rules as the API."""

from __future__ import annotations

import html
import json
import re

import pytest
from fastapi.testclient import TestClient

from queuelog.clock import FakeClock
from tests.conftest import Api, KeyMaker, claim_one, enqueue
from tests.dashboard.conftest import Browser, log_in


def _fail(worker: Api, error: str = "boom") -> dict[str, object]:
    held = claim_one(worker)
    body = {"lease_token": held["lease_token"], "error": error, "retryable": False}
    response = worker.post(f"/jobs/{held['id']}/fail", json=body)
    assert response.status_code == 200, response.text
    failed: dict[str, object] = response.json()
    return failed


def test_overview_counts_jobs_by_status_and_type_and_lists_leases(
    browser: Browser, producer: Api, worker: Api, clock: FakeClock
) -> None:
    for _ in range(3):
        enqueue(producer, "noop")
    enqueue(producer, "send_email", payload={"to": "a@b.c"})
    held = claim_one(worker, types=["send_email"])
    clock.advance(90)
    page = browser.get("/ui").text
    assert re.search(r'<span class="n">3</span><span class="label">pending</span>', page)
    assert re.search(r'<span class="n">1</span><span class="label">running</span>', page)
    assert re.search(r'<span class="n">3</span><span class="label">ready now</span>', page)
    assert "1 min 30 s" in page  # the oldest ready job has waited that long
    assert f'href="/ui/jobs/{held["id"]}"' in page and "mailer" in page
    assert '<a href="/ui" aria-current="page">' in page
    assert "<svg" in page and 'class="chart"' in page


def test_overview_counts_every_leased_job_and_lists_the_last_claimed(
    browser: Browser, producer: Api, worker: Api
) -> None:
    jobs = [{"type": "noop", "payload": {"n": n}} for n in range(103)]
    assert producer.post("/jobs/batch", json={"jobs": jobs}).status_code == 200
    for limit in (100, 3):
        assert len(worker.post("/jobs/claim", json={"limit": limit}).json()["jobs"]) == limit
    page = browser.get("/ui").text
    assert 'Leased now <small class="muted">103</small>' in page
    assert len(re.findall(r'<td><a href="/ui/jobs/\d+">#', page)) == 100
    assert "The 100 claimed last are shown" in page and 'href="/ui/jobs?status=running"' in page


def test_overview_chart_counts_the_last_hour(browser: Browser, producer: Api, worker: Api) -> None:
    enqueue(producer, "noop", max_retries=0)
    enqueue(producer, "noop")
    _fail(worker)
    held = claim_one(worker)
    worker.post(f"/jobs/{held['id']}/complete", json={"lease_token": held["lease_token"]})
    page = browser.get("/ui").text
    assert "completed <strong>1</strong>" in page and "failed <strong>1</strong>" in page
    assert "1 completed, 1 failed" in page


def test_jobs_list_filters_and_pages(browser: Browser, producer: Api) -> None:
    ids = [enqueue(producer, "noop")["id"] for _ in range(55)]
    keyed = enqueue(producer, "send_email", payload={"to": "x"}, idempotency_key="order-7")
    first = browser.get("/ui/jobs").text
    assert first.count("data-job-id=") == 50 and f'data-job-id="{keyed["id"]}"' in first
    older = re.search(r'href="(/ui/jobs\?[^"]*cursor=[^"]+)"', first)
    assert older
    second = browser.get(older.group(1).replace("&amp;", "&")).text
    assert second.count("data-job-id=") == 6 and f'data-job-id="{ids[0]}"' in second
    by_type = browser.get("/ui/jobs?type=send_email").text
    assert by_type.count("data-job-id=") == 1
    by_key = browser.get("/ui/jobs?idempotency_key=order-7").text
    assert f'data-job-id="{keyed["id"]}"' in by_key and by_key.count("data-job-id=") == 1
    assert browser.get("/ui/jobs?status=running").text.count("data-job-id=") == 0


def test_bad_filters_answer_an_error_page(browser: Browser) -> None:
    assert browser.get("/ui/jobs?status=sleeping").status_code == 422
    bad_cursor = browser.get("/ui/jobs?cursor=nonsense")
    assert bad_cursor.status_code == 422 and "Traceback" not in bad_cursor.text


def test_job_page_shows_payload_result_error_and_events(
    browser: Browser, producer: Api, worker: Api
) -> None:
    job = enqueue(producer, "noop", payload={"n": 1, "note": "héllo"}, max_retries=0)
    _fail(worker, "connect to postgresql://bob:hunter2@db/x failed")
    page = html.unescape(browser.get(f"/ui/jobs/{job['id']}").text)
    assert '"note": "héllo"' in page
    assert "hunter2" not in page and "failed" in page
    assert page.count("<li>") >= 3  # enqueued, claimed, failed
    assert f"/ui/jobs/{job['id']}/retry" in page
    assert "/cancel" not in page


def test_unknown_job_is_a_404_page(browser: Browser) -> None:
    for path in ("/ui/jobs/424242", "/ui/jobs/not-a-number", "/ui/nothing/here"):
        response = browser.get(path)
        assert response.status_code == 404
        assert response.headers["content-type"].startswith("text/html")
        assert "Not found" in response.text and "Traceback" not in response.text


def test_retry_button_requeues_a_failed_job_as_the_admin(
    browser: Browser, producer: Api, worker: Api, admin: Api
) -> None:
    job = enqueue(producer, "noop", max_retries=0)
    _fail(worker)
    response = browser.post(f"/ui/jobs/{job['id']}/retry")
    assert response.status_code == 303
    assert response.headers["location"] == f"/ui/jobs/{job['id']}"
    assert "The job is pending again." in browser.get(response.headers["location"]).text
    after = admin.get(f"/jobs/{job['id']}").json()
    assert after["status"] == "pending" and after["retry_count"] == 0
    last = admin.get(f"/jobs/{job['id']}/events").json()["events"][-1]
    assert (last["event"], last["actor"]) == ("requeued", "root")
    again = browser.post(f"/ui/jobs/{job['id']}/retry")
    assert again.status_code == 409 and "pending" in again.text


def test_cancel_button_cancels_a_pending_job(browser: Browser, producer: Api, admin: Api) -> None:
    job = enqueue(producer, "noop")
    assert browser.post(f"/ui/jobs/{job['id']}/cancel").status_code == 303
    assert admin.get(f"/jobs/{job['id']}").json()["status"] == "cancelled"
    page = browser.get(f"/ui/jobs/{job['id']}").text
    assert "The job was cancelled." in page and "/retry" in page
    assert "The job was cancelled." not in browser.get(f"/ui/jobs/{job['id']}").text  # once


def test_hardening_38_no_link_puts_a_notice_on_a_page(
    browser: Browser, client: TestClient, producer: Api, worker: Api
) -> None:
    job = enqueue(producer, "noop")
    forged = [
        "/ui/jobs?type=noop&notice=requeued&count=5000",
        f"/ui/jobs/{job['id']}?notice=cancelled",
        "/ui/types?notice=type-paused",
        "/ui/keys?notice=key-revoked",
        "/ui/schedules?notice=paused",
    ]
    for url in forged:
        page = browser.get(url)
        assert page.status_code == 200 and 'role="status"' not in page.text, url
    # A notice is the session's own, left by its form: another session's page has none.
    enqueue(producer, "noop", max_retries=0)
    _fail(worker)
    other = TestClient(client.app)  # the same admin, logged in from another browser
    assert log_in(other, browser.key).status_code == 303
    assert browser.post("/ui/retry-failed", type="noop").status_code == 303
    assert 'role="status"' not in other.get("/ui/jobs?type=noop").text
    listing = browser.get("/ui/jobs?type=noop").text
    assert "1 failed job(s) of this type are pending again." in listing


def test_retry_all_failed_of_a_type_confirms_the_count_first(
    browser: Browser, producer: Api, worker: Api, admin: Api
) -> None:
    for _ in range(3):
        enqueue(producer, "noop", max_retries=0)
    enqueue(producer, "send_email", payload={"to": "x"}, max_retries=0)
    for _ in range(4):
        _fail(worker)
    overview = browser.get("/ui").text
    assert 'href="/ui/retry-failed?type=noop">Retry 3 failed</a>' in overview
    confirm = browser.get("/ui/retry-failed?type=noop").text
    assert '<strong id="count">3</strong>' in confirm
    done = browser.post("/ui/retry-failed", type="noop")
    assert done.status_code == 303 and done.headers["location"].startswith("/ui/jobs?type=noop")
    listing = browser.get(done.headers["location"]).text
    assert "3 failed job(s) of this type are pending again." in listing
    stats = admin.get("/stats").json()["by_type"]
    assert stats["noop"]["pending"] == 3 and stats["send_email"]["failed"] == 1


def test_keys_page_creates_a_key_shown_once_and_revokes_it(
    browser: Browser, client: TestClient
) -> None:
    created = browser.post("/ui/keys", name="shop-2", roles="producer", max_priority="high")
    assert created.status_code == 201
    plaintext = re.search(r'<pre class="secret" id="new-key">(ql_\w+)</pre>', created.text)
    assert plaintext
    key = plaintext.group(1)
    jobs = client.get("/jobs", headers={"Authorization": f"Bearer {key}"})
    assert jobs.status_code == 200
    listing = browser.get("/ui/keys").text
    assert "shop-2" in listing and key not in listing
    key_id = re.search(r'<tr data-key-id="(\d+)"\s*>\s*<td>\d+</td>\s*<td>shop-2', listing)
    assert key_id
    revoked = browser.post(f"/ui/keys/{key_id.group(1)}/revoke")
    assert revoked.status_code == 303
    again = client.get("/jobs", headers={"Authorization": f"Bearer {key}"})
    assert again.status_code == 401


def test_revoking_your_own_or_the_last_admin_key_says_so_before(
    browser: Browser, make_key: KeyMaker
) -> None:
    """The confirmation names what the revoke costs: the session, and every admin's way in
    but the server's own CLI."""

    def confirm_of(name: str) -> str:
        page = html.unescape(browser.get("/ui/keys").text)
        row = re.search(rf"<td>{name}(?:</td>| <small).*?data-confirm=\"([^\"]*)\"", page, re.S)
        assert row, name
        return row.group(1)

    alone = confirm_of("root")
    assert "You are signed in with it" in alone and "last active admin key" in alone
    make_key("root-2", "admin")
    shared = confirm_of("root")
    assert "You are signed in with it" in shared and "last active admin key" not in shared
    other = confirm_of("root-2")
    assert "signed in" not in other and "last active" not in other


def test_key_form_is_checked_like_the_api(browser: Browser) -> None:
    no_role = browser.post("/ui/keys", name="x")
    assert no_role.status_code == 422 and "Choose at least one role" in no_role.text
    bad_name = browser.post("/ui/keys", name="<b>", roles="worker")
    assert bad_name.status_code == 422 and "<b>" not in bad_name.text
    bad_type = browser.post("/ui/keys", name="w", roles="worker", types="nope")
    assert bad_type.status_code == 422 and "not configured" in bad_type.text


def test_user_text_is_escaped(browser: Browser, producer: Api, worker: Api) -> None:
    job = enqueue(producer, "noop", payload={"html": "<script>alert(1)</script>"}, max_retries=0)
    _fail(worker, "<img src=x onerror=alert(2)>")
    page = browser.get(f"/ui/jobs/{job['id']}").text
    assert "<script>alert(1)" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(2)&gt;" in page


def test_hardening_02_the_page_of_a_big_payload_stays_bounded(
    browser: Browser, producer: Api
) -> None:
    # About 60 KB stored, megabytes once every element sits on an indented line.
    payload: object = [1] * 29_000
    for _ in range(60):
        payload = [payload]
    job = enqueue(producer, payload={"deep": payload})
    page = browser.get(f"/ui/jobs/{job['id']}")
    assert page.status_code == 200
    assert len(page.content) < 100 * 1024
    assert "cut here: only the first 64 KiB of the indented JSON are shown" in page.text
    small = enqueue(producer, payload={"n": 1})
    assert "cut here" not in browser.get(f"/ui/jobs/{small['id']}").text


def test_hardening_09_ids_beyond_the_api_s_bounds_are_404(browser: Browser) -> None:
    for job_id in ("9223372036854775808", "0", "-1", "1" * 40, "9" * 5000):
        assert browser.get(f"/ui/jobs/{job_id}").status_code == 404, job_id[:40]
        for action in ("retry", "cancel"):
            assert browser.post(f"/ui/jobs/{job_id}/{action}").status_code == 404, job_id[:40]
    assert browser.post("/ui/keys/9223372036854775808/revoke").status_code == 404


def test_hardening_36_an_id_the_api_would_not_read_names_no_dashboard_page(
    browser: Browser, producer: Api
) -> None:
    jobs = [enqueue(producer) for _ in range(10)]
    assert jobs[-1]["id"] == 10 and jobs[0]["id"] == 1
    # int() reads each of these as a job's id (10 or 1); the API's paths take digits alone.
    for job_id in ("1_0", "+1", "1.0", "%201", "1%20", "%2B1", "010", "01"):
        assert browser.get(f"/ui/jobs/{job_id}").status_code == 404, job_id
        assert producer.get(f"/jobs/{job_id}").status_code == 404, job_id
        for action in ("retry", "cancel"):
            assert browser.post(f"/ui/jobs/{job_id}/{action}").status_code == 404, job_id
    assert browser.post("/ui/keys/+1/revoke").status_code == 404
    assert all(producer.get(f"/jobs/{job['id']}").json()["status"] == "pending" for job in jobs)
    assert browser.get("/ui/jobs/10").status_code == 200


def test_progress_shows_on_the_job_page_the_leases_and_the_jobs_list(
    browser: Browser, producer: Api, worker: Api
) -> None:
    job = enqueue(producer, "noop", unique_key="nightly-7")
    held = claim_one(worker)
    progress = {"step": "<b>resize</b>", "done": 3, "of": 10, "notes": "n" * 300}
    beat = worker.post(
        f"/jobs/{job['id']}/heartbeat",
        json={"lease_token": held["lease_token"], "progress": progress},
    )
    assert beat.status_code == 200
    page = browser.get(f"/ui/jobs/{job['id']}").text
    shown = re.search(r'<pre class="json" id="progress">(.*?)</pre>', page, re.DOTALL)
    assert shown and json.loads(html.unescape(shown.group(1))) == progress
    assert "nightly-7" in page and "<b>resize</b>" not in page
    for listing in (browser.get("/ui").text, browser.get("/ui/jobs?status=running").text):
        cells = re.findall(r'<td class="progress">(.*?)</td>', listing)
        assert len(cells) == 1, listing
        cell = html.unescape(cells[0])
        assert cell.startswith('{"done": 3, "notes": "nnn') and cell.endswith("…")
        assert len(cell) == 120
    assert "None reported." in browser.get(f"/ui/jobs/{enqueue(producer)['id']}").text


def test_hardening_37_an_idempotency_key_filter_no_key_could_match_is_422(
    browser: Browser,
) -> None:
    # PostgreSQL's text holds no NUL: the filter is refused before any query, as on SQLite.
    for value in ("a%00b", "%00", "%C3%A9", "k" * 256):
        page = browser.get(f"/ui/jobs?idempotency_key={value}")
        assert page.status_code == 422, value
        assert "idempotency_key: String should be at most 255 printable ASCII" in page.text
    assert browser.get("/ui/jobs?idempotency_key=order-7%20x").status_code == 200


def test_a_query_value_out_of_bounds_is_a_422_page_naming_it(browser: Browser) -> None:
    cases = {
        "type=%01": "type: String should be at most 100 characters, none of them a control",
        "depends_on=x": "depends_on: String should be a job id",
        "status=bogus": "Unknown status",
    }
    for query, said in cases.items():
        page = browser.get(f"/ui/jobs?{query}")
        assert page.status_code == 422, query
        assert said in page.text and "pattern" not in page.text, page.text
    assert browser.get("/ui/jobs/abc").status_code == 404  # no page has that path


@pytest.mark.parametrize("job_type", ["x" * 300_000, "a\x00b", "a\r\nLocation: /evil", ""])
def test_hardening_21_retry_failed_takes_a_type_name_as_bounded_as_its_page(
    browser: Browser, job_type: str
) -> None:
    done = browser.post("/ui/retry-failed", type=job_type)
    assert done.status_code == 422 and "location" not in done.headers
    assert "1-100 characters" in done.text
    if len(job_type) < 1000:  # (a longer query is refused by the test's own client)
        assert browser.get("/ui/retry-failed", params={"type": job_type}).status_code == 422


def test_hardening_23_a_payloads_hidden_characters_are_shown_escaped(
    browser: Browser, producer: Api
) -> None:
    job = enqueue(producer, payload={"name": "invoice\u202egnp.exe", "tag": "a\u200bb"})
    page = browser.get(f"/ui/jobs/{job['id']}").text
    assert "\u202e" not in page and "\u200b" not in page
    assert "invoice\\u202egnp.exe" in page and "a\\u200bb" in page


def test_pages_answer_head_with_their_headers_and_no_body(
    browser: Browser, client: TestClient
) -> None:
    page = browser.get("/ui/jobs")
    head = browser.client.head("/ui/jobs", follow_redirects=False)
    assert head.status_code == 200 and head.content == b""
    for name in ("content-type", "content-security-policy", "cache-control"):
        assert head.headers.get(name) == page.headers.get(name), name
    browser.client.cookies.clear()
    assert client.head("/ui/login").status_code == 200
    logged_out = client.head("/ui", follow_redirects=False)
    assert logged_out.status_code == 303 and logged_out.headers["location"] == "/ui/login"


def test_a_create_key_form_sent_again_makes_no_second_key(browser: Browser, admin: Api) -> None:
    """The page that shows a new key answers the form's post: reloading it posts again."""
    form_id = _form_id(browser.get("/ui/keys").text)
    fields = {"name": "shop-3", "roles": "producer", "form_id": form_id}
    assert browser.post("/ui/keys", **fields).status_code == 201
    again = browser.post("/ui/keys", **fields)
    assert again.status_code == 409 and "sent already" in again.text
    assert 'id="new-key"' not in again.text
    names = [k["name"] for k in admin.get("/keys").json()["keys"]]
    assert names.count("shop-3") == 1
    # A fresh form from the page makes another.
    fresh = _form_id(again.text)
    assert fresh != form_id
    assert browser.post("/ui/keys", **{**fields, "form_id": fresh}).status_code == 201


def test_a_create_key_form_refused_may_be_sent_again_and_its_id_is_bounded(
    browser: Browser, admin: Api
) -> None:
    form_id = _form_id(browser.get("/ui/keys").text)
    fields = {"name": "bad name!", "roles": "producer", "form_id": form_id}
    assert browser.post("/ui/keys", **fields).status_code == 422
    # No key was made: the same form, mended, makes one.
    assert browser.post("/ui/keys", **{**fields, "name": "mended"}).status_code == 201
    for forged in ("x" * 65, "a b", "<b>"):
        refused = browser.post("/ui/keys", **{**fields, "name": "forged", "form_id": forged})
        assert refused.status_code == 422 and "reload it" in refused.text
    names = [k["name"] for k in admin.get("/keys").json()["keys"]]
    assert names.count("mended") == 1 and "forged" not in names


def _form_id(page: str) -> str:
    """The create-key form's id on a keys page."""
    found = re.search(r'name="form_id" value="([\w-]+)"', page)
    assert found, "no create-key form"
    return found.group(1)


def test_hardening_23_hidden_characters_from_a_link_are_shown_escaped(browser: Browser) -> None:
    # Reflected in a refusal, or in a page that names what a link asked for.
    for path, status in (
        ("/ui/jobs?status=%E2%80%AEdeliaf", 422),
        ("/ui/retry-failed?type=%E2%80%AEexe.gnp", 200),
        ("/ui/jobs?type=a%E2%80%8Bb", 200),
    ):
        page = browser.get(path)
        assert page.status_code == status, (path, page.status_code)
        assert "\u202e" not in page.text and "\u200b" not in page.text, path
    assert "\\u202edeliaf" in browser.get("/ui/jobs?status=%E2%80%AEdeliaf").text
