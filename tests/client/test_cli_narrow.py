"""The CLI's tables on a terminal narrower than they are: every value is shown whole."""

from __future__ import annotations

import subprocess

from tests.realserver import QUEUELOG, RealServer


def _at_width(server: RealServer, columns: int, *args: str) -> str:
    env = server.client_env(server.keys["root"]) | {"COLUMNS": str(columns)}
    done = subprocess.run(
        [QUEUELOG, *args], capture_output=True, text=True, env=env, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_hardening_119_a_narrow_terminal_wraps_a_value_never_cuts_it(
    real_server: RealServer,
) -> None:
    """On a terminal of 60 to 80 columns `types list` cut a type's name short (`sen…`):
    the name to give `types pause` was lost. A value wider than its column goes on over
    more lines instead."""
    for columns in (60, 70, 80):
        table = _at_width(real_server, columns, "types", "list")
        rows = [line for line in table.splitlines() if line.startswith("│")]
        first_cells = "".join(row.split("│")[1].strip() for row in rows)
        assert "…" not in first_cells
        assert {"send_email", "noop", "slow"} <= set(_names(rows))


def _names(rows: list[str]) -> list[str]:
    """The first column's values, each put back together from the lines it spans."""
    names: list[str] = []
    for row in rows:
        cell = row.split("│")[1].strip()
        if row.split("│")[2].strip():  # a row's first line: a new value
            names.append(cell)
        elif names:
            names[-1] += cell
    return names
