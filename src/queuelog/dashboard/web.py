"""What every dashboard page shares: rendering, security headers, the admin's session, CSRF."""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from datetime import datetime
from importlib import resources
from typing import Annotated, Any
from urllib.parse import parse_qsl, unquote, urlencode, urlsplit

import jinja2
from fastapi import Depends, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, RedirectResponse
from fastapi.routing import APIRoute
from starlette.datastructures import FormData, UploadFile
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from queuelog.app_state import AppState, state_of
from queuelog.dashboard import views
from queuelog.dashboard.login_tokens import LoginTokens
from queuelog.dashboard.sessions import SentForms, Session, SessionStore
from queuelog.errors import NotFound, QueueError
from queuelog.failures import log_internal_error
from queuelog.models import ApiKey, Role
from queuelog.schema_messages import field_message
from queuelog.specs import TYPE_FILTER_PATTERN

log = logging.getLogger("queuelog.dashboard")

COOKIE = "queuelog_session"
COOKIE_PATH = "/ui"
LOGIN_COOKIE = "queuelog_login"
LOGIN_PATH = "/ui/login"
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "frame-ancestors 'none'; form-action 'self'; base-uri 'none'"
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}


@dataclass
class Dashboard:
    """Built once per app by ``dashboard_router``: templates, sessions, login tokens,
    the create-key forms sent."""

    sessions: SessionStore
    login_tokens: LoginTokens = field(default_factory=LoginTokens)
    sent_forms: SentForms = field(default_factory=SentForms)
    templates: jinja2.Environment = field(default_factory=lambda: _environment())

    def static(self, name: str) -> bytes:
        return resources.files("queuelog.dashboard").joinpath("static", name).read_bytes()


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("queuelog.dashboard", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=views.visible,
    )
    env.filters.update(
        when=views.when,
        pretty=views.pretty_json,
        duration=views.duration,
        progress=views.progress_cell,
        segment=views.path_segment,
    )
    return env


class LoginRequired(Exception):
    """No live session for an active admin key: the browser is sent to the login form."""


def login_redirect(request: Request) -> RedirectResponse:
    """To the login form, which sends the browser back to the page it asked for (a
    form's post is not made again: it goes to the overview)."""
    asked = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    if request.method not in ("GET", "HEAD") or page_after_login(asked) == "/ui":
        return RedirectResponse(LOGIN_PATH, status_code=303)
    return RedirectResponse(f"{LOGIN_PATH}?{urlencode({'next': asked})}", status_code=303)


def page_after_login(asked: str) -> str:
    """``asked`` if it is a page of this dashboard, else the overview: a login never
    sends the browser off the dashboard (``//host``, ``/ui\\host``, ``/ui/../docs``, also
    percent-encoded), nor back to the login or the logout."""
    if len(asked) > 2048:
        return "/ui"
    parts = urlsplit(asked)
    path, before = parts.path, ""
    while path != before:  # as each hop may decode it once more (each decoding shortens it)
        path, before = unquote(path), path
    segments = path.split("/")
    ours = segments[:2] == ["", "ui"] and not {".", ".."} & set(segments) and "//" not in path
    plain = all(c.isprintable() and not c.isspace() and c != "\\" for c in asked + path)
    if not plain or parts.scheme or parts.netloc or not ours:
        return "/ui"
    return "/ui" if path.rstrip("/") in ("/ui", LOGIN_PATH, "/ui/logout") else asked


class CsrfRejected(Exception):
    """A state-changing form came without the session's synchroniser token."""


@dataclass(frozen=True, slots=True)
class AdminSession:
    key: ApiKey
    session: Session


def dashboard_of(request: Request) -> Dashboard:
    ui: Dashboard = request.state.dashboard
    return ui


def now_of(request: Request) -> datetime:
    return state_of(request).service.clock.now()


def render(request: Request, template: str, status: int = 200, **context: object) -> HTMLResponse:
    """A page, with the session's CSRF token (unless ``context`` gives one) and the
    admin's name available to every form."""
    session: Session | None = getattr(request.state, "ui_session", None)
    admin: ApiKey | None = getattr(request.state, "ui_admin", None)
    ui = dashboard_of(request)
    page = ui.templates.get_template(template)
    notice = None  # what the form before this page did: said on the page it led to
    if session is not None and request.method == "GET":
        path, query = request.url.path, request.url.query
        notice = ui.sessions.take_notice(session.id, f"{path}?{query}" if query else path)
    values: dict[str, object] = {
        "notice": notice,
        "page": None,
        "csrf_token": session.csrf_token if session else "",
        **context,
    }
    html = page.render(admin=admin, now=now_of(request), **values)
    return HTMLResponse(html, status_code=status)


def see(request: Request, url: str, notice: str) -> Response:
    """After a form: to ``url`` (303), whose page then says ``notice``, once."""
    session: Session | None = getattr(request.state, "ui_session", None)
    if session is not None:
        dashboard_of(request).sessions.leave_notice(session.id, url, notice)
    return RedirectResponse(url, status_code=303)


def error_page(request: Request, status: int, title: str, detail: str) -> Response:
    if getattr(request.state, "dashboard", None) is None:
        return HTMLResponse(f"<h1>{status}</h1>", status_code=status)
    return render(request, "error.html", status, title=title, detail=detail, code=status)


class DashboardRoute(APIRoute):
    """Answers every dashboard failure with an HTML page.
    A page also answers HEAD (its headers, no body), as link checkers and probes ask."""

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any) -> None:
        super().__init__(path, endpoint, **kwargs)
        if self.methods and "GET" in self.methods:
            self.methods.add("HEAD")

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def guarded(request: Request) -> Response:
            try:
                response = await handler(request)
            except LoginRequired:
                response = login_redirect(request)
            except CsrfRejected:
                detail = "The form has expired or did not come from this dashboard. Reload it."
                response = error_page(request, 403, "Form refused", detail)
            except NotFound:
                response = error_page(request, 404, "Not found", "There is nothing here.")
            except RequestValidationError as exc:
                response = _not_valid(request, exc)
            except QueueError as exc:
                response = error_page(request, exc.status, exc.title, exc.detail)
            except HTTPException:
                # The client's doing, answered by the app's handlers as under the API: a
                # body streamed past the limit is 413; none is an internal error to log.
                raise
            except Exception as exc:
                log_internal_error(log, exc, request.method, request.url.path)
                response = error_page(request, 500, "Server error", "Something went wrong.")
            return response  # with the security headers of every answer under /ui (app.py)

        return guarded


# The filters' patterns (each may be empty: a form's blank field), and their words.
TYPE_FILTER = r"^[^\x00-\x1f\x7f]{0,100}$"
ID_FILTER = r"^[0-9]{0,18}$"
KEY_FILTER = r"^[ -~]{0,255}$"  # as an idempotency key may be: printable ASCII
_FILTERS_SAY = {
    KEY_FILTER: "at most 255 printable ASCII characters",
    TYPE_FILTER: "at most 100 characters, none of them a control character",
    TYPE_FILTER_PATTERN: "1-100 characters, none of them a control character",
    ID_FILTER: "a job id",
}


def _not_valid(request: Request, exc: RequestValidationError) -> Response:
    """A path no page has is 404; a query or form value out of bounds is 422, naming
    the value's field and why (never the value itself)."""
    errors = exc.errors()
    where = [str(part) for part in errors[0].get("loc", ())] if errors else []
    if not where or where[0] == "path":
        return error_page(request, 404, "Not found", "There is nothing here.")
    said = field_message(errors[0], _FILTERS_SAY)
    return error_page(request, 422, "Not valid", f"{'.'.join(where[1:]) or where[0]}: {said}")


def current_session(request: Request) -> Session | None:
    session = dashboard_of(request).sessions.get(request.cookies.get(COOKIE), now_of(request))
    request.state.ui_session = session
    return session


async def _admin(request: Request) -> AdminSession:
    """The logged-in admin; the key is looked up again on every request."""
    session = current_session(request)
    if session is None:
        raise LoginRequired
    state: AppState = state_of(request)
    key = await state.service.storage.key_by_hash(session.key_hash)
    if key is None or key.id != session.key_id or key.revoked_at or not key.has(Role.ADMIN):
        dashboard_of(request).sessions.end(session.id)
        raise LoginRequired
    request.state.ui_admin = key
    return AdminSession(key, session)


async def read_form(request: Request) -> FormData:
    """An urlencoded form (the BodyLimitMiddleware has bounded its size)."""
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media != "application/x-www-form-urlencoded":
        return FormData()
    try:
        raw = await request.body()
    except ClientDisconnect:  # gone before its body was read: no one reads the answer
        raise HTTPException(400, "There was an error parsing the body") from None
    body = raw.decode("utf-8", errors="replace")
    try:
        pairs: list[tuple[str, str | UploadFile]] = list(
            parse_qsl(body, keep_blank_values=True, max_num_fields=100)
        )
    except ValueError:  # too many fields: no form of ours has that many
        return FormData()
    return FormData(pairs)


def check_csrf(session: Session | None, form: FormData) -> Session:
    """The session whose synchroniser token the form carries, or CsrfRejected."""
    token = form.get("csrf_token")
    if session is None or not isinstance(token, str) or not session.csrf_ok(token):
        raise CsrfRejected
    return session


def check_login_token(request: Request, form: FormData) -> None:
    """The login form's token must match its cookie's (see login_tokens.py), or CsrfRejected."""
    token = form.get("csrf_token")
    tokens = dashboard_of(request).login_tokens
    cookie = request.cookies.get(LOGIN_COOKIE)
    if not isinstance(token, str) or not tokens.valid(cookie, token, now_of(request)):
        raise CsrfRejected


@dataclass(frozen=True, slots=True)
class AdminPost:
    admin: ApiKey
    form: FormData


async def _admin_post(
    request: Request, admin: Annotated[AdminSession, Depends(_admin)]
) -> AdminPost:
    form = await read_form(request)
    check_csrf(admin.session, form)
    return AdminPost(admin.key, form)


Admin = Annotated[AdminSession, Depends(_admin)]
Posted = Annotated[AdminPost, Depends(_admin_post)]


def field_of(form: FormData, name: str) -> str:
    value = form.get(name)
    return value.strip() if isinstance(value, str) else ""


def set_session_cookie(request: Request, response: Response, session: Session) -> None:
    seconds = int((session.expires_at - now_of(request)).total_seconds())
    response.set_cookie(
        COOKIE,
        session.id,
        max_age=max(seconds, 0),
        expires=max(seconds, 0),
        path=COOKIE_PATH,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


def set_login_cookie(request: Request, response: Response, token: str) -> None:
    seconds = int(dashboard_of(request).login_tokens.lifetime.total_seconds())
    response.set_cookie(
        LOGIN_COOKIE,
        token,
        max_age=seconds,
        expires=seconds,
        path=LOGIN_PATH,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


def clear_cookie(request: Request, response: Response, name: str, path: str) -> None:
    """Drop the session's cookie (``COOKIE``, ``COOKIE_PATH``), or the login form's once
    a login has used it (``LOGIN_COOKIE``, ``LOGIN_PATH``)."""
    response.delete_cookie(
        name,
        path=path,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
