"""A real ``queuelog serve`` process on a temporary SQLite file (or a PostgreSQL schema),
with bench keys."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from queuelog.auth import KeyRing
from queuelog.clock import SystemClock
from queuelog.models import Priority, Role
from queuelog.storage.sqlite.store import SqliteStorage

BIN = Path(sys.executable).parent / "queuelog"

CONFIG = """
database = "{database}"
durability = "full"
[limits]
rate_per_second = 0
[types.noop]
max_retries = 3
lease_seconds = 60
"""

# The flow-control section's server also has limited types (a claim that names none
# of them, or no type at all, then counts type by type: the other sections do not).
FLOW_TYPES = """
[types.wide]  # limits far above the workers: they never bind
max_retries = 3
lease_seconds = 60
concurrency = 100000
group_concurrency = 100000
[types.tenant]  # one running job per group
max_retries = 3
lease_seconds = 60
group_concurrency = 1
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Keys:
    producer: str
    worker: str


def prepare_database(
    workdir: Path, flow: bool = False, database: str | None = None
) -> tuple[Path, Keys]:
    """Write the config (with ``flow``, the limited types too), migrate the database
    and create the bench's keys. ``database``: a PostgreSQL URL (of a fresh schema)
    instead of a SQLite file in ``workdir``."""
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "queuelog.toml"
    url = database or f"sqlite:///{workdir / 'queuelog.db'}"
    config.write_text(CONFIG.format(database=url) + (FLOW_TYPES if flow else ""))
    storage: Any
    if database:
        from queuelog.storage.postgres.store import PostgresStorage  # the postgres extra

        storage = PostgresStorage(database, durability="full")
    else:
        storage = SqliteStorage(workdir / "queuelog.db", durability="full")
    try:
        keys = asyncio.run(_create_keys(KeyRing(storage, SystemClock())))
    finally:
        storage.close()
    return config, keys


async def _create_keys(ring: KeyRing) -> Keys:
    await ring.create("admin", frozenset({Role.ADMIN}), Priority.CRITICAL)
    _, producer = await ring.create("bench-producer", frozenset({Role.PRODUCER}), Priority.HIGH)
    _, worker = await ring.create("bench-worker", frozenset({Role.WORKER}))
    return Keys(producer=producer, worker=worker)


class Server:
    """``queuelog serve`` as a child process; a context manager."""

    def __init__(self, config: Path) -> None:
        self.config = config
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = config.parent / "server.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.peak_rss_mb = 0.0

    def __enter__(self) -> Server:
        log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            [str(BIN), "serve", "--config", str(self.config), "--port", str(self.port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        log.close()
        self._wait_ready()
        return self

    def __exit__(self, *_: object) -> None:
        assert self.process is not None
        self.peak_rss_mb = max(self.peak_rss_mb, self.rss_peak())
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)

    def rss_peak(self) -> float:
        """The server's peak resident set so far (VmHWM), in MB."""
        assert self.process is not None
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return 0.0

    def _wait_ready(self, timeout: float = 30) -> None:
        assert self.process is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited early: {self.log_path.read_text()[-2000:]}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise RuntimeError("server did not become ready")
