"""A real ``queuelog serve`` process on a free 127.0.0.1 port, for end-to-end tests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

BIN = Path(sys.executable).parent / "queuelog"

CONFIG = """
database = "sqlite:///{db}"
[limits]
rate_per_second = 0
[types.noop]
max_retries = 3
lease_seconds = 30
[types.send_email]
max_retries = 5
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def run_cli(*args: str, config: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN), *args, "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def create_key(config: Path, name: str, *roles: str, max_priority: str = "medium") -> str:
    args = ["keys", "create", "--name", name, "--max-priority", max_priority]
    for role in roles:
        args += ["--role", role]
    done = run_cli(*args, config=config)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


@dataclass
class LiveServer:
    url: str
    config: Path
    process: subprocess.Popen[bytes]
    log_path: Path

    def output(self) -> str:
        """What the server has printed so far (it writes to a file, never a pipe)."""
        return self.log_path.read_text(errors="replace")

    def client(self, key: str, timeout: float = 30) -> httpx.Client:
        return httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {key}"}, timeout=timeout
        )


def write_config(tmp: Path, extra: str = "") -> Path:
    config = tmp / "queuelog.toml"
    config.write_text(CONFIG.format(db=tmp / "queuelog.db") + extra)
    return config


@contextmanager
def live_server(config: Path, env: dict[str, str] | None = None) -> Iterator[LiveServer]:
    """Start ``queuelog serve``, wait until /readyz answers, stop it afterwards."""
    port = free_port()
    log_path = config.parent / f"server-{port}.log"
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [str(BIN), "serve", "--config", str(config), "--port", str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )
    server = LiveServer(f"http://127.0.0.1:{port}", config, process, log_path)
    try:
        _wait_ready(server)
        yield server
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


def _wait_ready(server: LiveServer, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise AssertionError(f"server exited early: {server.output()}")
        try:
            if httpx.get(f"{server.url}/readyz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise AssertionError("server did not become ready")
