"""Helpers for the dashboard's HTTP tests: log a browser-like TestClient in."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient

from tests.conftest import KeyMaker

_CSRF = re.compile(r'name="csrf_token" value="([^"]+)"')


def csrf_of(html: str) -> str:
    match = _CSRF.search(html)
    assert match, "no CSRF token on the page"
    return match.group(1)


def log_in(client: TestClient, key: str) -> httpx.Response:
    """Open the login form and post ``key`` with its token; the answer is not followed."""
    form = client.get("/ui/login")
    assert form.status_code == 200, form.text
    data = {"csrf_token": csrf_of(form.text), "key": key}
    response: httpx.Response = client.post("/ui/login", data=data, follow_redirects=False)
    return response


@dataclass
class Browser:
    """A logged-in TestClient that posts forms with the session's CSRF token."""

    client: TestClient
    key: str

    def get(self, url: str, **kwargs: Any) -> httpx.Response:
        response: httpx.Response = self.client.get(url, follow_redirects=False, **kwargs)
        return response

    def token(self) -> str:
        return csrf_of(self.get("/ui").text)

    def post(self, url: str, **fields: Any) -> httpx.Response:
        data = {"csrf_token": self.token(), **fields}
        response: httpx.Response = self.client.post(url, data=data, follow_redirects=False)
        return response


@pytest.fixture
def browser(client: TestClient, make_key: KeyMaker) -> Browser:
    _, key = make_key("root", "admin")
    response = log_in(client, key)
    assert response.status_code == 303 and response.headers["location"] == "/ui"
    return Browser(client, key)
