"""The dashboard's router: login, logout, static files, and the pages and forms."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request, Response
from fastapi.responses import RedirectResponse
from starlette.datastructures import FormData

from queuelog.app_state import state_of
from queuelog.dashboard import actions, pages, schedules
from queuelog.dashboard.sessions import SessionStore
from queuelog.dashboard.web import (
    COOKIE,
    COOKIE_PATH,
    LOGIN_COOKIE,
    LOGIN_PATH,
    Dashboard,
    DashboardRoute,
    check_csrf,
    check_login_token,
    clear_cookie,
    current_session,
    dashboard_of,
    field_of,
    now_of,
    page_after_login,
    read_form,
    render,
    set_login_cookie,
    set_session_cookie,
)
from queuelog.errors import Unauthenticated
from queuelog.models import Role

STATIC = {
    "dashboard.css": "text/css",
    "dashboard.js": "text/javascript",
    "favicon.svg": "image/svg+xml",
}

router = APIRouter(prefix="/ui", route_class=DashboardRoute)


def dashboard_router(session_seconds: int) -> APIRouter:
    """The ``/ui`` routes with their own session store (sessions live in this process),
    whose logins last ``session_seconds`` (``[server] ui_session_seconds``)."""
    ui = Dashboard(sessions=SessionStore(session_seconds))

    def attach(request: Request) -> None:
        request.state.dashboard = ui

    outer = APIRouter(dependencies=[Depends(attach)], route_class=DashboardRoute)
    outer.include_router(router)
    outer.include_router(actions.router)
    outer.include_router(schedules.router)
    outer.include_router(pages.router)  # last: it ends with the catch-all 404
    return outer


@router.get("/static/{name}")
def static(request: Request, name: str) -> Response:
    media = STATIC.get(name)
    if media is None:
        return Response(status_code=404)
    response = Response(dashboard_of(request).static(name), media_type=media)
    response.headers["Cache-Control"] = "no-cache"
    return response


@router.get("/login")
def login_form(request: Request) -> Response:
    after = page_after_login(request.query_params.get("next", ""))
    if current_session(request) is not None:
        return RedirectResponse(after, status_code=303)
    return _login_page(request, None, 200, after)


def _login_page(request: Request, message: str | None, status: int, after: str) -> Response:
    """The form with a login token, in its field and in the login cookie; no session is
    made for it. ``after``: the page the login leads to."""
    cookie = request.cookies.get(LOGIN_COOKIE)
    token = dashboard_of(request).login_tokens.for_form(cookie, now_of(request))
    response = render(request, "login.html", status, message=message, csrf_token=token, after=after)
    set_login_cookie(request, response, token)
    return response


Form = Annotated[FormData, Depends(read_form)]


@router.post("/login")
async def login(request: Request, form: Form) -> Response:
    check_login_token(request, form)
    state = state_of(request)
    after = page_after_login(field_of(form, "next"))
    try:
        key = await state.keys.authenticate(field_of(form, "key"))
    except Unauthenticated:
        refused = "This key is not valid, or it has been revoked."
        return _login_page(request, refused, 401, after)
    if not key.has(Role.ADMIN):
        return _login_page(request, "This key does not have the admin role.", 403, after)
    sessions = dashboard_of(request).sessions
    earlier = current_session(request)
    if earlier is not None:  # a new login never keeps an old session id
        sessions.end(earlier.id)
    admin = sessions.log_in(key.id, key.key_hash, now_of(request))
    response = RedirectResponse(after, status_code=303)
    set_session_cookie(request, response, admin)
    clear_cookie(request, response, LOGIN_COOKIE, LOGIN_PATH)  # its token has been used
    return response


@router.post("/logout")
def logout(request: Request, form: Form) -> Response:
    session = check_csrf(current_session(request), form)
    dashboard_of(request).sessions.end(session.id)
    response = RedirectResponse("/ui/login", status_code=303)
    clear_cookie(request, response, COOKIE, COOKIE_PATH)
    return response
