"""The storage conformance suite runs against every backend through one fixture."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from queuelog.storage.protocol import Storage
from tests.storage.backends import BACKENDS, opened


@pytest.fixture(params=BACKENDS)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Storage]:
    """A fresh, migrated, empty store of each backend."""
    with opened(request.param, tmp_path) as backend:
        yield backend
