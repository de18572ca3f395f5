"""The CLI refuses JSON the server refuses, an object naming a member twice too: bad
usage, before any request."""

from __future__ import annotations

import subprocess

import pytest

from tests.realserver import CHECKOUT_PATH, QUEUELOG, clean_environ, free_port


def _queuelog(*args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    # No server listens: a refusal must come before any request.
    env = clean_environ(
        QUEUELOG_URL=f"http://127.0.0.1:{free_port()}",
        QUEUELOG_API_KEY="ql_unused",
        PYTHONPATH=CHECKOUT_PATH,
    )
    command = [QUEUELOG, *args]
    return subprocess.run(command, input=stdin, capture_output=True, text=True, env=env, timeout=60)


@pytest.mark.parametrize(
    ("args", "stdin"),
    [
        (("enqueue", "noop", '{"to": "a", "to": "b"}'), ""),
        (("enqueue", "--from-file", "-"), '{"type": "noop", "type": "send_email"}\n'),
        (
            ("schedules", "create", "s", "noop", '{"a": {"b": 1, "b": 2}}', "--every-seconds", "9"),
            "",
        ),
    ],
)
def test_hardening_86_the_cli_refuses_json_naming_a_member_twice(
    args: tuple[str, ...], stdin: str
) -> None:
    done = _queuelog(*args, stdin=stdin)
    assert done.returncode == 2, done.stderr
    assert "more than once" in done.stderr and "Traceback" not in done.stderr
