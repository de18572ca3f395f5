"""``import queuelog`` gives the SDK and nothing of the server."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import queuelog

SDK = Path(queuelog.__file__).parent / "client"
SERVER_LIBRARIES = {"fastapi", "starlette", "uvicorn", "psycopg", "psycopg_pool", "pydantic"}
SERVER_LIBRARIES |= {"jsonschema", "prometheus_client", "jinja2", "sqlite3", "orjson"}
# What the SDK shares with the server: the domain's errors and models, the clock's
# time format and the JSON the server accepts. Everything else belongs to the server.
SHARED = {"queuelog", "queuelog._version", "queuelog.errors", "queuelog.models", "queuelog.clock"}
SHARED |= {"queuelog.plain_json"}


def _loaded_by(module: str) -> set[str]:
    script = f"import json, sys, {module}; print(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    return set(json.loads(done.stdout))


def test_importing_queuelog_loads_the_sdk_and_no_server_module() -> None:
    loaded = _loaded_by("queuelog")
    assert {"queuelog.client", "queuelog.client.worker", "pycurl", "httpx"} <= loaded
    assert not {m.split(".")[0] for m in loaded} & SERVER_LIBRARIES
    # Installed here, yet imported only at the first traced call (client/tracing.py).
    assert not {m for m in loaded if m.startswith(("opentelemetry", "queuelog.client.otel"))}
    ours = {m for m in loaded if m == "queuelog" or m.startswith("queuelog.")}
    assert {m for m in ours if not m.startswith("queuelog.client")} <= SHARED


def test_the_command_line_loads_no_server_module_until_a_server_command_runs() -> None:
    """``queuelog --help`` and the client commands work in an install without the server."""
    loaded = _loaded_by("queuelog.cli")
    assert not {m.split(".")[0] for m in loaded} & SERVER_LIBRARIES
    ours = {m for m in loaded if m.startswith("queuelog.") and not m.startswith("queuelog.cli")}
    assert {m for m in ours if not m.startswith("queuelog.client")} <= SHARED | {"queuelog.extras"}


def test_the_sdk_never_imports_the_package_root() -> None:
    """The root imports the SDK; an SDK module importing the root would close a cycle."""
    for path in sorted(SDK.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                assert node.module != "queuelog", f"{path.name}:{node.lineno}"
            elif isinstance(node, ast.Import):
                assert all(a.name != "queuelog" for a in node.names), f"{path.name}:{node.lineno}"


def test_the_package_version_is_the_sdks_user_agent() -> None:
    from queuelog.client import Client
    from tests.client.pools import Scripted, answer

    pool = Scripted(lambda _: answer(200, {"keys": []}))
    with Client("http://127.0.0.1:1", "k", transport=pool) as client:
        client.list_keys()
    assert pool.sent[0].header("User-Agent") == f"queuelog-python/{queuelog.__version__}"
    assert pool.sent[0].header("Authorization") == "Bearer k"


def test_the_enums_of_a_job_are_importable_where_the_sdk_is() -> None:
    """A handler compares ``job.status`` and ``job.priority`` without reaching into the server's
    modules; a priority's label is what the API and the CLI print."""
    from queuelog import JobStatus, Priority
    from queuelog.client import JobStatus as ClientStatus
    from queuelog.client import Priority as ClientPriority

    assert (JobStatus, Priority) == (ClientStatus, ClientPriority)
    assert JobStatus("pending") is JobStatus.PENDING
    assert Priority.from_label("high").label == "high"
