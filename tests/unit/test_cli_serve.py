"""``queuelog serve`` hands uvicorn the right options (the server itself is not started)."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from click.testing import CliRunner

from queuelog.api import server
from queuelog.cli import main


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    seen: dict[str, Any] = {}

    def fake_run(self: uvicorn.Server) -> None:
        seen["access_log"] = self.config.access_log

    monkeypatch.setattr(server._Server, "run", fake_run)
    # serve ignores SIGTERM before it runs the server; give the test process its handler back.
    handler = signal.getsignal(signal.SIGTERM)
    yield seen
    signal.signal(signal.SIGTERM, handler)


def serve(tmp_path: Path, *args: str) -> None:
    config = tmp_path / "queuelog.toml"
    config.write_text(f'database = "sqlite:///{tmp_path / "q.db"}"\n')
    result = CliRunner().invoke(main, ["serve", "--config", str(config), *args])
    assert result.exit_code == 0, result.output


def test_serve_writes_no_access_log_by_default(tmp_path: Path, captured: dict[str, Any]) -> None:
    serve(tmp_path)
    assert captured["access_log"] is False


def test_serve_access_log_flag_turns_it_on(tmp_path: Path, captured: dict[str, Any]) -> None:
    serve(tmp_path, "--access-log")
    assert captured["access_log"] is True
