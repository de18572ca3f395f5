"""A SQLite database whose folder cannot be written: ``serve``, ``migrate`` and ``keys``
say so in one line. The folder is made read-only by a bind mount of its own (the test
must run as root; it skips otherwise), as file modes would not stop root."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from queuelog.cli import main
from tests.mounts import mount, mounted


@pytest.fixture
def read_only_folder(tmp_path: Path) -> Iterator[Path]:
    """The config of a migrated database whose folder is then mounted read-only."""
    folder = tmp_path / "data"
    config = tmp_path / "q.toml"
    config.write_text(f'database = "sqlite:///{folder / "q.db"}"\n')
    assert CliRunner().invoke(main, ["migrate", "--config", str(config)]).exit_code == 0
    with mounted("a folder (bind)", ["--bind", str(folder)], folder):
        assert mount(["mount", "-o", "remount,bind,ro", str(folder)]).returncode == 0
        yield config


@pytest.mark.parametrize(
    "command",
    [["keys", "list"], ["keys", "revoke", "1"], ["migrate"], ["serve", "--port", "0"]],
)
def test_hardening_99_a_database_in_a_folder_that_cannot_be_written_is_named_so(
    read_only_folder: Path, command: list[str]
) -> None:
    """SQLite said "unable to open database file" of a file that is there and readable:
    it is the -wal and -shm files beside it that cannot be made."""
    result = CliRunner().invoke(main, [*command, "--config", str(read_only_folder)])
    assert result.exit_code == 1
    (line,) = result.output.strip().splitlines()
    folder = read_only_folder.parent / "data"
    assert line == (
        f"Error: cannot open the database: the folder {str(folder)!r} cannot be written: "
        "SQLite makes the database's -wal and -shm files beside it, for readers too"
    )
