"""A server command whose extra is missing says in one line which to install, exit 2:
``serve --otel`` without OpenTelemetry's ASGI instrumentation, a PostgreSQL database
without psycopg. (Without the server extra at all: tests/system/test_slim_install.py.)"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# The command line in a process where ``blocked`` cannot be imported, as where its
# distribution is not installed.
SCRIPT = """
import sys
blocked, args = sys.argv[1], sys.argv[2:]
sys.modules[blocked] = None
from queuelog.cli import main
main(args, prog_name="queuelog")
"""


def _run(tmp_path: Path, blocked: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, blocked, *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
        check=False,
    )


@pytest.mark.parametrize(
    ("blocked", "config", "args", "extra"),
    [
        ("opentelemetry.instrumentation.asgi", "", ["serve", "--otel"], "server,otel"),
        ("opentelemetry", "[server]\notel = true\n", ["serve"], "server,otel"),
        ("psycopg", 'database = "postgresql://db.invalid/q"\n', ["serve"], "server,postgres"),
        ("psycopg", 'database = "postgresql://db.invalid/q"\n', ["migrate"], "server,postgres"),
    ],
)
def test_a_command_without_its_extra_exits_2_naming_it(
    tmp_path: Path, blocked: str, config: str, args: list[str], extra: str
) -> None:
    (tmp_path / "q.toml").write_text(config)
    done = _run(tmp_path, blocked, *args, "--config", "q.toml")
    assert done.returncode == 2, done.stderr
    (line,) = done.stderr.splitlines()
    assert line.endswith(
        f"pip install 'queuelog[{extra}]' (from a checkout: pip install '.[{extra}]')"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["q.toml"]  # nothing opened or made
