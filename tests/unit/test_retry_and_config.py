from __future__ import annotations

import random
import tomllib
from pathlib import Path

import pytest
from pydantic import BaseModel

from queuelog.config import ConfigError, Settings, load_settings
from queuelog.retry import backoff_seconds


def test_backoff_doubles_within_jitter_and_caps() -> None:
    rng = random.Random(7)
    for retry_count, expected in [(0, 2), (1, 4), (2, 8), (5, 64), (20, 100)]:
        for _ in range(50):
            delay = backoff_seconds(retry_count, base=2, cap=100, rng=rng)
            assert expected * 0.8 <= delay <= expected * 1.2


def test_backoff_jitter_spreads_delays() -> None:
    rng = random.Random(1)
    delays = {round(backoff_seconds(3, 1, 3600, rng=rng), 6) for _ in range(20)}
    assert len(delays) > 10


def test_config_reads_toml_and_env_overrides(tmp_path: Path) -> None:
    path = tmp_path / "q.toml"
    path.write_text(
        'database = "sqlite:///x.db"\n[limits]\nrate_per_second = 5\n'
        "[types.send_email]\nmax_retries = 7\n"
    )
    env = {"QUEUELOG_DATABASE_URL": "sqlite:///y.db", "QUEUELOG_MAX_PAYLOAD_BYTES": "100"}
    settings = load_settings(path, env)
    assert settings.database == "sqlite:///y.db" and settings.sqlite_path == Path("y.db")
    assert settings.limits.max_payload_bytes == 100 and settings.limits.rate_per_second == 5
    assert settings.types["send_email"].max_retries == 7
    assert settings.durability == "full"


def test_config_env_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "q.toml"
    path.write_text('durability = "normal"\n')
    assert load_settings(None, {"QUEUELOG_CONFIG": str(path)}).durability == "normal"


def test_config_rejects_unknown_settings_and_bad_values(tmp_path: Path) -> None:
    path = tmp_path / "q.toml"
    path.write_text("typo_setting = 1\n")
    with pytest.raises(ConfigError, match=r"^typo_setting: "):
        load_settings(path, {})
    # A value from the environment is named by its variable: the file may not have it.
    with pytest.raises(ConfigError, match=r"^QUEUELOG_DURABILITY \(durability\): "):
        load_settings(None, {"QUEUELOG_DURABILITY": "sometimes"})
    path.write_text("[limits]\nrate_per_second = 5\n")
    with pytest.raises(
        ConfigError, match=r"^QUEUELOG_RATE_PER_SECOND \(limits.rate_per_second\): "
    ):
        load_settings(path, {"QUEUELOG_RATE_PER_SECOND": "abc"})
    path.write_text("[limits]\nrate_per_second = -1\n")
    with pytest.raises(ConfigError, match=r"^limits.rate_per_second: "):
        load_settings(path, {})


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("sqlite:///./q.db?mode=ro", "without ?query"),
        ("sqlite:///:memory:", "without ?query"),
        ("sqlite:///", "without ?query"),
        ("mysql://u:secret@db/q", "must be a sqlite:///PATH or postgresql:// URL"),
        ("./q.db", "must be a sqlite:///PATH or postgresql:// URL"),
    ],
)
def test_a_database_url_the_queue_cannot_open_as_written_is_refused(
    tmp_path: Path, url: str, said: str
) -> None:
    # A query once became part of the SQLite file's name: `q.db?mode=ro`, written to.
    with pytest.raises(ConfigError) as caught:
        load_settings(None, {"QUEUELOG_DATABASE_URL": url})
    line = str(caught.value)
    assert line.startswith("QUEUELOG_DATABASE_URL (database): ") and said in line, line
    assert "secret" not in line and "q.db" not in line


def test_the_database_urls_the_queue_opens_are_kept(tmp_path: Path) -> None:
    kept = ("sqlite:///./data/q#2.db", "postgresql://u@h/db?sslmode=require", "postgres://h/db")
    for url in kept:
        assert load_settings(None, {"QUEUELOG_DATABASE_URL": url}).database == url
    settings = load_settings(None, {"QUEUELOG_DATABASE_URL": "sqlite:////var/lib/q.db"})
    assert settings.sqlite_path == Path("/var/lib/q.db")


def test_an_override_of_a_section_the_file_gives_as_no_table_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "q.toml"
    path.write_text("server = 1\n")
    with pytest.raises(ConfigError, match=r"^server: must be a table \(\[server\]\)$"):
        load_settings(path, environ={"QUEUELOG_OTEL": "true"})


def test_ui_session_seconds_from_the_file_then_the_environment(tmp_path: Path) -> None:
    path = tmp_path / "q.toml"
    path.write_text("[server]\nui_session_seconds = 600\n")
    assert load_settings(environ={}).server.ui_session_seconds == 8 * 3600
    assert load_settings(path, environ={}).server.ui_session_seconds == 600
    env = {"QUEUELOG_UI_SESSION_SECONDS": "3600"}
    assert load_settings(path, environ=env).server.ui_session_seconds == 3600
    # Not a number, or a login that would end before it could be used: refused.
    for bad in ("abc", "0", "-5", "59", "2592001"):
        with pytest.raises(ConfigError, match=r"^QUEUELOG_UI_SESSION_SECONDS \(server.ui_"):
            load_settings(path, environ={"QUEUELOG_UI_SESSION_SECONDS": bad})


def test_claim_recheck_seconds_from_the_file_then_the_environment(tmp_path: Path) -> None:
    path = tmp_path / "q.toml"
    path.write_text("[server]\nclaim_recheck_seconds = 5\n")
    assert load_settings(path, environ={}).server.claim_recheck_seconds == 5
    env = {"QUEUELOG_CLAIM_RECHECK_SECONDS": "0.5"}
    assert load_settings(path, environ=env).server.claim_recheck_seconds == 0.5
    assert load_settings(environ={}).server.claim_recheck_seconds == 1.0
    for bad in ("0", "31", "soon"):
        with pytest.raises(ConfigError, match="claim_recheck_seconds"):
            load_settings(path, environ={"QUEUELOG_CLAIM_RECHECK_SECONDS": bad})


def test_config_connection_wait_from_the_file_or_the_environment(tmp_path: Path) -> None:
    path = tmp_path / "q.toml"
    path.write_text("connection_wait_seconds = 0.5\n")
    assert load_settings(None, {}).connection_wait_seconds == 2.0
    assert load_settings(path, {}).connection_wait_seconds == 0.5
    env = {"QUEUELOG_CONNECTION_WAIT_SECONDS": "3"}
    assert load_settings(path, env).connection_wait_seconds == 3.0
    with pytest.raises(ConfigError, match="connection_wait_seconds"):
        load_settings(None, {"QUEUELOG_CONNECTION_WAIT_SECONDS": "0"})


@pytest.mark.parametrize("name", [".", ".."])
def test_hardening_20_a_job_type_named_a_dot_segment_is_refused(tmp_path: Path, name: str) -> None:
    path = tmp_path / "q.toml"
    path.write_text(f'[types."{name}"]\n')
    with pytest.raises(ConfigError) as refused:
        load_settings(path, environ={})
    assert f"job type name '{name}': not . or .. " in str(refused.value)
    assert "\n" not in str(refused.value)


def test_the_example_config_is_valid_and_shows_every_setting() -> None:
    """README points to queuelog.example.toml for the settings: each has its line there."""
    example = Path(__file__).parents[2] / "queuelog.example.toml"
    load_settings(example, environ={})
    given = tomllib.loads(example.read_text())
    assert set(Settings.model_fields) <= set(given)
    for section in ("limits", "server", "retention"):
        model = Settings.model_fields[section].annotation
        assert isinstance(model, type) and issubclass(model, BaseModel)
        assert set(model.model_fields) <= set(given[section]), section
