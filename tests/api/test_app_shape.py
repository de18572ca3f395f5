"""The app's shape is pinned: its middleware, in order, and who may call each route.

A route added without the API key dependency, a raw Starlette route beside the
FastAPI ones, or a middleware removed or reordered fails here first.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, get_args
from urllib.parse import parse_qs, urlsplit

import pytest
from fastapi import FastAPI
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute, iter_route_contexts
from fastapi.testclient import TestClient

from queuelog.api.deps import CurrentKey, MetricsReader
from queuelog.api.lean import LeanRoute
from queuelog.api.metrics import MetricsMiddleware
from queuelog.api.middleware import (
    BodyLimitMiddleware,
    InternalErrorMiddleware,
    PathHeadersMiddleware,
)
from queuelog.config import Settings
from queuelog.dashboard.web import SECURITY_HEADERS
from queuelog.dashboard.web import Admin as DashboardAdmin
from tests.conftest import Api

KEY = "API key"  # the Authorization header, checked by api/deps.py
PUBLIC = "public"
UI_LOGIN = "dashboard login"  # the dashboard's session of an admin key
UI_PUBLIC = "dashboard, public"

ROUTES: dict[tuple[str, str], str] = {
    ("GET", "/openapi.json"): PUBLIC,
    ("GET", "/docs"): PUBLIC,
    ("HEAD", "/docs"): PUBLIC,
    ("GET", "/docs/assets/{asset}"): PUBLIC,
    ("HEAD", "/docs/assets/{asset}"): PUBLIC,
    ("GET", "/healthz"): PUBLIC,
    ("HEAD", "/healthz"): PUBLIC,
    ("GET", "/readyz"): PUBLIC,
    ("HEAD", "/readyz"): PUBLIC,
    ("POST", "/jobs"): KEY,
    ("POST", "/jobs/batch"): KEY,
    ("GET", "/jobs"): KEY,
    ("GET", "/jobs/{job_id:id}"): KEY,
    ("GET", "/jobs/{job_id:id}/events"): KEY,
    ("GET", "/jobs/{job_id:id}/dependencies"): KEY,
    ("POST", "/jobs/{job_id:id}/cancel"): KEY,
    ("POST", "/jobs/{job_id:id}/retry"): KEY,
    ("POST", "/jobs/claim"): KEY,
    ("POST", "/jobs/batch/complete"): KEY,
    ("POST", "/jobs/{job_id:id}/heartbeat"): KEY,
    ("POST", "/jobs/{job_id:id}/release"): KEY,
    ("POST", "/jobs/{job_id:id}/complete"): KEY,
    ("POST", "/jobs/{job_id:id}/fail"): KEY,
    ("POST", "/keys"): KEY,
    ("GET", "/keys"): KEY,
    ("DELETE", "/keys/{key_id:id}"): KEY,
    ("POST", "/schedules"): KEY,
    ("GET", "/schedules"): KEY,
    ("GET", "/schedules/{name}"): KEY,
    ("DELETE", "/schedules/{name}"): KEY,
    ("POST", "/schedules/{name}/pause"): KEY,
    ("POST", "/schedules/{name}/resume"): KEY,
    ("POST", "/schedules/{name}/trigger"): KEY,
    ("GET", "/types"): KEY,
    ("POST", "/types/{job_type:path}/pause"): KEY,
    ("POST", "/types/{job_type:path}/resume"): KEY,
    ("GET", "/stats"): KEY,
    ("GET", "/metrics"): KEY,
    ("GET", "/ui/static/{name}"): UI_PUBLIC,
    ("GET", "/ui/login"): UI_PUBLIC,
    ("POST", "/ui/login"): UI_PUBLIC,
    ("POST", "/ui/logout"): UI_PUBLIC,
    ("GET", "/ui/{path:path}"): UI_PUBLIC,  # the dashboard's 404 page
    ("POST", "/ui/jobs/{job_id}/{action}"): UI_PUBLIC,  # ...for a job's form with no id
    ("POST", "/ui/keys/{key_id}/revoke"): UI_PUBLIC,  # ...and a key's
    ("GET", "/ui"): UI_LOGIN,
    ("GET", "/ui/"): UI_LOGIN,
    ("GET", "/ui/jobs"): UI_LOGIN,
    ("GET", "/ui/jobs/{job_id:id}"): UI_LOGIN,
    ("GET", "/ui/retry-failed"): UI_LOGIN,
    ("GET", "/ui/keys"): UI_LOGIN,
    ("GET", "/ui/schedules"): UI_LOGIN,
    ("POST", "/ui/schedules/{name}/pause"): UI_LOGIN,
    ("POST", "/ui/schedules/{name}/resume"): UI_LOGIN,
    ("POST", "/ui/schedules/{name}/trigger"): UI_LOGIN,
    ("GET", "/ui/types"): UI_LOGIN,
    ("POST", "/ui/jobs/{job_id:id}/retry"): UI_LOGIN,
    ("POST", "/ui/jobs/{job_id:id}/cancel"): UI_LOGIN,
    ("POST", "/ui/retry-failed"): UI_LOGIN,
    ("POST", "/ui/keys"): UI_LOGIN,
    ("POST", "/ui/keys/{key_id:id}/revoke"): UI_LOGIN,
    ("POST", "/ui/types/{job_type:path}/pause"): UI_LOGIN,
    ("POST", "/ui/types/{job_type:path}/resume"): UI_LOGIN,
}
# Every dashboard page answers HEAD too, guarded as its GET.
ROUTES |= {
    ("HEAD", path): who
    for (method, path), who in ROUTES.items()
    if method == "GET" and path.startswith("/ui")
}

# The key's dependency: every route's, and /metrics' own, which also takes a key this
# node last found active while the database cannot be read (SECURITY.md, row 96).
_AUTHENTICATE = {get_args(key)[1].dependency for key in (CurrentKey, MetricsReader)}
_DASHBOARD_ADMIN = get_args(DashboardAdmin)[1].dependency


def _calls(dependant: Dependant) -> Iterator[Any]:
    for sub in dependant.dependencies:
        yield sub.call
        yield from _calls(sub)


def _guard(route: Any) -> str:
    """Who may call ``route``, read from its dependencies (a lean route reads its key
    itself, through ``read_request``: the 401 test below checks each one)."""
    if isinstance(route.original_route, LeanRoute):
        return KEY
    calls = set(_calls(route.dependant))
    if _AUTHENTICATE & calls:
        return KEY
    if route.path.startswith("/ui"):
        return UI_LOGIN if _DASHBOARD_ADMIN in calls else UI_PUBLIC
    return PUBLIC


def _routes(app: FastAPI) -> dict[tuple[str, str], str]:
    found: dict[tuple[str, str], str] = {}
    for context in iter_route_contexts(app.routes):
        if not isinstance(context.original_route, APIRoute):
            # Starlette's own routes (the schema, the docs' files) carry no dependencies.
            found[("*" if context.methods is None else "GET", context.path)] = PUBLIC
            continue
        for method in context.methods:
            found[(method, context.path)] = _guard(context)
    return found


@pytest.fixture
def app(client: TestClient) -> FastAPI:
    served: FastAPI = client.app  # type: ignore[assignment]
    return served


def test_the_middleware_is_metrics_headers_under_ui_the_body_limit_then_internal_errors(
    app: FastAPI, settings: Settings
) -> None:
    stack = [(m.cls, m.kwargs) for m in app.user_middleware]
    assert stack == [
        (MetricsMiddleware, {"metrics": app.state.metrics}),
        (PathHeadersMiddleware, {"prefix": "/ui", "headers": SECURITY_HEADERS}),
        (
            BodyLimitMiddleware,
            {"max_bytes": settings.limits.max_request_bytes, "form_prefixes": ("/ui",)},
        ),
        (InternalErrorMiddleware, {}),
    ]


def test_every_route_is_pinned_with_who_may_call_it(app: FastAPI) -> None:
    assert _routes(app) == ROUTES


def _concrete(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "1", path)


@pytest.mark.parametrize(
    ("method", "path"), [route for route, guard in ROUTES.items() if guard == KEY]
)
def test_every_route_that_needs_a_key_answers_401_without_one(
    anonymous: Api, method: str, path: str
) -> None:
    response = anonymous.request(method, _concrete(path), json={})
    assert response.status_code == 401, response.text
    assert response.json()["type"] == "unauthenticated"
    assert response.headers["www-authenticate"].startswith("Bearer")


@pytest.mark.parametrize(
    ("method", "path"), [route for route, guard in ROUTES.items() if guard == UI_LOGIN]
)
def test_every_dashboard_page_sends_a_stranger_to_the_login_form(
    anonymous: Api, method: str, path: str
) -> None:
    response = anonymous.request(method, _concrete(path), follow_redirects=False)
    assert response.status_code == 303
    login = urlsplit(response.headers["location"])
    assert login.path == "/ui/login"
    # A page comes back after the login; a form's post is not made again.
    back = [_concrete(path)] if method != "POST" and path not in ("/ui", "/ui/") else []
    assert parse_qs(login.query).get("next", []) == back
