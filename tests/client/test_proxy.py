"""The blocking client goes through the proxy the environment names, as httpx would."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from queuelog.client import AsyncClient, Client, RetryPolicy, ServerUnavailable

FAST = RetryPolicy(attempts=2, base_delay=0.01, max_delay=0.02)


class Proxy(BaseHTTPRequestHandler):
    """A forward proxy that answers every request itself, noting its target and headers."""

    seen: list[tuple[str, dict[str, str]]] = []

    def do_GET(self) -> None:
        self.seen.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
        body = json.dumps({"keys": []}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def proxy(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[int, list[Any]]]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Proxy)
    Proxy.seen = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "http_proxy"):
        monkeypatch.delenv(name, raising=False)
    try:
        yield server.server_address[1], Proxy.seen
    finally:
        server.shutdown()
        server.server_close()


def test_requests_go_through_the_environments_proxy_with_its_login(
    proxy: tuple[int, list[Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    port, seen = proxy
    monkeypatch.setenv("HTTP_PROXY", f"http://ops:s%40cret@127.0.0.1:{port}")
    with Client("http://queue.internal:8000", "k", retry_policy=FAST) as client:
        assert client.list_keys() == []
    ((target, headers),) = seen
    assert target == "http://queue.internal:8000/keys"
    assert headers["proxy-authorization"] == "Basic " + base64.b64encode(b"ops:s@cret").decode()
    assert headers["authorization"] == "Bearer k"


def test_a_host_in_no_proxy_is_reached_directly(
    proxy: tuple[int, list[Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    port, seen = proxy
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    client = Client("http://127.0.0.1:1", "k", retry_policy=FAST)
    with client, pytest.raises(ServerUnavailable):  # nothing listens there
        client.list_keys()
    assert seen == []


def test_hardening_115_a_no_proxy_entry_with_a_port_is_reached_directly_by_both_clients(
    proxy: tuple[int, list[Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``Client`` matched NO_PROXY against the host's name alone: an entry that names its
    port too ("127.0.0.1:1"), which Python's opener and httpx (``AsyncClient``) honour,
    sent ``Client``'s requests through the proxy."""
    port, seen = proxy
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("NO_PROXY", "example.org, 127.0.0.1:1")
    client = Client("http://127.0.0.1:1", "k", retry_policy=FAST)
    with client, pytest.raises(ServerUnavailable):  # nothing listens there
        client.list_keys()

    async def list_keys() -> None:
        async with AsyncClient("http://127.0.0.1:1", "k", retry_policy=FAST) as awaited:
            await awaited.list_keys()

    with pytest.raises(ServerUnavailable):
        asyncio.run(list_keys())
    assert seen == []
