"""Flow-control settings: what is legal, and what stops serve and migrate (one line,
naming the setting)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from queuelog.cli import main
from queuelog.config import ConfigError, load_settings
from queuelog.retry import backoff_seconds


def config(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "queuelog.toml"
    path.write_text(f'database = "sqlite:///{tmp_path / "q.db"}"\n[types.partner]\n{body}\n')
    return path


def test_limits_are_read_per_type(tmp_path: Path) -> None:
    text = (
        "concurrency = 4\ngroup_concurrency = 1\n"
        "rate_limit = { jobs = 10, per_seconds = 0.5 }\nbackoff_base_seconds = 0"
    )
    cfg = load_settings(config(tmp_path, text), {}).types["partner"]
    assert (cfg.concurrency, cfg.group_concurrency) == (4, 1)
    assert cfg.rate_limit is not None
    assert (cfg.rate_limit.jobs, cfg.rate_limit.per_seconds) == (10, 0.5)
    assert cfg.limited
    assert backoff_seconds(3, cfg.backoff_base_seconds, cfg.backoff_cap_seconds) == 0


def test_a_type_without_limits_is_unlimited(tmp_path: Path) -> None:
    cfg = load_settings(config(tmp_path, "max_retries = 1"), {}).types["partner"]
    assert cfg.concurrency is None and cfg.rate_limit is None and not cfg.limited


BAD = [
    ("concurrency = 0", "types.partner.concurrency"),
    ("concurrency = -2", "types.partner.concurrency"),
    ("concurrency = 1.5", "types.partner.concurrency"),
    ("concurrency = true", "types.partner.concurrency"),
    ("group_concurrency = 0", "types.partner.group_concurrency"),
    ("rate_limit = { jobs = 0, per_seconds = 1 }", "types.partner.rate_limit.jobs"),
    ("rate_limit = { jobs = 5, per_seconds = 0 }", "types.partner.rate_limit.per_seconds"),
    ("rate_limit = { jobs = 5 }", "types.partner.rate_limit.per_seconds"),
    ("rate_limit = { jobs = 5, per_seconds = 1, burst = 2 }", "types.partner.rate_limit.burst"),
    ("concurrancy = 3", "types.partner.concurrancy"),
    ("backoff_base_seconds = -1", "types.partner.backoff_base_seconds"),
]


@pytest.mark.parametrize(("body", "setting"), BAD)
def test_a_bad_limit_is_refused_naming_the_setting(tmp_path: Path, body: str, setting: str) -> None:
    with pytest.raises(ConfigError) as refused:
        load_settings(config(tmp_path, body), {})
    assert str(refused.value).startswith(f"{setting}: ")
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("command", ["serve", "migrate"])
def test_serve_and_migrate_stop_on_a_bad_limit(tmp_path: Path, command: str) -> None:
    path = config(tmp_path, "concurrency = 0")
    result = CliRunner().invoke(main, [command, "--config", str(path)])
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and "types.partner.concurrency" in lines[0], result.output
    assert not (tmp_path / "q.db").exists()  # stopped before opening the database


def test_a_limit_that_is_not_a_table_says_what_it_should_be(tmp_path: Path) -> None:
    """Not pydantic's words, which name the model class behind the setting."""
    with pytest.raises(ConfigError) as refused:
        load_settings(config(tmp_path, "rate_limit = 5"), {})
    assert str(refused.value) == (
        "types.partner.rate_limit: should be a table of its own settings "
        "(TOML: { name = value, ... })"
    )
