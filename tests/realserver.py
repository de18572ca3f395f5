"""A real ``queuelog serve`` process on a free 127.0.0.1 port: the one way tests run a server.

``RealServer`` writes a TOML config (from a dict) in a directory, creates keys with
``queuelog keys create`` (the plaintext key is the last line it prints), starts the server,
waits for ``/readyz`` and stops it with SIGTERM or SIGKILL. It can be started again on the
same database; each start writes its output to a log file of its own, never to a pipe.
Every wait is bounded.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

QUEUELOG = str(Path(sys.executable).parent / "queuelog")
ROOT = Path(__file__).resolve().parent.parent
# A client process imports this checkout's code, not an installed copy of another one.
CHECKOUT_PATH = f"{ROOT / 'src'}{os.pathsep}{ROOT}"
START_TIMEOUT = 60.0
STOP_TIMEOUT = 30.0
WAIT_TIMEOUT = 90.0  # any single wait for a server to have done something, on a busy machine

DEFAULT_TYPES: dict[str, dict[str, Any]] = {
    "noop": {"max_retries": 3, "lease_seconds": 30},
    "short": {
        "max_retries": 5,
        "lease_seconds": 2,
        "backoff_base_seconds": 0.2,
        "backoff_cap_seconds": 0.5,
    },
}


def wait_until(check: Callable[[], bool], what: str, timeout: float = WAIT_TIMEOUT) -> None:
    """Poll ``check`` until it holds; AssertionError naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _toml_value(value: Any) -> str:
    if isinstance(value, Mapping):
        inner = ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items())
        return "{ " + inner + " }"
    return json.dumps(value)


def toml_text(data: Mapping[str, Any], table: tuple[str, ...] = ()) -> str:
    """TOML for ``data``: tables down to ``[types.NAME]``, inline tables below that."""
    lines: list[str] = []
    tables: list[tuple[str, Mapping[str, Any]]] = []
    for key, value in data.items():
        if isinstance(value, Mapping) and len(table) < 2:
            tables.append((key, value))
        else:
            lines.append(f"{key} = {_toml_value(value)}")
    text = "\n".join(lines) + "\n" if lines else ""
    for key, value in tables:
        path = (*table, key)
        body = toml_text(value, path)
        # A table holding only tables needs no header of its own.
        header = "" if body.startswith("\n[") else f"\n[{'.'.join(map(_toml_key, path))}]\n"
        text += header + body
    return text


def _toml_key(key: str) -> str:
    """A bare key where TOML allows one, else a quoted one (a type named ``team/mail``)."""
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else json.dumps(key)


def _merged(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), dict):
            out[key] = _merged(out[key], value)
        else:
            out[key] = value
    return out


def clean_environ(**extra: str) -> dict[str, str]:
    """This process's environment without any ``QUEUELOG_*`` variable, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("QUEUELOG_")}
    env.update(extra)
    return env


class RealServer:
    """One ``queuelog serve`` process at a time, on the same config and database.

    ``types`` are the job types (``DEFAULT_TYPES`` unless given); ``config`` is merged
    over the base settings (SQLite in ``directory``, full durability, no rate limit, a
    0.2 s sweep); ``env`` is added to the environment of the server and of the CLI, which
    has no other ``QUEUELOG_*`` variable: ``{"QUEUELOG_DATABASE_URL": url}`` serves
    PostgreSQL instead of the SQLite file. ``serve_args`` are added to ``queuelog serve``.
    """

    def __init__(
        self,
        directory: Path,
        types: Mapping[str, Mapping[str, Any]] | None = None,
        config: Mapping[str, Any] | None = None,
        env: Mapping[str, str] | None = None,
        serve_args: Sequence[str] = (),
    ) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.directory = directory
        self.database = directory / "queuelog.db"
        self.config = directory / "queuelog.toml"
        settings: dict[str, Any] = {
            "database": f"sqlite:///{self.database}",
            "durability": "full",
            "sweep_interval_seconds": 0.2,
            "limits": {"rate_per_second": 0},
        }
        settings = _merged(settings, config or {})
        settings["types"] = types if types is not None else DEFAULT_TYPES
        self.config.write_text(toml_text(settings))
        self.environ = clean_environ(**(env or {}))
        self.serve_args = tuple(serve_args)
        self.keys: dict[str, str] = {}
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        """The output of the latest start."""
        return self.directory / f"server-{self.starts}.log"

    def log(self) -> str:
        """What the latest start has printed so far."""
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    # -- the command line ------------------------------------------------------------

    def cli(self, *args: str, timeout: float = START_TIMEOUT) -> subprocess.CompletedProcess[str]:
        """``queuelog ARGS --config CONFIG``; the caller checks the exit code."""
        return subprocess.run(
            [QUEUELOG, *args, "--config", str(self.config)],
            env=self.environ,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def create_key(self, name: str, *roles: str, max_priority: str | None = None) -> str:
        """``queuelog keys create``; the plaintext key is the last line of its output."""
        args = ["keys", "create", "--name", name]
        args += [arg for role in roles for arg in ("--role", role)]
        if max_priority is not None:
            args += ["--max-priority", max_priority]
        done = self.cli(*args)
        assert done.returncode == 0, (done.returncode, done.stdout, done.stderr)
        key = done.stdout.strip().splitlines()[-1]
        assert key.startswith("ql_"), done.stdout
        self.keys[name] = key
        return key

    def create_key_over_http(
        self, name: str, *roles: str, admin: str = "root", max_priority: str = "high"
    ) -> str:
        """``POST /keys`` on the running server with the admin key named ``admin``."""
        response = httpx.post(
            f"{self.url}/keys",
            json={"name": name, "roles": list(roles), "max_priority": max_priority},
            headers={"Authorization": f"Bearer {self.keys[admin]}"},
            timeout=30,
        )
        assert response.status_code == 201, response.text
        key: str = response.json()["key"]
        self.keys[name] = key
        return key

    def client_env(self, key: str | None = None) -> dict[str, str]:
        """Environment for a client process talking to this server, with ``key`` if given."""
        env = clean_environ(QUEUELOG_URL=self.url, PYTHONPATH=CHECKOUT_PATH)
        if key is not None:
            env["QUEUELOG_API_KEY"] = key
        return env

    # -- the process -----------------------------------------------------------------

    def launch(self) -> None:
        """Start on a fresh free port without waiting (``wait_ready`` waits)."""
        assert self.process is None or self.process.poll() is not None, "already running"
        self.starts += 1
        self.port = free_port()
        with self.log_path.open("wb") as log:
            port = str(self.port)
            self.process = subprocess.Popen(
                [QUEUELOG, "serve", "--config", str(self.config), "--port", port, *self.serve_args],
                env=self.environ,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    def start(self) -> None:
        """Start on a fresh free port and wait until ``/readyz`` answers 200."""
        self.launch()
        self.wait_ready()

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise AssertionError(f"server exited early:\n{self.log()[-5000:]}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=2.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"server not ready after {timeout} s:\n{self.log()[-5000:]}")

    def terminate(self, timeout: float = STOP_TIMEOUT) -> int:
        """SIGTERM and wait for the exit; the exit code."""
        return self._signal(signal.SIGTERM, timeout)

    def kill(self) -> int:
        """SIGKILL and wait for the exit; the exit code (-9)."""
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
        """Make sure no server is left running (for teardown): SIGTERM, then SIGKILL."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=STOP_TIMEOUT)

    # -- talking to it ---------------------------------------------------------------

    def client(self, key: str, timeout: float = 30.0) -> httpx.Client:
        """An HTTP client for the running server that sends ``key``."""
        return httpx.Client(
            base_url=self.url, headers={"Authorization": f"Bearer {key}"}, timeout=timeout
        )

    def integrity_check(self) -> str:
        """SQLite's ``PRAGMA integrity_check`` on the database ("ok" when sound)."""
        conn = sqlite3.connect(self.database, timeout=30.0)
        try:
            row = conn.execute("PRAGMA integrity_check").fetchone()
            return str(row[0])
        finally:
            conn.close()


@contextmanager
def closing(server: RealServer) -> Iterator[RealServer]:
    """Yield ``server``; whatever happens, none of its processes is left running."""
    try:
        yield server
    finally:
        server.close()
