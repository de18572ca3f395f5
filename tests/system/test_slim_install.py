"""``pip install queuelog`` without extras: the package is built as a wheel, installed
into a fresh virtual environment, and gives the SDK and the client commands without a
single server dependency; a server command says in one line which extra it needs."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Distributions of the server, postgres and otel extras (and of what they bring).
SERVER_DISTRIBUTIONS = {"fastapi", "starlette", "uvicorn", "psycopg", "psycopg-pool", "jinja2"}
SERVER_DISTRIBUTIONS |= {"prometheus-client", "pydantic", "jsonschema", "orjson", "cronsim"}
SERVER_DISTRIBUTIONS |= {"opentelemetry-api", "swagger-ui-bundle-v2", "google-re2"}
# pip reuses its cache (and finds the build backend there); each step is bounded.
PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--timeout", "30"]
STEP_TIMEOUT = 240
# The SDK in use with no server: an enqueue through a stand-in transport.
SDK_SCRIPT = """
import json, sys
import queuelog
from queuelog import AsyncClient, Client, ServerUnavailable, Worker
from queuelog.client.transport import Answer
sent = []
class Server:
    def close(self):
        pass
    def send(self, request):
        sent.append(request.headers)
        job = {"id": 1, "type": "noop", "payload": {}, "priority": "low", "status": "pending",
               "retry_count": 0, "max_retries": 3, "idempotency_key": "k",
               "run_at": "2026-01-01T00:00:00.000000Z", "created_at": "2026-01-01T00:00:00.000000Z",
               "updated_at": "2026-01-01T00:00:00.000000Z"}
        return Answer(201, json.dumps(job).encode())
with Client("http://127.0.0.1:1", "k", transport=Server()) as client:
    job = client.enqueue("noop", {})
print(json.dumps({"id": job.id, "traceparent": sent[0].get("traceparent"),
                  "modules": sorted({m.split(".")[0] for m in sys.modules})}))
"""


def _run(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in args],
        capture_output=True,
        text=True,
        timeout=STEP_TIMEOUT,
        cwd=cwd,
        check=False,
    )


def _checked(*args: str | Path) -> str:
    done = _run(*args)
    assert done.returncode == 0, f"{args}: {done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def slim(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtual environment with the built wheel of queuelog, without extras: the
    bin directory of its commands."""
    work = tmp_path_factory.mktemp("slim")
    source = work / "source"  # a copy: building leaves build/ and egg-info behind
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info")
    shutil.copytree(ROOT / "src", source / "src", ignore=ignore)
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    _checked(*PIP, "wheel", "--quiet", "--no-deps", "--wheel-dir", work / "dist", source)
    (wheel,) = (work / "dist").glob("queuelog-*.whl")
    _checked(sys.executable, "-m", "venv", "--without-pip", work / "venv")
    python = work / "venv" / "bin" / "python"
    _checked(*PIP, "--python", python, "install", "--quiet", wheel)
    return python.parent


@pytest.mark.slow
def test_the_slim_install_brings_no_server_dependency(slim: Path) -> None:
    listed = _checked(*PIP, "--python", slim / "python", "list", "--format", "json")
    installed = {d["name"].lower().replace("_", "-") for d in json.loads(listed)}
    assert {"queuelog", "httpx", "pycurl", "click", "rich"} <= installed
    assert not installed & SERVER_DISTRIBUTIONS


@pytest.mark.slow
def test_the_slim_install_enqueues_with_the_sdk_and_imports_nothing_of_the_server(
    slim: Path, tmp_path: Path
) -> None:
    done = json.loads(_checked(slim / "python", "-c", SDK_SCRIPT))
    assert done["id"] == 1
    assert done["traceparent"] is None  # no OpenTelemetry: nothing traced, nothing sent
    assert not set(done["modules"]) & {"fastapi", "starlette", "pydantic", "opentelemetry"}


@pytest.mark.slow
def test_the_slim_install_has_the_client_commands(slim: Path) -> None:
    assert "enqueue" in _checked(slim / "queuelog", "--help")
    assert "--priority" in _checked(slim / "queuelog", "enqueue", "--help")
    assert "--concurrency" in _checked(slim / "queuelog", "worker", "--help")
    # The same command where the scripts are not on the PATH.
    assert "Usage: queuelog enqueue" in _checked(
        slim / "python", "-m", "queuelog", "enqueue", "--help"
    )


@pytest.mark.slow
@pytest.mark.parametrize("command", [["serve"], ["migrate"], ["keys", "list"]])
def test_a_server_command_without_the_server_extra_exits_2_naming_it(
    slim: Path, tmp_path: Path, command: list[str]
) -> None:
    done = _run(slim / "queuelog", *command, cwd=tmp_path)
    assert done.returncode == 2
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert "pip install 'queuelog[server]' (from a checkout: pip install '.[server]')" in line
    assert not list(tmp_path.iterdir())  # nothing was made: no database, no data directory
