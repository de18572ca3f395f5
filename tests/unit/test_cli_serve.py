"""``queuelog serve`` on an address it cannot have: one line, exit 3, nothing done."""

from __future__ import annotations

import socket
from pathlib import Path

from click.testing import CliRunner

from queuelog.cli import main


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


def test_serve_on_a_host_that_is_not_an_address_exits_3(tmp_path: Path) -> None:
    config = tmp_path / "q.toml"
    config.write_text(f'database = "sqlite:///{tmp_path / "q.db"}"\n')
    result = CliRunner().invoke(
        main, ["serve", "--config", str(config), "--host", "no.such.invalid"]
    )
    assert result.exit_code == 3
    assert result.output.startswith("Error: cannot listen on no.such.invalid:8000: ")
    assert not (tmp_path / "q.db").exists()
