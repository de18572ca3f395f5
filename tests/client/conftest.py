"""Client, worker and CLI tests run against a real server process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.realserver import RealServer, closing

CONFIG: dict[str, Any] = {"durability": "normal", "limits": {"max_payload_bytes": 2048}}
TYPES: dict[str, dict[str, Any]] = {
    "send_email": {
        "max_retries": 3,
        "lease_seconds": 30,
        "backoff_base_seconds": 0.05,
        "backoff_cap_seconds": 0.2,
        "payload_schema": {"type": "object", "required": ["to"]},
    },
    "noop": {"max_retries": 2, "backoff_base_seconds": 0.05, "backoff_cap_seconds": 0.2},
    "slow": {"max_retries": 0, "lease_seconds": 2},
}


def start_server(directory: Path) -> RealServer:
    """A started server with keys ``root`` (admin, made with the command before the start),
    ``shop`` (producer) and ``mailer`` (worker), both made over HTTP."""
    server = RealServer(directory, types=TYPES, config=CONFIG)
    server.create_key("root", "admin", max_priority="high")
    server.start()
    server.create_key_over_http("shop", "producer")
    server.create_key_over_http("mailer", "worker")
    return server


@pytest.fixture(scope="module")
def real_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealServer]:
    """One server for the module's tests, which do not get in each other's way."""
    with closing(start_server(tmp_path_factory.mktemp("server"))) as server:
        yield server


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RealServer]:
    """A server of its own: workers claim whatever is pending, so tests must not share."""
    with closing(start_server(tmp_path)) as started:
        yield started
