"""A real server on PostgreSQL whose connection path is cut during a stream of enqueues.

The server reaches the database through a TCP forwarder (tests/tcpproxy.py); cutting
it closes every connection and refuses new ones, as a stopped database would.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from tests.postgres import fresh_schema
from tests.realserver import RealServer, closing
from tests.tcpproxy import TcpProxy

pytestmark = pytest.mark.slow

WAIT_SECONDS = 1.0
# A refusal comes within the connection wait and what a request costs besides; the
# pool's own default wait (30 s) or a hang would be far beyond it.
REFUSED_WITHIN = WAIT_SECONDS + 9.0


@contextmanager
def behind_a_proxy(tmp_path: Path) -> Iterator[tuple[RealServer, TcpProxy]]:
    """A server (not started) on a fresh schema, reaching it through a TCP forwarder the
    test may cut."""
    with fresh_schema() as url:
        proxy = TcpProxy.to_database(url)
        env = {"QUEUELOG_DATABASE_URL": proxy.database_url(url)}
        config = {"connection_wait_seconds": WAIT_SECONDS}
        try:
            with closing(RealServer(tmp_path, config=config, env=env)) as server:
                yield server, proxy
        finally:
            proxy.close()


@dataclass
class Answer:
    key: str
    status: int
    seconds: float
    response: httpx.Response | None


@dataclass
class Stream:
    """One producer enqueueing job after job, each under a fresh idempotency key."""

    url: str
    api_key: str
    answers: list[Answer] = field(default_factory=list)
    failures: list[BaseException] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        headers = {"Authorization": f"Bearer {self.api_key}"}
        deadline = time.monotonic() + 180
        with httpx.Client(base_url=self.url, headers=headers, timeout=60) as client:
            while not self.stop.is_set() and time.monotonic() < deadline:
                key = uuid.uuid4().hex
                started = time.monotonic()
                try:
                    response = client.post("/jobs", json={"type": "noop", "idempotency_key": key})
                except httpx.HTTPError as exc:  # a cut connection: what must not happen
                    self.failures.append(exc)
                    continue
                self.answers.append(
                    Answer(key, response.status_code, time.monotonic() - started, response)
                )

    def count(self, status: int) -> int:
        return sum(1 for a in list(self.answers) if a.status == status)


def _until(condition: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _assert_refusal(answer: Answer) -> None:
    assert answer.response is not None
    assert answer.response.headers["content-type"] == "application/problem+json"
    assert int(answer.response.headers["retry-after"]) >= 1
    body = answer.response.json()
    assert set(body) == {"type", "title", "status", "detail"}
    assert body["type"] == "unavailable" and body["status"] == 503
    assert answer.seconds < REFUSED_WITHIN, answer.seconds


def test_a_database_that_goes_away_is_503_within_the_wait_and_comes_back(
    tmp_path: Path,
) -> None:
    with behind_a_proxy(tmp_path) as (server, proxy):
        _cut_during_a_stream(server, proxy)


def _cut_during_a_stream(server: RealServer, proxy: TcpProxy) -> None:
    admin_key = server.create_key("root", "admin")
    stream = Stream("", server.create_key("shop", "producer"))
    server.start()
    stream.url = server.url
    producer = threading.Thread(target=stream.run, daemon=True)
    producer.start()
    try:
        assert _until(lambda: stream.count(201) >= 20, 60)
        proxy.cut()
        assert _until(lambda: stream.count(503) >= 5, 60), stream.answers[-5:]
        ready = httpx.get(f"{server.url}/readyz", timeout=30)
        assert ready.status_code == 503 and ready.json()["type"] == "unavailable"
        assert ready.headers["Retry-After"] == "1"  # as every 503 says when to ask again
        proxy.restore()
        stored_before = stream.count(201)
        # Back by itself: no restart, no request of the test's own but the stream's.
        assert _until(lambda: stream.count(201) >= stored_before + 20, 90)
    finally:
        stream.stop.set()
        producer.join(60)
    assert not stream.failures, stream.failures[:3]
    assert {a.status for a in stream.answers} <= {201, 503}
    for answer in stream.answers:
        if answer.status == 503:
            _assert_refusal(answer)
    assert httpx.get(f"{server.url}/readyz", timeout=30).json() == {"status": "ready"}
    _assert_nothing_lost(server, admin_key, stream)
    log = server.log()
    assert "storage fault (unreachable)" in log and "Traceback" not in log


def _assert_nothing_lost(server: RealServer, admin_key: str, stream: Stream) -> None:
    """Every acknowledged job is stored; a refused one was stored at most once (its
    outcome may be unknown), which resending it under its key shows."""
    with server.client(stream.api_key) as producer:
        for answer in stream.answers:
            if answer.status == 503:
                again = producer.post("/jobs", json={"type": "noop", "idempotency_key": answer.key})
                assert again.status_code in (200, 201), again.text
    with server.client(admin_key) as admin:
        stored: dict[str, int] = {}
        cursor: str | None = None
        for _ in range(1000):
            params: dict[str, str | int] = {"limit": 500, **({"cursor": cursor} if cursor else {})}
            page = admin.get("/jobs", params=params).json()
            stored.update((j["idempotency_key"], j["id"]) for j in page["jobs"])
            cursor = page["next_cursor"]
            if cursor is None:
                break
    acknowledged = {
        a.key: a.response.json()["id"] for a in stream.answers if a.status == 201 and a.response
    }
    assert all(stored.get(k) == job_id for k, job_id in acknowledged.items())
    assert set(stored) == {a.key for a in stream.answers}


def test_hardening_96_metrics_show_the_fault_while_the_database_is_away(
    tmp_path: Path,
) -> None:
    """/metrics read its admin key from the database: while PostgreSQL was away every
    scrape was 503, so `queuelog_storage_writable 0` was never seen where it mattered."""
    with behind_a_proxy(tmp_path) as (server, proxy):
        admin_key = server.create_key("root", "admin")
        unseen_key = server.create_key("other", "admin")
        server.start()
        with server.client(admin_key) as admin:
            assert admin.get("/metrics").status_code == 200  # the node finds the key
            proxy.cut()
            assert _until(lambda: _scraped_writable(admin) == 0, 60)
            time.sleep(1.5)  # past the key cache's second: the key is read again
            scraped = admin.get("/metrics")
        with server.client(unseen_key) as other:  # a key never found: not taken
            assert other.get("/metrics").status_code == 503
            assert other.get("/stats").status_code == 503
    assert scraped.status_code == 200
    assert 'queuelog_storage_refused_total{reason="unreachable"}' in scraped.text
    assert "queuelog_jobs{" not in scraped.text  # counts the database could not give


def _scraped_writable(admin: httpx.Client) -> float | None:
    """``queuelog_storage_writable`` as /metrics says it, or None if it did not answer."""
    answer = admin.get("/metrics")
    if answer.status_code != 200:
        return None
    found = re.search(r"^queuelog_storage_writable (\S+)$", answer.text, re.MULTILINE)
    return float(found.group(1)) if found else None
