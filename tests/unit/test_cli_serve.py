"""``queuelog serve`` hands uvicorn the right options (the server itself is not started)."""

from __future__ import annotations

import gc
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
        seen["limit_concurrency"] = self.config.limit_concurrency
        seen["gc_threshold"] = gc.get_threshold()
        seen["gc_frozen"] = gc.get_freeze_count()

    monkeypatch.setattr(server._Server, "run", fake_run)
    # serve ignores SIGTERM before it runs the server; give the test process its handler back.
    handler = signal.getsignal(signal.SIGTERM)
    threshold = gc.get_threshold()
    yield seen
    signal.signal(signal.SIGTERM, handler)
    gc.unfreeze()
    gc.set_threshold(*threshold)


def serve(tmp_path: Path, *args: str, toml: str = "", env: dict[str, str] | None = None) -> None:
    config = tmp_path / "queuelog.toml"
    config.write_text(f'database = "sqlite:///{tmp_path / "q.db"}"\n{toml}')
    result = CliRunner().invoke(main, ["serve", "--config", str(config), *args], env=env)
    assert result.exit_code == 0, result.output


def test_serve_writes_no_access_log_by_default(tmp_path: Path, captured: dict[str, Any]) -> None:
    serve(tmp_path)
    assert captured["access_log"] is False


def test_serve_access_log_flag_turns_it_on(tmp_path: Path, captured: dict[str, Any]) -> None:
    serve(tmp_path, "--access-log")
    assert captured["access_log"] is True


def test_serve_freezes_what_startup_built_before_serving(
    tmp_path: Path, captured: dict[str, Any]
) -> None:
    assert gc.get_freeze_count() == 0
    serve(tmp_path)
    assert captured["gc_threshold"][0] == server.GC_THRESHOLDS[0]
    assert captured["gc_frozen"] > 10_000  # the modules, the app and its models


def test_serve_caps_concurrent_connections_as_configured(
    tmp_path: Path, captured: dict[str, Any]
) -> None:
    serve(tmp_path)
    assert captured["limit_concurrency"] == 1000
    serve(tmp_path, toml="[server]\nlimit_concurrency = 50\n")
    assert captured["limit_concurrency"] == 50
    serve(
        tmp_path, toml="[server]\nlimit_concurrency = 50\n", env={"QUEUELOG_LIMIT_CONCURRENCY": "7"}
    )
    assert captured["limit_concurrency"] == 7
