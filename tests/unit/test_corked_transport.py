"""``queuelog serve`` sends an answer's head and body in one write (``api.server._Corked``)."""

from __future__ import annotations

import asyncio
import socket
import threading
from typing import Any

import uvicorn
from fastapi import FastAPI
from fastapi.responses import JSONResponse, StreamingResponse
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from queuelog.api.server import _Corked, _CorkedHttp


class Recorder:
    """A transport that keeps what is written to it."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 1) if name in ("peername", "sockname") else default

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def test_a_head_leaves_with_the_body_that_follows_it() -> None:
    async def scenario() -> Recorder:
        raw = Recorder()
        corked = _Corked(raw)  # type: ignore[arg-type]
        corked.write(b"HTTP/1.1 200 OK\r\n\r\n")
        assert raw.writes == []  # held for what follows
        corked.write(memoryview(b"body"))
        assert raw.writes == [b"HTTP/1.1 200 OK\r\n\r\nbody"]  # at once, in one write
        corked.write(b"alone")
        assert raw.writes[1:] == []
        await asyncio.sleep(0)  # nothing followed it this turn: it leaves on the next
        assert raw.writes[1:] == [b"alone"]
        await asyncio.sleep(0)
        assert len(raw.writes) == 2  # sent once
        assert corked.get_extra_info("peername") == ("127.0.0.1", 1)  # the rest passes through
        return raw

    asyncio.run(scenario())


def test_close_sends_what_is_held_first_and_nothing_goes_to_a_closing_transport() -> None:
    async def scenario() -> None:
        raw = Recorder()
        corked = _Corked(raw)  # type: ignore[arg-type]
        corked.write(b"last words")
        corked.close()
        assert raw.writes == [b"last words"] and raw.closed
        gone = Recorder()
        gone.closed = True
        late = _Corked(gone)  # type: ignore[arg-type]
        late.write(b"too late")
        await asyncio.sleep(0)
        assert gone.writes == []

    asyncio.run(scenario())


def test_uvicorn_with_the_corked_protocol_answers_whole() -> None:
    """A real uvicorn with the corked protocol: keep-alive answers and a streamed
    answer arrive complete and in order (one write each is checked above)."""
    app = FastAPI()

    @app.get("/small")
    def small() -> JSONResponse:
        return JSONResponse({"ok": True})

    @app.get("/stream")
    def stream() -> StreamingResponse:
        return StreamingResponse(iter([b"one,", b"two,", b"three"]))

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = uvicorn.Config(app, host="127.0.0.1", port=port, http=_CorkedHttp, log_level="error")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        for _ in range(200):
            if server.started:
                break
            threading.Event().wait(0.02)
        with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
            for _ in range(5):
                conn.sendall(b"GET /small HTTP/1.1\r\nHost: x\r\n\r\n")
                data = conn.recv(65536)
                assert data.startswith(b"HTTP/1.1 200 OK\r\n")
                assert data.endswith(b'\r\n\r\n{"ok":true}')
            conn.sendall(b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
            data = b""
            while not data.endswith(b"0\r\n\r\n"):
                chunk = conn.recv(65536)
                assert chunk, "connection closed before the streamed answer ended"
                data += chunk
            body = data.split(b"\r\n\r\n", 1)[1]
            assert b"one," in body and b"two," in body and b"three" in body
    finally:
        server.should_exit = True
        thread.join(timeout=10)


def test_the_serve_protocol_hands_each_answer_to_the_socket_in_one_write() -> None:
    """``_CorkedHttp`` (what ``serve`` runs) on a recording transport: one write per
    answer, where uvicorn's own protocol makes two."""
    app = FastAPI()

    @app.get("/small")
    def small() -> JSONResponse:
        return JSONResponse({"ok": True})

    async def answers(protocol_class: type[HttpToolsProtocol]) -> list[bytes]:
        config = uvicorn.Config(app, http=protocol_class, log_level="error")
        config.load()
        protocol = protocol_class(config=config, server_state=ServerState(), app_state={})
        raw = Recorder()
        protocol.connection_made(raw)  # type: ignore[arg-type]
        for _ in range(2):
            before = len(raw.writes)
            protocol.data_received(b"GET /small HTTP/1.1\r\nHost: x\r\n\r\n")
            for _ in range(200):
                if raw.writes[before:] and raw.writes[-1].endswith(b'{"ok":true}'):
                    break
                await asyncio.sleep(0.005)
        protocol.connection_lost(None)
        return raw.writes

    corked = asyncio.run(answers(_CorkedHttp))
    assert len(corked) == 2
    assert all(w.startswith(b"HTTP/1.1 200 OK\r\n") and w.endswith(b'{"ok":true}') for w in corked)
    assert len(asyncio.run(answers(HttpToolsProtocol))) == 4  # head and body apart
