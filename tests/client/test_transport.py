"""The blocking client's transport (libcurl) against real sockets: what it reports when a
connection fails, which requests it may send twice, and TLS with the default trust."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme

from queuelog.client import AsyncClient, Client, RetryPolicy, ServerUnavailable, calls
from queuelog.client.transport import Broken, CurlTransport, NotSent, Outgoing

FAST = RetryPolicy(attempts=3, base_delay=0.01, max_delay=0.02)
ONCE = RetryPolicy(attempts=1)
OK = b'{"keys": []}'


class RawServer:
    """An HTTP/1.1 server on 127.0.0.1 whose ``script`` says what to do with the n-th
    request (counting from 1): "answer" (200, kept alive), "drop" (close unanswered),
    "retry-later" (429 with Retry-After), "slow" (200 after 1.5 s), "trickle" (200, its
    body a byte every 0.2 s: 10 s in all) or "hang" (never answer)."""

    def __init__(self, script: Callable[[int], str], tls: ssl.SSLContext | None = None):
        self.script = script
        self.tls = tls
        self.requests: list[bytes] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def close(self) -> None:
        self._listener.close()

    def _accept(self) -> None:
        for _ in range(50):  # bounded: a test opens a few connections
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        conn.settimeout(5)
        with contextlib.suppress(OSError, ssl.SSLError), contextlib.closing(conn):
            if self.tls is not None:
                conn = self.tls.wrap_socket(conn, server_side=True)
            reader = conn.makefile("rb")
            for _ in range(20):
                request = _read_request(reader)
                if request is None:
                    return
                with self._lock:
                    self.requests.append(request)
                    action = self.script(len(self.requests))
                if action == "drop":
                    return
                if action == "hang":
                    conn.recv(1)  # until the client gives up and closes
                    return
                if action == "slow":
                    time.sleep(1.5)  # a long poll's wait
                status = b"429 Too Many Requests" if action == "retry-later" else b"200 OK"
                extra = b"Retry-After: 7\r\n" if action == "retry-later" else b""
                body = OK.ljust(50) if action == "trickle" else OK
                head = b"HTTP/1.1 %s\r\nContent-Length: %d\r\n%s\r\n" % (status, len(body), extra)
                conn.sendall(head if action == "trickle" else head + body)
                for byte in body if action == "trickle" else b"":
                    time.sleep(0.2)
                    conn.sendall(bytes([byte]))


def _read_request(reader: object) -> bytes | None:
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        line = reader.readline()  # type: ignore[attr-defined]
        if not line:
            return None
        head += line
    length = 0
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    body: bytes = reader.read(length) if length else b""  # type: ignore[attr-defined]
    return head.split(b"\r\n", 1)[0] + b" " + body


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch: pytest.MonkeyPatch) -> None:
    """These requests go straight to 127.0.0.1 whatever the machine's environment says."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


@pytest.fixture
def serve() -> Iterator[Callable[..., RawServer]]:
    servers: list[RawServer] = []

    def start(script: Callable[[int], str], tls: ssl.SSLContext | None = None) -> RawServer:
        servers.append(RawServer(script, tls))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def request(
    port: int, resend: bool, scheme: str = "http", timeout: float = 5, method: str = "POST"
) -> Outgoing:
    body = json.dumps({"limit": 1}).encode() if method == "POST" else None
    headers = {"Content-Type": "application/json"}
    url = f"{scheme}://127.0.0.1:{port}/jobs/claim"
    return Outgoing(method, url, headers, body, timeout, timeout, resend=resend)


def test_a_refused_connection_is_reported_as_not_sent() -> None:
    transport = CurlTransport("http://127.0.0.1:1")
    with pytest.raises(NotSent):
        transport.send(request(1, resend=False))


def test_a_connection_closed_after_the_request_is_reported_as_broken(
    serve: Callable[..., RawServer],
) -> None:
    server = serve(lambda n: "drop")
    transport = CurlTransport(f"http://127.0.0.1:{server.port}")
    with pytest.raises(Broken):
        transport.send(request(server.port, resend=False))
    assert len(server.requests) == 1


def test_a_request_that_must_not_be_sent_twice_is_not_sent_again_on_a_new_connection(
    serve: Callable[..., RawServer],
) -> None:
    """The second request goes out on the kept connection, which the server closes
    unanswered: libcurl would write it again on a new connection; a claim must not."""
    server = serve(lambda n: "drop" if n == 2 else "answer")
    transport = CurlTransport(f"http://127.0.0.1:{server.port}")
    assert transport.send(request(server.port, resend=False)).status == 200
    with pytest.raises(Broken):
        transport.send(request(server.port, resend=False))
    assert len(server.requests) == 2
    assert transport.send(request(server.port, resend=False)).body == OK  # a new connection


def test_a_request_that_may_be_sent_twice_is_sent_again_on_a_new_connection(
    serve: Callable[..., RawServer],
) -> None:
    server = serve(lambda n: "drop" if n == 2 else "answer")
    transport = CurlTransport(f"http://127.0.0.1:{server.port}")
    transport.send(request(server.port, resend=True))
    assert transport.send(request(server.port, resend=True)).body == OK
    assert server.requests[1] == server.requests[2]  # the same request, body and all


def test_a_claim_whose_answer_is_lost_fails_and_is_not_sent_again(
    serve: Callable[..., RawServer],
) -> None:
    server = serve(lambda n: "drop")
    client = Client(f"http://127.0.0.1:{server.port}", "k", retry_policy=FAST)
    with client, pytest.raises(ServerUnavailable, match="Broken"):
        client.send(calls.claim())
    assert len(server.requests) == 1


def test_an_answer_that_never_comes_times_out_as_broken(serve: Callable[..., RawServer]) -> None:
    server = serve(lambda n: "hang")
    transport = CurlTransport(f"http://127.0.0.1:{server.port}")
    with pytest.raises(Broken, match="timed out"):
        transport.send(request(server.port, resend=False, timeout=0.2))


def test_an_answer_may_take_the_read_timeout_however_short_the_connect_timeout(
    serve: Callable[..., RawServer],
) -> None:
    server = serve(lambda n: "slow")
    slow = request(server.port, resend=False)
    waiting = Outgoing(slow.method, slow.url, slow.headers, slow.body, 0.1, 3, resend=False)
    assert CurlTransport(slow.url).send(waiting).body == OK


def through(
    kind: type[Client] | type[AsyncClient],
    port: int,
    call: Callable[[Any], Any],
    policy: RetryPolicy = ONCE,
) -> Any:
    """``call`` on a client of ``kind`` with a half-second timeout (awaited on an
    ``AsyncClient``)."""
    url = f"http://127.0.0.1:{port}"
    if kind is Client:
        with Client(url, "ql_x", timeout=0.5, retry_policy=policy) as client:
            return call(client)

    async def main() -> Any:
        async with AsyncClient(url, "ql_x", timeout=0.5, retry_policy=policy) as client:
            return await call(client)

    return asyncio.run(asyncio.wait_for(main(), timeout=60))


@pytest.mark.parametrize("kind", [Client, AsyncClient])
def test_an_answer_that_trickles_in_is_cut_at_the_request_s_deadline(
    serve: Callable[..., RawServer], kind: type[Client] | type[AsyncClient]
) -> None:
    """``timeout`` is to connect, then to be answered: the whole answer, not each read of
    it (httpx's read timeout, which a byte every so often resets)."""
    server = serve(lambda n: "trickle")
    with pytest.raises(ServerUnavailable, match="cannot reach"):
        through(kind, server.port, lambda client: client.list_keys())


@pytest.mark.parametrize("kind", [Client, AsyncClient])
def test_a_wait_s_read_is_not_sent_again_once_the_wait_s_time_is_up(
    serve: Callable[..., RawServer], kind: type[Client] | type[AsyncClient]
) -> None:
    """A server that takes a wait's read and never answers: the read times out after
    the wait's time, and sent again it would hold the caller a read timeout more each
    time (however many tries the retry policy gives a read)."""
    server = serve(lambda n: "hang")
    with pytest.raises(ServerUnavailable):
        through(kind, server.port, lambda client: client.wait(1, timeout=0.5), FAST)
    assert len(server.requests) == 1, server.requests


def test_each_request_on_a_kept_connection_carries_only_its_own_method_and_body(
    serve: Callable[..., RawServer],
) -> None:
    server = serve(lambda n: "answer")
    transport = CurlTransport(f"http://127.0.0.1:{server.port}")
    for method in ("POST", "DELETE", "GET"):
        transport.send(request(server.port, resend=True, method=method))
    empty = request(server.port, resend=False)
    transport.send(Outgoing("POST", empty.url, {}, None, 5, 5, resend=False))
    assert server.requests == [
        b'POST /jobs/claim HTTP/1.1 {"limit": 1}',
        b"DELETE /jobs/claim HTTP/1.1 ",
        b"GET /jobs/claim HTTP/1.1 ",
        b"POST /jobs/claim HTTP/1.1 ",
    ]


def test_threads_share_one_transport(serve: Callable[..., RawServer]) -> None:
    server = serve(lambda n: "answer")
    transport = CurlTransport(f"http://127.0.0.1:{server.port}")
    answers: list[bytes] = []

    def send_five() -> None:
        for _ in range(5):
            answers.append(transport.send(request(server.port, resend=True)).body)

    threads = [threading.Thread(target=send_five) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert answers == [OK] * 30
    assert len(server.requests) == 30


def test_the_proxy_is_the_one_python_names_even_where_libcurl_would_bypass_it(
    serve: Callable[..., RawServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    """libcurl reads NO_PROXY's address ranges; Python does not, and Python's reading
    is the one the client keeps (as it did before libcurl)."""
    proxy = serve(lambda n: "answer")
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.port}")
    monkeypatch.setenv("NO_PROXY", "127.0.0.0/8")
    url = "http://127.0.0.1:1"
    assert CurlTransport(url).send(request(1, resend=True, method="GET")).body == OK
    assert proxy.requests == [b"GET http://127.0.0.1:1/jobs/claim HTTP/1.1 "]


def test_the_answer_s_retry_after_reaches_the_caller(serve: Callable[..., RawServer]) -> None:
    server = serve(lambda n: "retry-later")
    answer = CurlTransport("http://127.0.0.1").send(request(server.port, resend=True))
    assert (answer.status, answer.retry_after, answer.body) == (429, "7", OK)


@pytest.fixture
def authority(tmp_path: Path) -> tuple[trustme.CA, Path]:
    ca = trustme.CA()
    bundle = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(bundle))
    return ca, bundle


def test_tls_trusts_the_certificates_that_python_trusts(
    serve: Callable[..., RawServer],
    authority: tuple[trustme.CA, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ca, bundle = authority
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    server = serve(lambda n: "answer", tls=context)
    url = f"https://127.0.0.1:{server.port}"
    with pytest.raises(NotSent):  # an unknown authority: refused before any request
        CurlTransport(url).send(request(server.port, resend=False, scheme="https"))
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    with Client(url, "k", retry_policy=FAST) as client:
        assert client.list_keys() == []
    assert server.requests[-1].startswith(b"GET /keys ")


def test_hardening_114_async_client_trusts_the_certificates_that_client_trusts(
    serve: Callable[..., RawServer],
    authority: tuple[trustme.CA, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """httpx trusted certifi's bundle alone (not the system's store), or only the first
    of ``SSL_CERT_FILE`` and ``SSL_CERT_DIR``: a server ``Client`` trusts through the
    directory was an unknown authority to ``AsyncClient``."""
    _, bundle = authority
    local = trustme.CA()  # the server's authority, in the certificate directory
    directory = tmp_path / "certs"
    directory.mkdir()
    pem = directory / "ca.pem"
    local.cert_pem.write_to_path(str(pem))
    hashed = subprocess.run(
        ["openssl", "x509", "-subject_hash", "-noout", "-in", str(pem)],
        capture_output=True, text=True, check=True, timeout=30,
    ).stdout.strip()  # fmt: skip
    pem.rename(directory / f"{hashed}.0")  # named as OpenSSL looks a certificate up
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    local.issue_cert("127.0.0.1").configure_cert(context)
    server = serve(lambda n: "answer", tls=context)
    url = f"https://127.0.0.1:{server.port}"
    monkeypatch.setenv("SSL_CERT_FILE", str(bundle))
    monkeypatch.setenv("SSL_CERT_DIR", str(directory))
    with Client(url, "k", retry_policy=FAST) as client:
        assert client.list_keys() == []

    async def list_keys() -> list[Any]:
        async with AsyncClient(url, "k", retry_policy=FAST) as awaited:
            return await awaited.list_keys()

    assert asyncio.run(list_keys()) == []
