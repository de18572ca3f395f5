"""How ``Client`` sends a request: libcurl (through pycurl), a handle per request in
flight, each keeping its connection open for the next request.

libcurl costs the client far less per request than Python's own HTTP stack, which is
what a producer enqueuing one job per call spends most of its time in. Where the
request goes, how long it may take and which certificates are trusted are the same as
Python's: the proxy the environment names, the default certificate store (or
``SSL_CERT_FILE``/``SSL_CERT_DIR``, else certifi's).
"""

from __future__ import annotations

import os
import ssl
import threading
import urllib.request
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

import pycurl

if not hasattr(pycurl, "PREREQFUNCTION"):  # pycurl built on a libcurl older than 7.80
    raise ImportError("queuelog's Client needs pycurl 7.45.7 or later, on libcurl 7.80 or later")

# Handles (and so connections) kept open for reuse; the Worker's threads and a web
# app's thread pool share one client. More may be open at once: those beyond are
# closed after their request.
KEPT_CONNECTIONS = 32


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One request as both clients send it, each with its own HTTP library."""

    method: str
    url: str
    headers: dict[str, str]
    body: bytes | None
    connect_timeout: float
    read_timeout: float
    resend: bool = True  # whether it may be sent twice (see ``Call.resend``)


@dataclass(frozen=True, slots=True)
class Answer:
    """The server's answer to one request, fully read."""

    status: int
    body: bytes
    retry_after: str | None = None


class NoAnswer(Exception):
    """The connection failed before the whole answer came (one of the two below)."""


class NotSent(NoAnswer):
    """The request never reached the server: refused, unresolved, no connection in time."""


class Broken(NoAnswer):
    """The connection failed once the request was on its way: it may have been acted on."""


class Transport(Protocol):
    """What ``Client`` sends through (``Client(transport=...)``)."""

    def send(self, request: Outgoing) -> Answer:
        """The answer to ``request``; raises ``NotSent`` or ``Broken``."""
        ...

    def close(self) -> None:
        """Close the connections kept open."""
        ...


class CurlTransport:
    """Requests to one server through libcurl; safe to share between threads."""

    def __init__(self, url: str) -> None:
        self._proxy = proxy_for(url)
        self._trust = trusted_certificates()
        self._idle: list[pycurl.Curl] = []
        self._lock = threading.Lock()
        self._closed = False

    def send(self, request: Outgoing) -> Answer:
        with self._lock:
            if self._closed:  # a client that shares it (Client.with_options), or a race
                raise RuntimeError("this Client is closed")
            handle = self._idle.pop() if self._idle else pycurl.Curl()
        try:
            return self._perform(handle, request)
        finally:
            with self._lock:
                # One closed meanwhile keeps no connection open.
                if not self._closed and len(self._idle) < KEPT_CONNECTIONS:
                    self._idle.append(handle)
                else:
                    handle.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for handle in idle:
            handle.close()

    def _perform(self, handle: pycurl.Curl, request: Outgoing) -> Answer:
        chunks: list[bytes] = []
        head: list[bytes] = []
        attempts = Attempts(request.resend)
        self._prepare(handle, request)
        handle.setopt(pycurl.WRITEFUNCTION, chunks.append)
        handle.setopt(pycurl.HEADERFUNCTION, head.append)
        handle.setopt(pycurl.PREREQFUNCTION, attempts.start)
        try:
            handle.perform()
        except pycurl.error as error:
            # Until libcurl is about to write the request, nothing has reached the server.
            if not attempts.started:
                raise NotSent(handle.errstr() or str(error)) from None
            if attempts.stopped:
                raise Broken("the connection closed before an answer; not sent again") from None
            raise Broken(handle.errstr() or str(error)) from None
        status: int = handle.getinfo(pycurl.RESPONSE_CODE)
        retry_after = _header(head, b"retry-after") if status >= 400 else None
        return Answer(status, b"".join(chunks), retry_after)

    def _prepare(self, handle: pycurl.Curl, request: Outgoing) -> None:
        handle.reset()  # what the previous request set; the connection stays open
        handle.setopt(pycurl.URL, request.url)
        handle.setopt(pycurl.PATH_AS_IS, 1)  # a name's "%2E" is a name, not a dot to resolve
        handle.setopt(pycurl.NOSIGNAL, 1)  # timeouts without signals: threads share it
        handle.setopt(pycurl.HTTP_VERSION, pycurl.CURL_HTTP_VERSION_1_1)
        # Python's reading of the environment's proxies, not libcurl's ("" is none).
        handle.setopt(pycurl.PROXY, self._proxy)
        handle.setopt(pycurl.NOPROXY, "")
        cafile, capath = self._trust
        for file_option, path_option in _TRUST_OPTIONS:
            if cafile:
                handle.setopt(file_option, cafile)
            if capath:
                handle.setopt(path_option, capath)
        # The request's deadline: the time to connect, then the time to be answered
        # (libcurl's low-speed limit would not do: it averages over seconds).
        connect = max(1, round(request.connect_timeout * 1000))
        handle.setopt(pycurl.CONNECTTIMEOUT_MS, connect)
        handle.setopt(pycurl.TIMEOUT_MS, connect + max(1, round(request.read_timeout * 1000)))
        _describe(handle, request)


def _describe(handle: pycurl.Curl, request: Outgoing) -> None:
    """The request's method, headers and body on ``handle``."""
    # No "Expect: 100-continue" before a large body; no form type on an empty one.
    headers = [f"{name}: {value}" for name, value in request.headers.items()]
    headers += ["Expect:", "Accept: application/json"]
    if request.body is None and request.method != "GET":
        headers.append("Content-Type:")
    handle.setopt(pycurl.HTTPHEADER, headers)
    if request.body is not None or request.method == "POST":
        handle.setopt(pycurl.POSTFIELDS, request.body or b"")
    if request.method not in ("GET", "POST"):
        handle.setopt(pycurl.CUSTOMREQUEST, request.method)


# The server's certificate, and an HTTPS proxy's, are checked against the same trust.
_TRUST_OPTIONS = ((pycurl.CAINFO, pycurl.CAPATH), (pycurl.PROXY_CAINFO, pycurl.PROXY_CAPATH))


class Attempts:
    """How often libcurl started to write one request. libcurl writes a request again,
    on a new connection, when a reused one closes before any answer: a request that
    must not be sent twice is stopped there instead, and fails as ``Broken``."""

    def __init__(self, resend: bool) -> None:
        self.resend = resend
        self.started = 0
        self.stopped = False

    def start(self, *_address: object) -> int:
        self.started += 1
        if self.started > 1 and not self.resend:
            self.stopped = True
            return pycurl.PREREQFUNC_ABORT
        return pycurl.PREREQFUNC_OK


def _header(head: list[bytes], name: bytes) -> str | None:
    """The last value of header ``name`` (lower case) among the answer's header lines."""
    found = None
    for line in head:
        key, colon, value = line.partition(b":")
        if colon and key.strip().lower() == name:
            found = value.strip().decode("latin-1")
    return found


def proxy_for(url: str) -> str:
    """The proxy URL that the environment (``HTTPS_PROXY``, ``HTTP_PROXY``,
    ``ALL_PROXY``, ``NO_PROXY``) names for ``url``, as Python reads it; "" for none."""
    parts = urlsplit(url)
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    # Python's opener checks the host with its port, which a NO_PROXY entry may name
    # ("queue:8000", as httpx reads it for AsyncClient); the name alone matches "::1".
    address = parts.netloc.rpartition("@")[2]
    if proxy and not any(map(urllib.request.proxy_bypass, (parts.hostname or "", address))):
        return proxy
    return ""


def trusted_certificates() -> tuple[str, str]:
    """The certificate file and directory Python's ``ssl`` trusts by default (which
    ``SSL_CERT_FILE`` and ``SSL_CERT_DIR`` change); certifi's file where there is none."""
    paths = ssl.get_default_verify_paths()
    cafile = paths.cafile if paths.cafile and os.path.isfile(paths.cafile) else ""
    capath = paths.capath if paths.capath and os.path.isdir(paths.capath) else ""
    if not cafile and not capath:
        import certifi

        cafile = certifi.where()
    return cafile, capath
