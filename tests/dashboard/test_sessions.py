"""Login, sessions, cookies, CSRF and security headers of the dashboard."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from queuelog.api.app import create_app
from queuelog.clock import FakeClock
from queuelog.config import Settings
from queuelog.storage.sqlite.store import SqliteStorage
from tests.conftest import Api, KeyMaker, enqueue
from tests.dashboard.conftest import Browser, csrf_of, log_in


def test_ui_redirects_to_login_when_not_logged_in(client: TestClient) -> None:
    for path, login in [
        ("/ui", "/ui/login"),
        ("/ui/jobs", "/ui/login?next=%2Fui%2Fjobs"),
        ("/ui/jobs/1", "/ui/login?next=%2Fui%2Fjobs%2F1"),
        ("/ui/jobs?status=failed", "/ui/login?next=%2Fui%2Fjobs%3Fstatus%3Dfailed"),
    ]:
        response = client.get(path, follow_redirects=False)
        assert response.status_code == 303, path
        assert response.headers["location"] == login
    # A form posted without a session is not posted again after the login.
    refused = client.post("/ui/keys", data={"name": "x"}, follow_redirects=False)
    assert refused.status_code == 303 and refused.headers["location"] == "/ui/login"


def test_a_login_leads_back_to_the_page_asked_for(client: TestClient, make_key: KeyMaker) -> None:
    _, key = make_key("root", "admin")
    login = client.get("/ui/jobs?status=failed", follow_redirects=True)
    assert login.url.path == "/ui/login"
    assert '<input type="hidden" name="next" value="/ui/jobs?status=failed">' in login.text
    data = {"csrf_token": csrf_of(login.text), "key": "ql_wrong", "next": "/ui/jobs?status=failed"}
    again = client.post("/ui/login", data=data, follow_redirects=False)
    assert again.status_code == 401 and 'value="/ui/jobs?status=failed"' in again.text
    data = {**data, "csrf_token": csrf_of(again.text), "key": key}
    done = client.post("/ui/login", data=data, follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"] == "/ui/jobs?status=failed"
    # The login form's token has served: its cookie goes.
    assert 'queuelog_login=""' in done.headers["set-cookie"]
    # Logged in already: the form sends the browser straight on.
    on = client.get("/ui/login?next=/ui/keys", follow_redirects=False)
    assert on.headers["location"] == "/ui/keys"


@pytest.mark.parametrize(
    "elsewhere",
    [
        "//evil.example",
        "https://evil.example/ui/",
        "/ui//evil.example",
        "/ui\\evil.example",
        "/uix",
        "/ui/login",
        "/ui/logout",
        "/ui/\r\nSet-Cookie:x=1",
        "javascript:alert(1)",
        "/ui/../docs",
        "/ui/%2e%2e/openapi.json",
        "/ui/%252e%252e/docs",
        "/ui/./login",
        "/ui/%6Cogin",
        "/ui/%2F%2Fevil.example",
        "",
    ],
)
def test_a_login_never_leads_off_the_dashboard(
    client: TestClient, make_key: KeyMaker, elsewhere: str
) -> None:
    _, key = make_key("root", "admin")
    form = client.get("/ui/login", params={"next": elsewhere})
    assert 'name="next"' not in form.text
    data = {"csrf_token": csrf_of(form.text), "key": key, "next": elsewhere}
    done = client.post("/ui/login", data=data, follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"] == "/ui"


def test_admin_logs_in_and_sees_the_overview(browser: Browser) -> None:
    page = browser.get("/ui")
    assert page.status_code == 200
    assert "Overview" in page.text and "root" in page.text
    assert browser.key not in page.text


def test_producer_and_worker_keys_cannot_log_in(client: TestClient, make_key: KeyMaker) -> None:
    for role in ("producer", "worker"):
        _, key = make_key(f"a-{role}", role)
        response = log_in(client, key)
        assert response.status_code == 403
        assert "does not have the admin role" in response.text
        assert key not in response.text
        assert client.get("/ui", follow_redirects=False).status_code == 303


def test_unknown_or_revoked_key_cannot_log_in(
    client: TestClient, make_key: KeyMaker, admin: Api
) -> None:
    response = log_in(client, "ql_not-a-key")
    assert response.status_code == 401 and "not valid" in response.text
    key, plaintext = make_key("old", "admin")
    assert admin.delete(f"/keys/{key.id}").status_code == 204
    assert log_in(client, plaintext).status_code == 401


def test_login_without_or_with_a_wrong_csrf_token_is_refused(
    client: TestClient, make_key: KeyMaker
) -> None:
    _, key = make_key("root", "admin")
    client.get("/ui/login")
    assert client.post("/ui/login", data={"key": key}).status_code == 403
    wrong = {"key": key, "csrf_token": "x" * 43}
    assert client.post("/ui/login", data=wrong).status_code == 403
    assert client.get("/ui", follow_redirects=False).status_code == 303


def test_forms_without_or_with_a_wrong_csrf_token_are_refused(
    browser: Browser, producer: Api, admin: Api
) -> None:
    job = enqueue(producer)
    url = f"/ui/jobs/{job['id']}/cancel"
    assert browser.client.post(url, data={}).status_code == 403
    refused = browser.client.post(url, data={"csrf_token": "wrong"})
    assert refused.status_code == 403 and "Form refused" in refused.text
    # A token from another session does not do either.
    assert admin.get(f"/jobs/{job['id']}").json()["status"] == "pending"
    assert browser.client.post("/ui/logout", data={}).status_code == 403
    assert browser.get("/ui").status_code == 200


def test_session_cookie_flags(client: TestClient, make_key: KeyMaker) -> None:
    _, key = make_key("root", "admin")
    response = log_in(client, key)
    cookie = response.headers["set-cookie"]
    parts = [p.strip().lower() for p in cookie.split(";")]
    assert parts[0].startswith("queuelog_session=")
    assert "httponly" in parts and "samesite=strict" in parts and "path=/ui" in parts
    assert "max-age=28800" in parts and any(p.startswith("expires=") for p in parts)
    assert "secure" not in parts
    assert key not in cookie


def test_session_cookie_is_secure_over_https(client: TestClient, make_key: KeyMaker) -> None:
    _, key = make_key("root", "admin")
    secure = TestClient(client.app, base_url="https://testserver")
    response = log_in(secure, key)
    assert response.status_code == 303
    assert "secure" in [p.strip().lower() for p in response.headers["set-cookie"].split(";")]


def test_security_headers_on_every_dashboard_answer(browser: Browser) -> None:
    for path in ("/ui", "/ui/jobs", "/ui/jobs/999", "/ui/keys", "/ui/static/dashboard.css"):
        headers = browser.get(path).headers
        assert headers["content-security-policy"] == (
            "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
            "frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
        ), path
        assert headers["x-content-type-options"] == "nosniff"
        assert headers["referrer-policy"] == "no-referrer"
    assert browser.client.get("/ui/login").headers["x-content-type-options"] == "nosniff"
    # What the router and the middleware answer under /ui carries them too.
    refusals = [
        browser.client.put("/ui/keys"),  # 405
        browser.client.post("/ui/keys", content=b"x" * 2_000_000),  # 413
        browser.client.post("/ui/login", content=b"k", headers={"content-type": "text/plain"}),
    ]
    assert [r.status_code for r in refusals] == [405, 413, 415]
    for refusal in refusals:
        assert refusal.headers["x-frame-options"] == "DENY", refusal.status_code
        assert "frame-ancestors 'none'" in refusal.headers["content-security-policy"]
    # The API's answers do not (they are not pages).
    assert "x-frame-options" not in browser.client.get("/healthz").headers


def test_pages_have_no_inline_scripts_or_styles(browser: Browser, producer: Api) -> None:
    job = enqueue(producer)
    for path in ("/ui", "/ui/jobs", f"/ui/jobs/{job['id']}", "/ui/keys", "/ui/login"):
        html = browser.client.get(path).text.lower()
        assert "style=" not in html and "<style" not in html, path
        assert html.count("<script") == html.count('<script src="/ui/static/'), path


def test_logout_ends_the_session(browser: Browser) -> None:
    old = browser.client.cookies.get("queuelog_session")
    response = browser.post("/ui/logout")
    assert response.status_code == 303 and response.headers["location"] == "/ui/login"
    assert 'queuelog_session=""' in response.headers["set-cookie"]
    fresh = TestClient(browser.client.app, cookies={"queuelog_session": old or ""})
    assert fresh.get("/ui", follow_redirects=False).status_code == 303


def test_revoking_the_admin_key_ends_its_session(
    browser: Browser, client: TestClient, admin: Api
) -> None:
    keys = admin.get("/keys").json()["keys"]
    mine = next(k for k in keys if k["prefix"] == browser.key[:9])
    assert admin.delete(f"/keys/{mine['id']}").status_code == 204
    assert browser.get("/ui").headers["location"] == "/ui/login"


def test_session_expires_after_its_lifetime(browser: Browser, clock: FakeClock) -> None:
    clock.advance(8 * 3600 - 1)
    assert browser.get("/ui").status_code == 200
    clock.advance(1)
    assert browser.get("/ui").headers["location"] == "/ui/login"


def test_logging_in_again_replaces_the_session_id(client: TestClient, make_key: KeyMaker) -> None:
    _, key = make_key("root", "admin")
    assert log_in(client, key).status_code == 303
    first = client.cookies.get("queuelog_session")
    token = csrf_of(TestClient(client.app).get("/ui/login").text)
    client.cookies.set("queuelog_login", token)
    data = {"csrf_token": token, "key": key}
    assert client.post("/ui/login", data=data, follow_redirects=False).status_code == 303
    assert client.cookies.get("queuelog_session") not in (None, first)
    with_first = TestClient(client.app, cookies={"queuelog_session": first or ""})
    assert with_first.get("/ui", follow_redirects=False).status_code == 303


def test_hardening_04_anonymous_login_pages_neither_evict_a_form_nor_make_sessions(
    client: TestClient, make_key: KeyMaker
) -> None:
    _, key = make_key("root", "admin")
    victim = TestClient(client.app)
    form = victim.get("/ui/login")
    attacker = TestClient(client.app)
    for _ in range(2000):
        page = attacker.get("/ui/login")
        assert page.status_code == 200
        # The only cookie is the form's token, scoped to the form: no session id.
        (cookie,) = page.headers.get_list("set-cookie")
        assert cookie.startswith("queuelog_login=") and "Path=/ui/login" in cookie
    assert "queuelog_session" not in attacker.cookies
    data = {"csrf_token": csrf_of(form.text), "key": key}
    response = victim.post("/ui/login", data=data, follow_redirects=False)
    assert response.status_code == 303 and response.headers["location"] == "/ui"
    assert victim.get("/ui", follow_redirects=False).status_code == 200


def test_hardening_04_a_login_token_from_another_browser_is_refused(
    client: TestClient, make_key: KeyMaker
) -> None:
    _, key = make_key("root", "admin")
    mine, theirs = TestClient(client.app), TestClient(client.app)
    mine.get("/ui/login")
    their_token = csrf_of(theirs.get("/ui/login").text)
    refused = mine.post("/ui/login", data={"csrf_token": their_token, "key": key})
    assert refused.status_code == 403 and "Form refused" in refused.text


def test_hardening_04_a_login_form_expires_after_an_hour(
    client: TestClient, make_key: KeyMaker, clock: FakeClock
) -> None:
    _, key = make_key("root", "admin")
    form = client.get("/ui/login")
    clock.advance(3600)
    data = {"csrf_token": csrf_of(form.text), "key": key}
    assert client.post("/ui/login", data=data).status_code == 403


def test_login_forms_open_in_several_tabs_are_each_good(
    client: TestClient, make_key: KeyMaker
) -> None:
    """A session's end sends every open tab to the login form at once; each form's new
    token replaced the cookie, so only the tab loaded last could log in."""
    _, key = make_key("root", "admin")
    first, second = client.get("/ui/login"), client.get("/ui/login")
    assert csrf_of(first.text) == csrf_of(second.text)
    data = {"csrf_token": csrf_of(first.text), "key": key}
    done = client.post("/ui/login", data=data, follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"] == "/ui"


def test_a_login_form_gets_a_new_token_once_its_cookie_s_is_half_spent(
    client: TestClient, make_key: KeyMaker, clock: FakeClock
) -> None:
    _, key = make_key("root", "admin")
    first = csrf_of(client.get("/ui/login").text)
    clock.advance(1799)
    assert csrf_of(client.get("/ui/login").text) == first
    clock.advance(2)
    fresh = client.get("/ui/login")
    assert csrf_of(fresh.text) != first
    clock.advance(3000)  # the first token has expired; the fresh one is good for an hour
    data = {"csrf_token": csrf_of(fresh.text), "key": key}
    assert client.post("/ui/login", data=data, follow_redirects=False).status_code == 303


def test_dashboard_is_not_in_the_openapi_schema(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert not [p for p in paths if p.startswith("/ui")]


def test_session_lifetime_is_configurable(
    settings: Settings,
    storage: SqliteStorage,
    clock: FakeClock,
    make_key: KeyMaker,
) -> None:
    server = settings.server.model_copy(update={"ui_session_seconds": 600})
    configured = settings.model_copy(update={"server": server})
    app = create_app(configured, storage=storage, clock=clock, run_maintenance=False)
    _, key = make_key("root", "admin")
    with TestClient(app) as client:
        response = log_in(client, key)
        assert "max-age=600" in response.headers["set-cookie"].lower()
        clock.advance(600)
        assert client.get("/ui", follow_redirects=False).headers["location"] == "/ui/login"
