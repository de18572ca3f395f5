"""A real queuelog server in a subprocess, for end-to-end tests.

``RealServer`` writes a TOML config and a SQLite file under a temp directory, creates keys
with ``queuelog keys create``, then runs ``queuelog serve`` on a free 127.0.0.1 port.
Use the fixtures ``real_server`` (one per module) or build one with ``start_server``.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

BIN = Path(sys.executable).parent
QUEUELOG = str(BIN / "queuelog")
ROOT = Path(__file__).resolve().parent.parent

CONFIG = """\
database = "sqlite:///{db}"
durability = "normal"
sweep_interval_seconds = 0.2

[limits]
rate_per_second = 0
max_payload_bytes = 2048

[types.send_email]
max_retries = 3
lease_seconds = 30
backoff_base_seconds = 0.05
backoff_cap_seconds = 0.2
payload_schema = {{ type = "object", required = ["to"] }}

[types.noop]
max_retries = 2
backoff_base_seconds = 0.05
backoff_cap_seconds = 0.2

[types.slow]
max_retries = 0
lease_seconds = 2
"""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 60) -> str:
    """Run ``queuelog ARGS`` and return its standard output; fails the test on exit != 0."""
    done = subprocess.run(
        [QUEUELOG, *args], capture_output=True, text=True, timeout=timeout, env=env, check=False
    )
    assert done.returncode == 0, (done.returncode, done.stdout, done.stderr)
    return done.stdout


@dataclass
class RealServer:
    directory: Path
    config_text: str = CONFIG
    port: int = field(default_factory=free_port)
    keys: dict[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def config(self) -> Path:
        return self.directory / "queuelog.toml"

    def write_config(self) -> None:
        db = self.directory / "queuelog.db"
        self.config.write_text(self.config_text.format(db=db))

    def create_key(self, name: str, *roles: str, max_priority: str = "high") -> str:
        role_args = [arg for role in roles for arg in ("--role", role)]
        out = run_cli(
            "keys", "create", "--config", str(self.config), "--name", name,
            "--max-priority", max_priority, *role_args,
        )  # fmt: skip
        key = out.strip().splitlines()[-1]
        self.keys[name] = key
        return key

    def create_key_over_http(self, name: str, *roles: str) -> str:
        """Create a key with the admin key ``root`` on the running server."""
        response = httpx.post(
            f"{self.url}/keys",
            json={"name": name, "roles": list(roles), "max_priority": "high"},
            headers={"Authorization": f"Bearer {self.keys['root']}"},
            timeout=30,
        )
        assert response.status_code == 201, response.text
        key: str = response.json()["key"]
        self.keys[name] = key
        return key

    def start(self) -> None:
        log = open(self.directory / "server.log", "ab")  # noqa: SIM115 - lives with the process
        self.process = subprocess.Popen(
            [QUEUELOG, "serve", "--config", str(self.config), "--port", str(self.port)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.log()
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        raise AssertionError("server did not start:\n" + self.log())

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=30)

    def log(self) -> str:
        path = self.directory / "server.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def env(self, key: str | None = None) -> dict[str, str]:
        """Environment for a subprocess talking to this server, with ``key`` if given."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUELOG_")}
        env["QUEUELOG_URL"] = self.url
        if key is not None:
            env["QUEUELOG_API_KEY"] = key
        env["PYTHONPATH"] = str(ROOT)
        return env


def start_server(directory: Path, config_text: str = CONFIG) -> RealServer:
    """A started server with keys ``shop`` (producer), ``mailer`` (worker), ``root`` (admin)."""
    server = RealServer(directory, config_text)
    server.write_config()
    server.create_key("root", "admin")  # with the command, before the server starts
    server.start()
    server.create_key_over_http("shop", "producer")
    server.create_key_over_http("mailer", "worker")
    return server


@pytest.fixture(scope="module")
def real_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealServer]:
    server = start_server(tmp_path_factory.mktemp("server"))
    try:
        yield server
    finally:
        server.stop()
