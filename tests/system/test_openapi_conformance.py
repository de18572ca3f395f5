"""schemathesis, run as a user would, with every check, against a real server on each
backend: the OpenAPI description says exactly what the server accepts and answers."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import nullcontext
from pathlib import Path

import pytest

from tests.postgres import fresh_schema
from tests.realserver import CHECKOUT_PATH, RealServer, closing

pytestmark = pytest.mark.slow

SCHEMATHESIS = str(Path(sys.executable).parent / "schemathesis")
TYPES = {"send_email": {"max_retries": 2}, "noop": {}}


@pytest.fixture(params=["sqlite", "postgresql"])
def server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RealServer]:
    database = fresh_schema() if request.param == "postgresql" else nullcontext(None)
    with database as url:
        env = {"QUEUELOG_DATABASE_URL": url} if url else {}
        with closing(RealServer(tmp_path, types=TYPES, env=env)) as real:
            real.create_key("everyone", "admin", "producer", "worker", max_priority="critical")
            real.create_key("revoker", "admin")
            real.start()
            yield real


def _schemathesis(real: RealServer, key: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "tests.system.schemathesis_hooks"}
    env["PYTHONPATH"] = CHECKOUT_PATH  # the hooks module, and the code it imports
    return subprocess.run(
        [
            SCHEMATHESIS,
            "run",
            f"{real.url}/openapi.json",
            "-H",
            f"Authorization: Bearer {key}",
            "--checks",
            "all",
            "--max-examples",
            "40",
            "--seed",
            "20261201",
            "--request-timeout",
            "45",  # a long-poll claim may wait 30 s, as documented
            "--no-color",
            *args,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def test_every_operation_does_what_the_description_says(server: RealServer) -> None:
    # Revoking keys is run alone, with a key of its own: the fuzzer revokes whatever
    # key ids it draws, its own among them.
    done = _schemathesis(server, server.keys["everyone"], "--exclude-operation-id", "revoke_key")
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert "401 Unauthorized" not in done.stdout, "the run lost its key"
    revoking = _schemathesis(server, server.keys["revoker"], "--include-operation-id", "revoke_key")
    assert revoking.returncode == 0, revoking.stdout[-6000:] + revoking.stderr[-2000:]
