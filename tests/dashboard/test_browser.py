"""The dashboard in a real browser: Debian's Chromium, headless, driven by Playwright.

With CI=true a missing browser fails the run; elsewhere these tests skip.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from queuelog.config import Settings
from queuelog.storage.sqlite.store import SqliteStorage
from tests.conftest import TYPES, make_settings
from tests.dashboard.seed import seed_every_state
from tests.realserver import RealServer, closing

pytestmark = pytest.mark.slow

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TIMEOUT_MS = 30_000
SCREENSHOT = Path(__file__).resolve().parents[2] / "docs" / "dashboard.png"


def _missing_browser() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the playwright package is not installed"
    if not CHROMIUM.exists():
        return f"{CHROMIUM} is missing (apt-get install chromium)"
    return None


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    problem = _missing_browser()
    if problem is not None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"browser tests cannot run: {problem}")
        pytest.skip(problem)
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=TIMEOUT_MS)
    with sync_playwright() as driver:
        browser = driver.chromium.launch(
            executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True
        )
        yield browser
        browser.close()


class Site:
    """A live server with its own database, and keys to call its API with."""

    def __init__(self, settings: Settings, server: RealServer, storage: SqliteStorage) -> None:
        self.settings = settings
        self.url = server.url
        self.storage = storage
        self._clients: list[httpx.Client] = []
        self.admin_key = server.keys["root"]
        self.producer = self.api(server.keys["shop"])
        self.worker = self.api(server.keys["mailer"])

    def api(self, key: str) -> httpx.Client:
        headers = {"Authorization": f"Bearer {key}"}
        client = httpx.Client(base_url=self.url, headers=headers, timeout=30)
        self._clients.append(client)
        return client

    def close(self) -> None:
        for client in self._clients:
            client.close()

    def enqueue(self, **body: Any) -> dict[str, Any]:
        response = self.producer.post("/jobs", json={"type": "noop", **body})
        assert response.status_code == 201, response.text
        job: dict[str, Any] = response.json()
        return job

    def fail_next(self, error: str) -> dict[str, Any]:
        (held,) = self.worker.post("/jobs/claim", json={}).json()["jobs"]
        body = {"lease_token": held["lease_token"], "error": error, "retryable": False}
        response = self.worker.post(f"/jobs/{held['id']}/fail", json=body)
        assert response.status_code == 200, response.text
        job: dict[str, Any] = response.json()
        return job


@pytest.fixture
def site(tmp_path: Path, chromium: Any) -> Iterator[Site]:
    """``queuelog serve`` on the shared test settings; this process seeds the same database."""
    with closing(RealServer(tmp_path, types=TYPES)) as server:
        for name, role in (("root", "admin"), ("shop", "producer"), ("mailer", "worker")):
            server.create_key(name, role, max_priority="critical")
        server.start()
        settings = make_settings(tmp_path)
        assert settings.sqlite_path == server.database
        storage = SqliteStorage(server.database)
        running = Site(settings, server, storage)
        try:
            yield running
        finally:
            running.close()
            storage.close()


@pytest.fixture
def dialogs() -> list[str]:
    """The messages of every alert or confirm the page opened (each one is accepted)."""
    return []


@pytest.fixture
def page(chromium: Any, site: Site, dialogs: list[str]) -> Iterator[Any]:
    context = chromium.new_context(base_url=site.url, viewport={"width": 1280, "height": 900})
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()

    def on_dialog(dialog: Any) -> None:
        dialogs.append(dialog.message)
        dialog.accept()

    page.on("dialog", on_dialog)
    yield page
    context.close()


def log_in(page: Any, site: Site) -> None:
    from playwright.sync_api import expect

    page.goto("/ui")
    expect(page).to_have_url(f"{site.url}/ui/login")
    page.fill("#key", site.admin_key)
    page.click("button[type=submit]")
    expect(page).to_have_url(f"{site.url}/ui")
    expect(page.locator("h1")).to_contain_text("Overview")


def test_a_job_enqueued_through_the_api_appears(page: Any, site: Site) -> None:
    from playwright.sync_api import expect

    log_in(page, site)
    page.goto("/ui/jobs")
    expect(page.locator("text=No job matches.")).to_be_visible()
    job = site.enqueue()
    # The list refreshes itself: no reload here.
    row = page.locator(f'tr[data-job-id="{job["id"]}"]')
    expect(row).to_be_visible()
    expect(row).to_contain_text("pending")


def test_the_pager_refreshes_with_the_list(page: Any, site: Site) -> None:
    """The older page starts after the last row on screen: jobs enqueued since the page
    was loaded move rows down without hiding any between the pages."""
    from playwright.sync_api import expect

    for _ in range(51):
        site.enqueue()
    log_in(page, site)
    page.goto("/ui/jobs")
    newest = [site.enqueue() for _ in range(3)][-1]
    expect(page.locator(f'tr[data-job-id="{newest["id"]}"]')).to_be_visible()
    last_row = page.locator("tr[data-job-id]").last.get_attribute("data-job-id")
    older = page.locator("p.pager a", has_text="Older").get_attribute("href")
    assert older is not None and older.endswith(f"cursor={last_row}")


def test_retry_button_puts_a_failed_job_back_to_pending(
    page: Any, site: Site, dialogs: list[str]
) -> None:
    from playwright.sync_api import expect

    job = site.enqueue(max_retries=0)
    site.fail_next("boom")
    log_in(page, site)
    page.goto(f"/ui/jobs/{job['id']}")
    expect(page.locator("h1 .badge")).to_have_text("failed")
    page.click("button:text('Retry')")
    expect(page.locator("h1 .badge")).to_have_text("pending")
    expect(page.locator(".notice")).to_have_text("The job is pending again.")
    expect(page.locator(".timeline li").last).to_contain_text("requeued")
    expect(page.locator(".timeline li").last).to_contain_text("root")
    assert dialogs == [f"Retry job #{job['id']}?"]


def test_cancel_button_cancels_a_pending_job(page: Any, site: Site) -> None:
    from playwright.sync_api import expect

    job = site.enqueue()
    log_in(page, site)
    page.goto(f"/ui/jobs/{job['id']}")
    page.click("button:text('Cancel')")
    expect(page.locator("h1 .badge")).to_have_text("cancelled")
    admin = site.api(site.admin_key)
    assert admin.get(f"/jobs/{job['id']}").json()["status"] == "cancelled"


def test_create_a_key_then_revoke_it(page: Any, site: Site) -> None:
    from playwright.sync_api import expect

    log_in(page, site)
    page.click("nav >> text=Keys")
    page.fill("input[name=name]", "billing")
    page.check("input[name=roles][value=producer]")
    page.click("button:text('Create key')")
    secret = page.locator("#new-key")
    expect(secret).to_be_visible()
    key = secret.inner_text().strip()
    assert key.startswith("ql_")
    api = site.api(key)
    assert api.get("/jobs").status_code == 200
    row = page.locator("tr", has=page.locator("td", has_text="billing"))
    row.locator("button:text('Revoke')").click()
    expect(page.locator(".notice")).to_contain_text("revoked")
    expect(page.locator("#new-key")).to_have_count(0)
    assert api.get("/jobs").status_code == 401


def test_html_in_payload_and_error_is_shown_as_text(
    page: Any, site: Site, dialogs: list[str]
) -> None:
    from playwright.sync_api import expect

    job = site.enqueue(payload={"note": "<script>alert(1)</script>"}, max_retries=0)
    site.fail_next('<img src=x onerror="alert(2)"><b>bold')
    log_in(page, site)
    page.goto(f"/ui/jobs/{job['id']}")
    expect(page.locator("#payload")).to_contain_text("<script>alert(1)</script>")
    expect(page.locator("#error")).to_contain_text('<img src=x onerror="alert(2)"><b>bold')
    assert page.locator("#error b").count() == 0 and page.locator("#error img").count() == 0
    page.goto("/ui/jobs")
    expect(page.locator(f'tr[data-job-id="{job["id"]}"]')).to_contain_text("failed")
    page.goto("/ui")
    expect(page.locator(".tile.t-failed .n")).to_have_text("1")
    assert dialogs == []


def test_log_out(page: Any, site: Site) -> None:
    from playwright.sync_api import expect

    log_in(page, site)
    page.click("button:text('Log out')")
    expect(page).to_have_url(f"{site.url}/ui/login")
    page.goto("/ui/keys")
    expect(page).to_have_url(f"{site.url}/ui/login?next=%2Fui%2Fkeys")
    # Logging in again leads back to the page asked for.
    page.fill("#key", site.admin_key)
    page.click("button[type=submit]")
    expect(page).to_have_url(f"{site.url}/ui/keys")


def test_overview_shows_every_state(page: Any, site: Site, tmp_path: Path) -> None:
    """Also makes the README's screenshot (written when QUEUELOG_WRITE_SCREENSHOT=1)."""
    from playwright.sync_api import expect

    seed_every_state(site.settings, site.storage, site.producer, site.worker)
    log_in(page, site)
    for status in ("pending", "running", "completed", "failed", "cancelled"):
        tile = page.locator(f".tile.t-{status} .n")
        expect(tile).not_to_have_text("0")
    expect(page.locator(".chart rect.completed")).to_have_count(60)
    shot = tmp_path / "dashboard.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    if os.environ.get("QUEUELOG_WRITE_SCREENSHOT") == "1":
        SCREENSHOT.parent.mkdir(exist_ok=True)
        shutil.copyfile(shot, SCREENSHOT)


def test_every_page_loads_whole_and_fits_a_phone(chromium: Any, site: Site) -> None:
    """At a phone's width (390 px) no page scrolls sideways (wide tables scroll in their
    own box), and nothing a page asks for is refused or missing (its icon included)."""
    from playwright.sync_api import expect

    seed_every_state(site.settings, site.storage, site.producer, site.worker)
    site.api(site.admin_key).post(
        "/schedules", json={"name": "nightly-report", "type": "noop", "cron": "0 3 * * *"}
    )
    job = site.enqueue(payload={"to": "someone-with-a-long-address@example.com"})
    context = chromium.new_context(base_url=site.url, viewport={"width": 390, "height": 844})
    try:
        page = context.new_page()
        refused: list[str] = []
        page.on(
            "response", lambda r: refused.append(f"{r.status} {r.url}") if r.status >= 400 else None
        )
        # A request the browser drops as it leaves the page (net::ERR_ABORTED: the icon
        # still loading when the test goes on) is not the server's refusal.
        page.on(
            "requestfailed",
            lambda r: None if r.failure == "net::ERR_ABORTED" else refused.append(r.url),
        )
        log_in(page, site)
        for path in (
            "/ui",
            "/ui/jobs",
            f"/ui/jobs/{job['id']}",
            "/ui/schedules",
            "/ui/types",
            "/ui/keys",
        ):
            page.goto(path)
            expect(page.locator("h1")).to_be_visible()
            wide = page.evaluate("document.documentElement.scrollWidth")
            assert wide <= 390, (path, wide)
        assert refused == []
        # Headless Chromium asks for no icon: the one each page names must load.
        icon = page.locator("link[rel=icon]").get_attribute("href")
        answer = page.request.get(icon)
        assert answer.status == 200 and answer.headers["content-type"] == "image/svg+xml"
    finally:
        context.close()
