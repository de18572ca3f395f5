"""``queuelog serve`` hands uvicorn the right options (uvicorn itself is not started)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import uvicorn
from click.testing import CliRunner

from queuelog.cli import main


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    seen: dict[str, Any] = {}

    def fake_run(app: Any, **options: Any) -> None:
        seen.update(options)

    monkeypatch.setattr(uvicorn, "run", fake_run)
    return seen


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
