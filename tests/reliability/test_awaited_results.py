"""Awaiting a job's result over real HTTP: woken by the finish (on SQLite, and across two
PostgreSQL nodes), and a client that hangs up frees its waiter. Latency is checked
loosely, against deadlines far away; every wait is bounded."""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from tests.postgres import fresh_schema
from tests.realserver import RealServer, closing

pytestmark = pytest.mark.slow

FAR = 20  # a wait's deadline; an answer within a few seconds was woken by the finish
_WAITS = re.compile(r"^queuelog_result_waits (\S+)$", re.MULTILINE)


def _waits(admin: httpx.Client) -> float:
    """The gauge of requests awaiting a result, as /metrics shows it."""
    found = _WAITS.search(admin.get("/metrics").text)
    assert found is not None, "no queuelog_result_waits gauge"
    return float(found[1])


def _until(check: Callable[[], bool], what: str, seconds: float = 15) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"not {what} within {seconds} s")


def _wait_later(
    pool: ThreadPoolExecutor, client: httpx.Client, job_id: int
) -> Future[tuple[float, httpx.Response]]:
    def run() -> tuple[float, httpx.Response]:
        response = client.get(f"/jobs/{job_id}", params={"wait_seconds": FAR})
        return time.monotonic(), response

    return pool.submit(run)


def _finish_while_awaited(
    waiter: httpx.Client, producer: httpx.Client, worker: httpx.Client, admin: httpx.Client
) -> float:
    """Enqueue and claim a job, await it on ``waiter``, complete it on ``worker``; the
    seconds from the completion's answer to the awaited answer."""
    job = producer.post("/jobs", json={"type": "noop"}).json()
    (held,) = worker.post("/jobs/claim", json={"types": ["noop"]}).json()["jobs"]
    with ThreadPoolExecutor(1) as pool:
        waiting = _wait_later(pool, waiter, job["id"])
        _until(lambda: _waits(admin) >= 1, "waiting")
        done = worker.post(
            f"/jobs/{job['id']}/complete",
            json={"lease_token": held["lease_token"], "result": {"n": 42}},
        )
        finished_at = time.monotonic()
        answered_at, response = waiting.result(timeout=FAR + 10)
    assert done.status_code == 200
    assert response.status_code == 200
    assert (response.json()["status"], response.json()["result"]) == ("completed", {"n": 42})
    return answered_at - finished_at


@pytest.fixture
def sqlite_server(tmp_path: Path) -> Iterator[RealServer]:
    with closing(RealServer(tmp_path)) as real:
        for role in ("admin", "producer", "worker"):
            real.create_key(role, role)
        real.start()
        yield real


def test_the_finish_answers_the_waiting_request(sqlite_server: RealServer) -> None:
    keys = sqlite_server.keys
    with (
        sqlite_server.client(keys["producer"], timeout=FAR + 10) as producer,
        sqlite_server.client(keys["worker"]) as worker,
        sqlite_server.client(keys["admin"]) as admin,
    ):
        assert _finish_while_awaited(producer, producer, worker, admin) < 3
        _until(lambda: _waits(admin) == 0, "the waiter freed")


def test_a_client_that_hangs_up_frees_its_waiter(sqlite_server: RealServer) -> None:
    keys = sqlite_server.keys
    with (
        sqlite_server.client(keys["producer"]) as producer,
        sqlite_server.client(keys["admin"]) as admin,
    ):
        job = producer.post("/jobs", json={"type": "noop"}).json()
        sockets = [_abandoned_wait(sqlite_server, keys["producer"], job["id"]) for _ in range(5)]
        _until(lambda: _waits(admin) == 5, "five waiting")
        for sock in sockets:
            sock.close()
        # Freed long before their deadline: the hang-up ended each wait.
        _until(lambda: _waits(admin) == 0, "every waiter freed", seconds=FAR / 2)


def _abandoned_wait(real: RealServer, key: str, job_id: int) -> socket.socket:
    """Send an awaiting read on a raw socket; the caller closes it without reading."""
    request = (
        f"GET /jobs/{job_id}?wait_seconds={FAR} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Bearer {key}\r\n\r\n"
    ).encode()
    sock = socket.create_connection(("127.0.0.1", real.port), timeout=10)
    sock.sendall(request)
    return sock


def test_a_finish_on_another_postgres_node_answers_the_waiting_request(tmp_path: Path) -> None:
    with fresh_schema() as url, ExitStack() as stack:
        env = {"QUEUELOG_DATABASE_URL": url}
        nodes = [
            stack.enter_context(closing(RealServer(tmp_path / f"node{n}", env=env)))
            for n in range(2)
        ]
        for role in ("admin", "producer", "worker"):
            nodes[0].create_key(role, role)
        for node in nodes:
            node.start()
        keys = nodes[0].keys
        with (
            nodes[0].client(keys["producer"], timeout=FAR + 10) as waiter,
            nodes[1].client(keys["producer"]) as producer,
            nodes[1].client(keys["worker"]) as worker,
            nodes[0].client(keys["admin"]) as admin,
        ):
            # Twice: the second also shows the first waiter was freed on its node.
            for _ in range(2):
                assert _finish_while_awaited(waiter, producer, worker, admin) < 3
                _until(lambda: _waits(admin) == 0, "the waiter freed")
