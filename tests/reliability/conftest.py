"""Fixtures for the reliability suite: a real server in a subprocess, and the keys of
the in-process tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from queuelog.models import ApiKey
from tests.conftest import KeyMaker
from tests.realserver import RealServer, closing


@pytest.fixture
def real_server(tmp_path: Path) -> Iterator[RealServer]:
    """A configured, not yet started server; always stopped at teardown."""
    with closing(RealServer(tmp_path)) as server:
        yield server


@pytest.fixture
def shop(make_key: KeyMaker) -> ApiKey:
    return make_key("shop", "producer")[0]


@pytest.fixture
def mailer(make_key: KeyMaker) -> ApiKey:
    return make_key("mailer", "worker")[0]
