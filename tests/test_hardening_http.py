"""Findings of the live attack review (issue 19) about HTTP itself, one test (or more)
per finding: 3, slow and huge request heads; 10, slash redirects.

The request-head tests run a real ``queuelog serve`` on 127.0.0.1: the limits they
check live in the HTTP server, not in the app.
"""

from __future__ import annotations

import contextlib
import json
import socket
import statistics
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from queuelog.api.server import HEAD_TIMEOUT_SECONDS, KEEP_ALIVE_SECONDS, MAX_HEAD_BYTES
from tests.conftest import Api
from tests.realserver import RealServer, closing


@pytest.mark.parametrize("method", ["POST", "GET"])
def test_hardening_10_a_trailing_slash_is_404_not_a_redirect_to_the_host_header(
    producer: Api, method: str
) -> None:
    response = producer.request(
        method,
        "/jobs/",
        json={"type": "noop"},
        headers={"Host": "evil.example"},
        follow_redirects=False,
    )
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["type"] == "not-found"
    assert "location" not in response.headers


# -- finding 3: slow and huge request heads, against a real server ------------------


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealServer]:
    with closing(RealServer(tmp_path_factory.mktemp("heads"))) as real:
        real.start()
        yield real


def _connect(server: RealServer) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    sock.setblocking(False)
    return sock


def _answered_once(server: RealServer) -> socket.socket:
    """A connection whose first request has been answered, kept open."""
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n")
    answer = b""
    for _ in range(100):
        answer += sock.recv(4096)
        if answer.endswith(b'{"status":"ok"}'):
            break
    assert answer.startswith(b"HTTP/1.1 200"), answer
    sock.setblocking(False)
    return sock


def _closed_by_server(sock: socket.socket) -> bool:
    """Whether the server has closed ``sock`` (it has sent nothing else: no head is done)."""
    try:
        return sock.recv(4096, socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:  # reset
        return True


def _healthz_seconds(client: httpx.Client, count: int) -> list[float]:
    seconds = []
    for _ in range(count):
        started = time.perf_counter()
        assert client.get("/healthz").status_code == 200
        seconds.append(time.perf_counter() - started)
    return seconds


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.mark.slow
def test_hardening_03_connections_trickling_their_head_are_closed_and_others_are_served_meanwhile(
    server: RealServer,
) -> None:
    with httpx.Client(base_url=server.url, timeout=10) as client:
        baseline = statistics.median(_healthz_seconds(client, 40))
        # On these the slow head is the second request's: the first one is answered.
        again = [_answered_once(server) for _ in range(20)]
        trickling = [_connect(server) for _ in range(280)] + again
        silent = [_connect(server) for _ in range(20)]  # connect, then send nothing
        opened = time.monotonic()
        for sock in trickling:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: attacker\r\n")
        during: list[float] = []
        deadline = opened + HEAD_TIMEOUT_SECONDS + 10
        while time.monotonic() < deadline:
            for sock in trickling:
                with contextlib.suppress(OSError):  # closed by the server meanwhile
                    sock.send(b"X-Slow: a\r\n")
            during += _healthz_seconds(client, 3)
            if all(map(_closed_by_server, trickling + silent)):
                break
            time.sleep(0.5)
        closed_after = time.monotonic() - opened
    for sock in trickling + silent:
        sock.close()
    assert closed_after < HEAD_TIMEOUT_SECONDS + 10, "some slow connections stayed open"
    assert closed_after >= HEAD_TIMEOUT_SECONDS - 1  # closed by the head timeout, not sooner
    # Another client's health check is barely slower while the attack runs.
    assert statistics.median(during) < 5 * max(baseline, 0.001)


_JUST_OVER = b"GET /healthz HTTP/1.1\r\nHost: a\r\nX-Big: " + b"a" * MAX_HEAD_BYTES


@pytest.mark.slow
@pytest.mark.parametrize(
    "pieces",
    [
        [b"GET /healthz HTTP/1.1\r\nHost: a\r\nX-Big: " + b"a" * (8 << 20) + b"\r\n\r\n"],
        [b"GET /healthz HTTP/1.1\r\nHost: a\r\n" + b"X-Many: b\r\n" * 100_000 + b"\r\n"],
        [_JUST_OVER, b"\r\n\r\n"],
    ],
    ids=["an 8 MiB header line", "100,000 headers", "unfinished just over the limit"],
)
def test_hardening_03_a_head_over_64_kib_is_refused(
    server: RealServer, pieces: list[bytes]
) -> None:
    answer = b""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        with contextlib.suppress(OSError):  # the server may close before all is sent
            for piece in pieces:
                sock.sendall(piece)
                time.sleep(0.2)  # each piece reaches the server on its own
        with contextlib.suppress(OSError):
            answer = sock.recv(4096)
    assert not answer.startswith(b"HTTP/1.1 200")
    assert answer == b"" or answer.split(b"\r\n")[0] in (
        b"HTTP/1.1 400 Bad Request",
        b"HTTP/1.1 431 Request Header Fields Too Large",
    )


def test_hardening_03_a_head_within_the_limit_is_served(server: RealServer) -> None:
    filler = b"X-Fill: " + b"a" * 200 + b"\r\n"
    head = b"GET /healthz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n"
    head += filler * ((MAX_HEAD_BYTES - 1024) // len(filler)) + b"\r\n"
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(head)
        assert sock.recv(4096).startswith(b"HTTP/1.1 200")


@pytest.mark.slow
def test_hardening_03_an_unfinished_huge_head_does_not_grow_the_server_s_memory(
    server: RealServer,
) -> None:
    assert server.process is not None
    with httpx.Client(base_url=server.url) as client:
        _healthz_seconds(client, 20)  # warm: the first requests allocate for good
    before = _rss_bytes(server.process.pid)
    chunk = b"a" * 65_536
    sent = 0
    with (
        socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock,
        contextlib.suppress(OSError),  # the server closes the connection
    ):
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: a\r\nX-Big: ")
        while sent < 64 << 20:
            sock.sendall(chunk)
            sent += len(chunk)
    grown = _rss_bytes(server.process.pid) - before
    assert sent < 64 << 20, "the server read a 64 MiB head to its end"
    assert grown < 8 << 20


@pytest.mark.slow
def test_hardening_03_an_idle_connection_is_closed_after_the_keep_alive_timeout(
    server: RealServer,
) -> None:
    sock = _connect(server)
    with sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n")
        answered = time.monotonic()
        deadline = answered + KEEP_ALIVE_SECONDS + 10
        answer = b""
        while time.monotonic() < deadline and not answer.endswith(b'{"status":"ok"}'):
            with contextlib.suppress(BlockingIOError):
                answer += sock.recv(4096)
            time.sleep(0.01)
        assert answer.startswith(b"HTTP/1.1 200")
        while time.monotonic() < deadline and not _closed_by_server(sock):
            time.sleep(0.1)
        idle = time.monotonic() - answered
    assert KEEP_ALIVE_SECONDS - 1 <= idle < KEEP_ALIVE_SECONDS + 10


@pytest.mark.slow
def test_hardening_03_beyond_limit_concurrency_a_request_is_answered_503(tmp_path: Path) -> None:
    limit = 8
    with closing(RealServer(tmp_path, config={"server": {"limit_concurrency": limit}})) as real:
        real.start()
        held = [_connect(real) for _ in range(limit - 1)]
        time.sleep(0.5)  # the server has accepted them
        last = httpx.get(f"{real.url}/healthz", timeout=10)  # the limit's own connection
        held.append(_connect(real))
        time.sleep(0.5)
        refused = httpx.get(f"{real.url}/healthz", timeout=10)
        for sock in held:
            sock.close()
        deadline = time.monotonic() + 10
        served = httpx.get(f"{real.url}/healthz", timeout=10)
        while served.status_code == 503 and time.monotonic() < deadline:
            time.sleep(0.1)
            served = httpx.get(f"{real.url}/healthz", timeout=10)
    assert last.status_code == 200
    assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
    assert refused.headers["content-type"] == "application/problem+json"
    assert refused.json()["type"] == "overloaded" and refused.json()["status"] == 503
    assert served.status_code == 200


# -- request framing: what the HTTP parser refuses, answered as every refusal is ------


def _exchange(server: RealServer, raw: bytes, quiet: float = 1.0) -> tuple[bytes, float]:
    """Send ``raw`` on a connection of its own; everything read until the server closes
    it or goes quiet for ``quiet`` seconds, and how long after sending it closed (inf:
    it did not)."""
    answer = b""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(raw)
        sent = time.monotonic()
        sock.settimeout(quiet)
        with contextlib.suppress(TimeoutError, ConnectionResetError):
            while chunk := sock.recv(65536):
                answer += chunk
            return answer, time.monotonic() - sent
    return answer, float("inf")


def _problem_400(answer: bytes) -> None:
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"HTTP/1.1 400 Bad Request", answer
    assert b"content-type: application/problem+json" in lines
    assert b"connection: close" in lines
    problem = json.loads(body)
    assert problem["type"] == "bad-request"
    assert problem["status"] == 400


def test_a_malformed_request_is_a_400_problem_and_its_connection_closed(
    server: RealServer,
) -> None:
    _problem_400(_exchange(server, b"NOT HTTP AT ALL\r\n\r\n")[0])


def test_a_request_with_content_length_and_transfer_encoding_is_refused_and_stores_nothing(
    server: RealServer,
) -> None:
    """Two framings of one body are how requests are smuggled past a proxy that reads
    the other one: such a request is refused, never served."""
    key = server.create_key("framing", "producer")
    with server.client(key) as client:
        before = client.get("/jobs", params={"type": "noop"}).json()["jobs"]
    body = b'{"type": "noop", "payload": {"smuggled": true}}'
    raw = b"POST /jobs HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer " + key.encode()
    raw += b"\r\nContent-Type: application/json\r\nContent-Length: %d\r\n" % len(body)
    raw += b"Transfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (len(body), body)
    _problem_400(_exchange(server, raw)[0])
    with server.client(key) as client:
        assert client.get("/jobs", params={"type": "noop"}).json()["jobs"] == before


def test_pipelined_requests_on_one_connection_are_each_answered_in_order(
    server: RealServer,
) -> None:
    one = b"GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n"
    last = b"GET /readyz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
    answer, _ = _exchange(server, one * 3 + last)
    assert answer.count(b"HTTP/1.1 200 OK") == 4
    assert answer.count(b'{"status":"ok"}') == 3
    assert answer.endswith(b'{"status":"ready"}')


def test_head_of_the_health_checks_is_answered_without_a_body(server: RealServer) -> None:
    """Load balancers probe with HEAD: the status and headers of GET, no body; the
    connection then serves the next request."""
    heads = b"HEAD /healthz HTTP/1.1\r\nHost: a\r\n\r\nHEAD /readyz HTTP/1.1\r\nHost: a\r\n\r\n"
    last = b"GET /healthz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
    answer, _ = _exchange(server, heads + last)
    assert answer.count(b"HTTP/1.1 200 OK") == 3, answer
    assert answer.count(b"{") == 1 and answer.endswith(b'{"status":"ok"}'), answer
    first = answer.split(b"\r\n\r\n")[0].split(b"\r\n")
    assert b"content-type: application/json" in first and b"content-length: 15" in first
    refused, _ = _exchange(server, b"HEAD /jobs HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
    assert refused.startswith(b"HTTP/1.1 405 "), refused  # the API's reads stay GET only


def _claim_waiting(key: str, seconds: int) -> bytes:
    body = json.dumps({"types": ["noop"], "wait_seconds": seconds}).encode()
    head = b"POST /jobs/claim HTTP/1.1\r\nHost: a\r\nAuthorization: Bearer " + key.encode()
    head += b"\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
    return head + body


@pytest.mark.slow
def test_a_pipelined_request_served_longer_than_the_head_timeout_is_answered(
    server: RealServer,
) -> None:
    """The head timer waits for the next head only once nothing is being served: a long
    poll pipelined behind another request is answered, not cut at the head timeout."""
    key = server.create_key("pipelining-worker", "worker")
    seconds = HEAD_TIMEOUT_SECONDS + 2
    healthz = b"GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n"
    answer, _ = _exchange(server, healthz + _claim_waiting(key, seconds), seconds + 5)
    assert answer.count(b"HTTP/1.1 200 OK") == 2, answer
    assert answer.endswith(b'{"jobs":[]}')


@pytest.mark.slow
def test_what_is_left_of_a_body_after_an_early_answer_must_come_within_the_head_timeout(
    server: RealServer,
) -> None:
    """The app may answer before it reads a request's body. The rest of the body then
    still ends the keep-alive timer, but not the head timer armed by that answer."""
    answer = b""
    early = b"GET /healthz HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\n12345"
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(early)
        answered = time.monotonic()
        time.sleep(1)
        sock.sendall(b"67890")  # the body's end, then no next head
        sock.settimeout(HEAD_TIMEOUT_SECONDS + 10)
        with contextlib.suppress(TimeoutError):
            while chunk := sock.recv(65536):
                answer += chunk
        closed_after = time.monotonic() - answered
    assert answer.startswith(b"HTTP/1.1 200 OK")
    assert HEAD_TIMEOUT_SECONDS - 1 <= closed_after < HEAD_TIMEOUT_SECONDS + 10


@pytest.mark.slow
def test_an_endless_trailer_line_is_refused_without_growing_the_server_s_memory(
    server: RealServer,
) -> None:
    assert server.process is not None
    before = _rss_bytes(server.process.pid)
    chunk = b"a" * 65_536
    sent = 0
    answer = b""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        with contextlib.suppress(OSError):  # the server closes the connection
            sock.sendall(
                b"POST /jobs HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\nX-Trailer: "
            )
            while sent < 64 << 20:
                sock.sendall(chunk)
                sent += len(chunk)
        with contextlib.suppress(OSError):
            answer = sock.recv(4096)
    grown = _rss_bytes(server.process.pid) - before
    assert sent < 64 << 20, "the server read a 64 MiB trailer line to its end"
    assert grown < 8 << 20
    assert answer == b"" or answer.startswith(b"HTTP/1.1 400 Bad Request")


def test_a_head_of_too_many_headers_is_refused_as_too_large(server: RealServer) -> None:
    many = b"GET /healthz HTTP/1.1\r\nHost: a\r\n" + b"X-Many: b\r\n" * 10_000 + b"\r\n"
    answer, _ = _exchange(server, many)
    _problem_400(answer)
    assert json.loads(answer.partition(b"\r\n\r\n")[2])["detail"] == "Request head is too large"


def test_a_refused_request_is_answered_after_the_requests_before_it(server: RealServer) -> None:
    """Answers are read in order: a malformed request pipelined behind a long poll is
    refused after the long poll's answer, which is not lost."""
    key = server.create_key("ordering-worker", "worker")
    answer, _ = _exchange(server, _claim_waiting(key, 1) + b"NOT HTTP\r\n\r\n", 5)
    first, _, rest = answer.partition(b'{"jobs":[]}')
    assert first.startswith(b"HTTP/1.1 200 OK"), answer
    _problem_400(rest)
