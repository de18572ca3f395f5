"""Fixtures for the reliability suite: a real server in a subprocess."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.reliability.server import RealServer


@pytest.fixture
def real_server(tmp_path: Path) -> Iterator[RealServer]:
    """A configured, not yet started server; always stopped at teardown."""
    server = RealServer(tmp_path)
    yield server
    server.close()
