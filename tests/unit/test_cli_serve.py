"""``queuelog serve`` on an address it cannot have: one line, exit 3, nothing done; with a
setting it cannot run with: one line, exit 1."""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from contextlib import ExitStack, closing
from pathlib import Path

import psycopg
import pytest
from bench.pg import fresh_schema as schema_named
from bench.pg import with_schema
from click.testing import CliRunner

from queuelog.cli import main
from tests.postgres import fresh_schema, postgres_url
from tests.realserver import QUEUELOG, wait_until


def test_serve_on_a_taken_port_exits_3_before_it_migrates_or_makes_a_key(
    tmp_path: Path,
) -> None:
    database = tmp_path / "q.db"
    config = tmp_path / "q.toml"
    config.write_text(f'database = "sqlite:///{database}"\n')
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(main, ["serve", "--config", str(config), "--port", str(port)])
    assert result.exit_code == 3
    (line,) = result.output.strip().splitlines()
    assert line == f"Error: cannot listen on 127.0.0.1:{port}: Address already in use"
    assert not database.exists()  # not migrated, and no admin key made or shown


@pytest.mark.parametrize("port", ["99999", "-1", "65536"])
def test_serve_on_a_port_out_of_range_is_bad_usage(tmp_path: Path, port: str) -> None:
    """Exit 2, nothing done: the system would have taken 99999 as 99999 - 65536."""
    config = tmp_path / "q.toml"
    config.write_text(f'database = "sqlite:///{tmp_path / "q.db"}"\n')
    result = CliRunner().invoke(main, ["serve", "--config", str(config), "--port", port])
    assert result.exit_code == 2 and "--port" in result.output
    assert not (tmp_path / "q.db").exists()


def test_serve_on_a_host_that_is_not_an_address_exits_3(tmp_path: Path) -> None:
    config = tmp_path / "q.toml"
    config.write_text(f'database = "sqlite:///{tmp_path / "q.db"}"\n')
    result = CliRunner().invoke(
        main, ["serve", "--config", str(config), "--host", "no.such.invalid"]
    )
    assert result.exit_code == 3
    assert result.output.startswith("Error: cannot listen on no.such.invalid:8000: ")
    assert not (tmp_path / "q.db").exists()


@pytest.mark.parametrize("seconds", ["abc", "0", "-5"])
def test_serve_with_a_bad_dashboard_session_variable_exits_1_with_one_line(
    tmp_path: Path, seconds: str
) -> None:
    config = tmp_path / "q.toml"
    config.write_text(f'database = "sqlite:///{tmp_path / "q.db"}"\n')
    env = {"QUEUELOG_UI_SESSION_SECONDS": seconds}
    result = CliRunner().invoke(main, ["serve", "--config", str(config)], env=env)
    assert result.exit_code == 1
    (line,) = result.output.strip().splitlines()
    prefix = "Error: cannot load the configuration: QUEUELOG_UI_SESSION_SECONDS "
    assert line.startswith(prefix + "(server.ui_session_seconds): ")
    assert not (tmp_path / "q.db").exists()


def test_a_config_file_that_is_not_there_is_named_where_it_was_given(tmp_path: Path) -> None:
    missing = str(tmp_path / "nowhere.toml")
    from_env = CliRunner().invoke(main, ["migrate"], env={"QUEUELOG_CONFIG": missing})
    assert from_env.exit_code == 2
    assert f"Error: Invalid value for QUEUELOG_CONFIG: no file '{missing}'" in from_env.output
    from_option = CliRunner().invoke(main, ["migrate", "--config", missing])
    assert from_option.exit_code == 2
    assert f"Error: Invalid value for '--config': no file '{missing}'" in from_option.output
    assert not list(tmp_path.iterdir())  # nothing made


@pytest.mark.parametrize("command", [["keys", "list"], ["keys", "revoke", "1"]])
def test_keys_on_a_database_that_is_not_there_exit_1_and_make_none(
    tmp_path: Path, command: list[str]
) -> None:
    database = tmp_path / "data" / "q.db"
    config = tmp_path / "q.toml"
    config.write_text(f'database = "sqlite:///{database}"\n')
    result = CliRunner().invoke(main, [*command, "--config", str(config)])
    assert result.exit_code == 1
    (line,) = result.output.strip().splitlines()
    said = f"no file '{database.resolve()}' (migrate or serve makes it)"
    assert line == f"Error: cannot open the database: {said}"
    assert not (tmp_path / "data").exists()


def test_keys_create_takes_a_priority_label_in_any_case_as_the_api_does(tmp_path: Path) -> None:
    config = tmp_path / "q.toml"
    config.write_text(f'database = "sqlite:///{tmp_path / "q.db"}"\n')
    args = ["--name", "ops", "--role", "producer", "--max-priority", "HIGH"]
    made = CliRunner().invoke(main, ["keys", "create", *args, "--config", str(config)])
    assert made.exit_code == 0, made.output
    listed = CliRunner().invoke(main, ["keys", "list", "--json", "--config", str(config)])
    assert [key["max_priority"] for key in json.loads(listed.output)["keys"]] == ["high"]


def test_hardening_104_keys_create_says_the_roles_the_key_has_each_once(tmp_path: Path) -> None:
    config = tmp_path / "q.toml"
    config.write_text(f'database = "sqlite:///{tmp_path / "q.db"}"\n')
    roles = ["--role", "worker", "--role", "producer", "--role", "worker"]
    made = CliRunner().invoke(
        main, ["keys", "create", "--name", "ops", *roles, "--config", str(config)]
    )
    assert made.exit_code == 0, made.output
    assert made.output.splitlines()[0] == "created key 1 for ops (producer, worker)"
    listed = CliRunner().invoke(main, ["keys", "list", "--json", "--config", str(config)])
    assert [key["roles"] for key in json.loads(listed.output)["keys"]] == [["producer", "worker"]]


@pytest.mark.parametrize("key_id", ["0", "-1", "9223372036854775808", "1e3"])
def test_hardening_44_keys_revoke_refuses_an_id_no_key_can_have_in_one_line(
    tmp_path: Path, key_id: str
) -> None:
    """Ids are 1 to 2^63-1, as in the API: another is a usage error (exit 2), never a
    trace from the database's integer conversion."""
    config = tmp_path / "q.toml"
    config.write_text(f'database = "sqlite:///{tmp_path / "q.db"}"\n')
    assert CliRunner().invoke(main, ["migrate", "--config", str(config)]).exit_code == 0
    result = CliRunner().invoke(main, ["keys", "revoke", "--config", str(config), "--", key_id])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert "Error: Invalid value for 'KEY_ID'" in result.output.strip().splitlines()[-1]


@pytest.mark.parametrize("password", ["s3cr%et", "top secret", "s3cr@t", "s3cr/et"])
def test_hardening_22_a_postgresql_url_libpq_cannot_read_is_one_line_without_its_password(
    tmp_path: Path, password: str
) -> None:
    config = tmp_path / "q.toml"
    config.write_text(f'database = "postgresql://u:{password}@127.0.0.1:5432/test"\n')
    result = CliRunner().invoke(main, ["migrate", "--config", str(config)])
    assert result.exit_code == 1
    (line,) = result.output.strip().splitlines()
    assert line.startswith("Error: cannot open the database: not a valid PostgreSQL URL")
    assert password not in result.output and "s3cr" not in result.output


@pytest.mark.parametrize("command", [["migrate"], ["keys", "list"]])
def test_a_postgresql_schema_that_does_not_exist_is_one_line_saying_so(
    tmp_path: Path, command: list[str]
) -> None:
    url = with_schema(postgres_url(), "ql_test_never_made")
    config = tmp_path / "q.toml"
    config.write_text(f'database = "{url}"\n')
    result = CliRunner().invoke(main, [*command, "--config", str(config)])
    assert result.exit_code == 1
    (line,) = result.output.strip().splitlines()
    assert line == (
        "Error: cannot open the database: no schema to make the tables in: the search_path "
        "(the URL's options, else the server's default) names none that exists "
        "(CREATE SCHEMA it first)"
    )


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_a_database_a_newer_version_migrated_stops_migrate_serve_and_keys(
    tmp_path: Path, backend: str
) -> None:
    """An older version on a newer one's tables could misread them, or undo their rules
    (an older pruner deletes jobs without what a newer one keeps beside them)."""
    with ExitStack() as stack:
        if backend == "sqlite":
            url = f"sqlite:///{tmp_path / 'q.db'}"
        else:
            url = stack.enter_context(fresh_schema())
        config = tmp_path / "q.toml"
        config.write_text(f'database = "{url}"\n')
        assert CliRunner().invoke(main, ["migrate", "--config", str(config)]).exit_code == 0
        _record_migration(url, 9999)
        for command in (["migrate"], ["keys", "list"], ["serve", "--port", "0"]):
            result = CliRunner().invoke(main, [*command, "--config", str(config)])
            assert result.exit_code == 1, command
            (line,) = result.output.strip().splitlines()
            assert line.startswith(
                "Error: cannot open the database: the database was migrated by a newer "
                "queuelog (migration 9999; this one knows up to "
            ), line


def _record_migration(url: str, version: int) -> None:
    insert = f"INSERT INTO schema_migrations (version) VALUES ({int(version)})"
    if url.startswith("sqlite:///"):
        with closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as conn, conn:
            conn.execute(insert)
    else:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(insert)


@pytest.mark.parametrize("command", [["migrate"], ["serve", "--port", "0"]])
def test_a_schedule_its_type_would_refuse_stops_migrate_and_serve_alike(
    tmp_path: Path, command: list[str]
) -> None:
    line = _refused_at_load(
        tmp_path,
        command,
        '[types.mail]\npayload_schema = { type = "object", required = ["to"] }\n'
        '[schedules.tick]\nevery_seconds = 60\ntype = "mail"\npayload = { subject = "hi" }\n',
    )
    assert line.startswith("Error: cannot load the configuration: schedules.tick: "), line


def _refused_at_load(tmp_path: Path, command: list[str], settings: str) -> str:
    """The one line ``command`` stops with (exit 1) on a config of ``settings``, having
    made no database."""
    config = tmp_path / "q.toml"
    config.write_text(f'database = "sqlite:///{tmp_path / "q.db"}"\n' + settings)
    result = CliRunner().invoke(main, [*command, "--config", str(config)])
    assert result.exit_code == 1
    (line,) = result.output.strip().splitlines()
    assert not (tmp_path / "q.db").exists()
    return line


@pytest.mark.parametrize("command", [["migrate"], ["serve", "--port", "0"]])
def test_hardening_73_a_pattern_re2_cannot_match_stops_migrate_and_serve_alike(
    tmp_path: Path, command: list[str]
) -> None:
    line = _refused_at_load(
        tmp_path,
        command,
        "[types.mail]\npayload_schema = { properties = { to = { pattern = '^(?!x).+$' } } }\n",
    )
    assert line == (
        "Error: cannot load the configuration: types.mail.payload_schema: "
        'pattern "^(?!x).+$" cannot be matched in linear time by RE2: invalid perl operator: (?!'
    ), line


def _serving(tmp_path: Path, host: str = "127.0.0.1") -> tuple[subprocess.Popen[str], str]:
    """``queuelog serve --port 0`` started, and the address it says it serves on."""
    config = tmp_path / "q.toml"
    config.write_text(f'database = "sqlite:///{tmp_path / "q.db"}"\n')
    args = [QUEUELOG, "serve", "--port", "0", "--host", host, "--config", str(config)]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}  # its lines as it prints them
    server = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env
    )
    assert server.stdout is not None
    said = next(line for line in server.stdout if "serving on" in line)
    return server, said.split("serving on ")[1].split()[0]


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=30) as answer:
            return bool(answer.status == 200)
    except urllib.error.URLError:
        return False  # it listens once it has started


def test_serve_on_port_0_says_the_port_it_serves_on(tmp_path: Path) -> None:
    server, url = _serving(tmp_path)
    with server:
        try:
            assert not url.endswith(":0")
            wait_until(lambda: _answers(f"{url}/healthz"), "the server to answer")
        finally:
            server.terminate()
    assert server.returncode == 0


def test_hardening_98_serve_on_an_ipv6_address_says_a_url_that_reaches_it(
    tmp_path: Path,
) -> None:
    """It said http://::1:PORT, which no client reads as a URL (the port is lost)."""
    try:
        with socket.socket(socket.AF_INET6) as probe:
            probe.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback on this machine")
    server, url = _serving(tmp_path, host="::1")
    with server:
        try:
            assert urllib.parse.urlsplit(url).hostname == "::1"
            wait_until(lambda: _answers(f"{url}/healthz"), "the server to answer")
        finally:
            server.terminate()
    assert server.returncode == 0


@pytest.mark.parametrize("after", [0.005, 0.015, 0.025])
def test_a_sigterm_while_serve_starts_stops_it(tmp_path: Path, after: float) -> None:
    """SIGTERM was ignored from just before the HTTP server took the signals (while it
    started): one that came then was lost, and the server never stopped."""
    server, _ = _serving(tmp_path)
    with server:
        time.sleep(after)
        server.terminate()
        try:
            # Stopped: gracefully (0), or by the signal itself if it came first of all.
            assert server.wait(timeout=30) in (0, -signal.SIGTERM)
        finally:
            server.kill()


@pytest.fixture
def unwritable_database(tmp_path: Path) -> Path:
    """The config of a migrated SQLite database that SQLite opens for reading only: its
    header's write version is raised past the 2 it knows (file modes would not stop
    root, as the tests may run)."""
    config = tmp_path / "q.toml"
    config.write_text(f'database = "sqlite:///{tmp_path / "q.db"}"\n')
    assert CliRunner().invoke(main, ["migrate", "--config", str(config)]).exit_code == 0
    with (tmp_path / "q.db").open("r+b") as database:
        database.seek(18)  # the file format's write version
        database.write(bytes([3]))
    return config


@pytest.mark.parametrize(
    "command",
    [["keys", "create", "--name", "k2", "--role", "admin"], ["keys", "revoke", "1"], ["serve"]],
)
def test_a_database_that_cannot_be_written_is_one_line_from_keys_and_serve(
    unwritable_database: Path, command: list[str]
) -> None:
    args = [QUEUELOG, *command, "--config", str(unwritable_database)]
    if command == ["serve"]:
        args += ["--port", "0"]  # its first admin key cannot be stored: it stops there
    done = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1, done.stderr
    said = done.stderr.strip().splitlines()[-1]
    assert said.startswith("Error: cannot ") and said.endswith("The database cannot be written")
    assert "Traceback" not in done.stderr
    if command[0] == "keys":
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_hardening_95_a_sweep_interval_too_short_to_count_stops_serve_in_one_line(
    tmp_path: Path,
) -> None:
    """serve stopped with a traceback once it had made and shown an admin key."""
    config = tmp_path / "q.toml"
    config.write_text(f'database = "sqlite:///{tmp_path / "q.db"}"\n')
    env = {"QUEUELOG_SWEEP_INTERVAL_SECONDS": "5e-324"}
    result = CliRunner().invoke(main, ["serve", "--config", str(config), "--port", "0"], env=env)
    assert result.exit_code == 1
    (line,) = result.output.strip().splitlines()
    prefix = "Error: cannot load the configuration: QUEUELOG_SWEEP_INTERVAL_SECONDS "
    assert line.startswith(prefix + "(sweep_interval_seconds): "), line
    assert not (tmp_path / "q.db").exists()


def test_hardening_97_keys_look_for_the_tables_in_the_first_schema_the_search_path_names(
    tmp_path: Path,
) -> None:
    """A search_path naming an empty schema, then queuelog's: the tables would be made in
    the first, so the second's are not the ones asked for."""
    url = postgres_url()
    with schema_named(url, "ql_test") as made, schema_named(url, "ql_test") as empty:
        migrated = tmp_path / "made.toml"
        migrated.write_text(f'database = "{with_schema(url, made)}"\n')
        assert CliRunner().invoke(main, ["migrate", "--config", str(migrated)]).exit_code == 0
        both = tmp_path / "both.toml"
        both.write_text(f'database = "{with_schema(url, f"{empty},{made}")}"\n')
        result = CliRunner().invoke(main, ["keys", "list", "--config", str(both)])
        with psycopg.connect(with_schema(url, empty)) as conn:
            tables = conn.execute(
                "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()"
            ).fetchone()
    assert result.exit_code == 1 and "no queuelog tables in the schema" in result.output
    assert tables == (0,)


@pytest.mark.parametrize("command", [["keys", "list"], ["keys", "revoke", "1"]])
def test_hardening_97_keys_on_a_postgresql_schema_without_queuelog_s_tables_make_none(
    tmp_path: Path, command: list[str]
) -> None:
    """They made every table of the queue there, then said there was no key: given the
    wrong database or schema, as the SQLite file's check refuses another directory."""
    with fresh_schema() as url:
        config = tmp_path / "q.toml"
        config.write_text(f'database = "{url}"\n')
        result = CliRunner().invoke(main, [*command, "--config", str(config)])
        with psycopg.connect(url) as conn:
            tables = conn.execute(
                "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()"
            ).fetchone()
        assert CliRunner().invoke(main, ["migrate", "--config", str(config)]).exit_code == 0
        listed = CliRunner().invoke(main, ["keys", "list", "--config", str(config)])
    assert result.exit_code == 1
    (line,) = result.output.strip().splitlines()
    assert line == (
        "Error: cannot open the database: no queuelog tables in the schema the search_path "
        "(the URL's options, else the server's default) names first (migrate or serve "
        "makes them)"
    )
    assert tables == (0,)
    assert listed.exit_code == 0 and listed.output == ""  # once migrated: no key yet
