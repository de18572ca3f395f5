"""A dashboard form whose body cannot be read whole is the client's doing: answered as
the API answers it, never a 500 with a traceback in the log (anyone may post the
login form, so each such request would add one)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from starlette.types import Message

from queuelog.api.app import create_app
from queuelog.clock import FakeClock
from queuelog.config import Settings
from queuelog.storage.sqlite.store import SqliteStorage
from tests.dashboard.conftest import Browser

FORM = {"Content-Type": "application/x-www-form-urlencoded"}


def _past_the_limit() -> Iterator[bytes]:
    """A form streamed without a length, past the 1 MiB request limit."""
    yield b"csrf_token=x&key="
    for _ in range(20):
        yield b"a" * 65_536


def _errors(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize("path", ["/ui/login", "/ui/logout"])
def test_hardening_91_a_form_streamed_past_the_limit_is_413_and_logs_nothing(
    client: TestClient, caplog: pytest.LogCaptureFixture, path: str
) -> None:
    with caplog.at_level(logging.ERROR):
        answer = client.post(path, content=_past_the_limit(), headers=FORM)
    assert answer.status_code == 413, answer.text
    assert answer.headers["x-frame-options"] == "DENY"
    assert not _errors(caplog)


def test_hardening_91_an_admin_s_form_streamed_past_the_limit_is_413(
    browser: Browser, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR):
        answer = browser.client.post("/ui/jobs/1/cancel", content=_past_the_limit(), headers=FORM)
    assert answer.status_code == 413, answer.text
    assert not _errors(caplog)


def test_hardening_91_a_login_whose_client_hangs_up_logs_no_error(
    settings: Settings, storage: SqliteStorage, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    app = create_app(settings, storage=storage, clock=clock, run_maintenance=False)
    messages: list[Message] = [
        {"type": "http.request", "body": b"csrf_token=x&key=ql_", "more_body": True},
        {"type": "http.disconnect"},
    ]

    async def receive() -> Message:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    sent: list[Message] = []

    async def send(message: Message) -> None:
        sent.append(message)

    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/ui/login",
        "raw_path": b"/ui/login",
        "root_path": "",
        "query_string": b"",
        "headers": [
            (b"host", b"testserver"),
            (b"content-type", FORM["Content-Type"].encode()),
            (b"content-length", b"1000"),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }
    with caplog.at_level(logging.ERROR):
        asyncio.run(app(scope, receive, send))
    assert sent[0]["status"] != 500
    assert not _errors(caplog)
