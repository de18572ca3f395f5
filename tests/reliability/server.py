"""A real queuelog server in a subprocess, for tests that kill, restart and race it.

``RealServer`` writes a TOML config and a database under a temp directory,
creates keys with ``queuelog keys create``, starts ``queuelog serve`` on a free
127.0.0.1 port, waits for ``/readyz``, and stops it with SIGTERM or SIGKILL.
Every wait is bounded.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx

START_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0

DEFAULT_TYPES: dict[str, dict[str, Any]] = {
    "noop": {"max_retries": 3, "lease_seconds": 30},
    "short": {
        "max_retries": 5,
        "lease_seconds": 2,
        "backoff_base_seconds": 0.2,
        "backoff_cap_seconds": 0.5,
    },
}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _toml_value(value: Any) -> str:
    if isinstance(value, dict):
        inner = ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items())
        return "{ " + inner + " }"
    return json.dumps(value)


def write_config(path: Path, database: Path, types: Mapping[str, Mapping[str, Any]]) -> None:
    lines = [
        f"database = {json.dumps('sqlite:///' + str(database))}",
        'durability = "full"',
        "",
        "[limits]",
        "rate_per_second = 0",
    ]
    for name, options in types.items():
        lines += ["", f"[types.{name}]"]
        lines += [f"{key} = {_toml_value(value)}" for key, value in options.items()]
    path.write_text("\n".join(lines) + "\n")


class RealServer:
    """One ``queuelog serve`` process at a time, on the same config and database."""

    def __init__(
        self,
        directory: Path,
        types: Mapping[str, Mapping[str, Any]] | None = None,
        sweep_interval: float = 0.2,
        env: Mapping[str, str] | None = None,
    ) -> None:
        self.directory = directory
        self.database = directory / "queuelog.db"
        self.config = directory / "queuelog.toml"
        write_config(self.config, self.database, types or DEFAULT_TYPES)
        self.env = {
            **os.environ,
            "QUEUELOG_SWEEP_INTERVAL_SECONDS": str(sweep_interval),
            **(env or {}),
        }
        self.env.pop("QUEUELOG_CONFIG", None)
        self.env.pop("QUEUELOG_DATABASE_URL", None)
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.directory / f"server-{self.starts}.log"

    def _command(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "queuelog.cli", *args]

    def create_key(self, name: str, *roles: str) -> str:
        """``queuelog keys create``; the plaintext key is the last line of its output."""
        role_args = [arg for role in roles for arg in ("--role", role)]
        done = subprocess.run(
            self._command(
                "keys", "create", "--config", str(self.config), "--name", name, *role_args
            ),
            env=self.env,
            capture_output=True,
            text=True,
            timeout=START_TIMEOUT,
            check=True,
        )
        key = done.stdout.strip().splitlines()[-1]
        assert key.startswith("ql_"), done.stdout
        return key

    def start(self) -> None:
        """Start on a fresh free port and wait until ``/readyz`` answers 200."""
        assert self.process is None or self.process.poll() is not None, "already running"
        self.starts += 1
        self.port = free_port()
        log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            self._command("serve", "--config", str(self.config), "--port", str(self.port)),
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        self.wait_ready()

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise AssertionError(f"server exited early:\n{self.log()}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=2.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"server not ready after {timeout} s:\n{self.log()}")

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-5000:]
        except OSError:
            return ""

    def terminate(self, timeout: float = STOP_TIMEOUT) -> int:
        """SIGTERM and wait for the exit; the exit code."""
        return self._signal(signal.SIGTERM, timeout)

    def kill(self) -> int:
        return self._signal(signal.SIGKILL, STOP_TIMEOUT)

    def _signal(self, sig: signal.Signals, timeout: float) -> int:
        process = self.process
        assert process is not None
        if process.poll() is None:
            process.send_signal(sig)
        try:
            return process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=STOP_TIMEOUT)
            raise AssertionError(f"server did not exit {timeout} s after {sig.name}") from None

    def close(self) -> None:
        """Make sure no server is left running (for fixture teardown)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=STOP_TIMEOUT)

    def client(self, key: str, timeout: float = 30.0) -> httpx.Client:
        return httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {key}"}, timeout=timeout
        )

    def integrity_check(self) -> str:
        conn = sqlite3.connect(self.database, timeout=30.0)
        try:
            row = conn.execute("PRAGMA integrity_check").fetchone()
            return str(row[0])
        finally:
            conn.close()
