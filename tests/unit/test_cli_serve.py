"""``queuelog serve``: its access log, its connection limit and its collector tuning."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from queuelog.api import server
from queuelog.config import load_settings
from tests.realserver import RealServer, closing


def _logged_requests(tmp_path: Path, *serve_args: str) -> str:
    with closing(RealServer(tmp_path, serve_args=serve_args)) as real:
        real.start()
        assert httpx.get(f"{real.url}/healthz?probe=1", timeout=10).status_code == 200
        real.terminate()
        return real.log()


@pytest.mark.slow
def test_serve_writes_no_access_log_by_default(tmp_path: Path) -> None:
    log = _logged_requests(tmp_path)
    assert "Uvicorn running" in log or "Application startup complete" in log, log
    assert "/healthz?probe=1" not in log


@pytest.mark.slow
def test_serve_access_log_flag_turns_it_on(tmp_path: Path) -> None:
    assert '"GET /healthz?probe=1 HTTP/1.1" 200' in _logged_requests(tmp_path, "--access-log")


def test_limit_concurrency_comes_from_the_file_then_the_environment(tmp_path: Path) -> None:
    # A real server's 503 beyond the limit: test_hardening_03 in tests/test_hardening_http.py.
    path = tmp_path / "q.toml"
    path.write_text("[server]\nlimit_concurrency = 50\n")
    assert load_settings(environ={}).server.limit_concurrency == 1000
    assert load_settings(path, environ={}).server.limit_concurrency == 50
    env = {"QUEUELOG_LIMIT_CONCURRENCY": "7"}
    assert load_settings(path, environ=env).server.limit_concurrency == 7


@pytest.fixture
def collector() -> Iterator[None]:
    threshold = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*threshold)


@pytest.mark.usefixtures("collector")
def test_the_server_freezes_what_startup_built_and_collects_less_often() -> None:
    gc.unfreeze()
    server.tune_gc()
    assert gc.get_threshold() == server.GC_THRESHOLDS
    assert gc.get_freeze_count() > 10_000  # the modules loaded so far
