"""The bound on each request's head (request line and headers) of the protocol `serve` runs:
httptools alone takes any size and any time (server/httptools_nodelay.py)."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

httptools = pytest.importorskip("httptools")
uvicorn = pytest.importorskip("uvicorn")

from agentscript.server import httptools_nodelay  # noqa: E402
from agentscript.server.httptools_nodelay import MAX_HEAD_BYTES, NoDelayHttpToolsProtocol  # noqa: E402
from agentscript.server.nodelay import HTTPTOOLS, protocol  # noqa: E402

from .process import listening_socket  # noqa: E402


async def echo_length(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answers each request with the length of its body (``/slow``: after a second)."""
    if scope["type"] != "http":
        return
    if scope["path"] == "/slow":
        await asyncio.sleep(1.0)
    size = 0
    while True:
        message = await receive()
        size += len(message.get("body", b""))
        if not message.get("more_body"):
            break
    text = str(size).encode()
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": text})


@pytest.fixture
def server() -> Iterator[int]:
    yield from _serving(NoDelayHttpToolsProtocol)


def _serving(protocol_class: Any) -> Iterator[int]:
    # uvicorn serves on the socket bound here: no other process can take the port meanwhile.
    sock = listening_socket()
    port = int(sock.getsockname()[1])
    config = uvicorn.Config(
        echo_length, host="127.0.0.1", port=port, http=protocol_class, log_level="error"
    )
    running = uvicorn.Server(config)
    thread = threading.Thread(target=running.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not running.started and time.monotonic() < deadline:
        time.sleep(0.02)
    try:
        yield port
    finally:
        running.should_exit = True
        thread.join(timeout=10)
        sock.close()


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def read_all(sock: socket.socket) -> bytes:
    chunks = []
    while True:
        chunk = sock.recv(65536)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)


def test_serve_runs_the_bounded_protocol() -> None:
    assert protocol() == HTTPTOOLS
    assert HTTPTOOLS.endswith("httptools_nodelay:NoDelayHttpToolsProtocol")


def test_a_head_past_its_bound_is_431_and_the_server_goes_on(server: int) -> None:
    with connect(server) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: ")
        sent = 0
        try:
            while sent < 10 * MAX_HEAD_BYTES:  # far more than the bound, never ended
                sock.sendall(b"a" * 8192)
                sent += 8192
        except OSError:
            pass  # the server closed the connection while we sent
        answer = read_all(sock)
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 431 ")
    assert json.loads(body)["error"]["code"] == "headers_too_large"
    with connect(server) as sock:  # the worker serves the next client
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        assert read_all(sock).startswith(b"HTTP/1.1 200 ")


def test_large_bodies_and_kept_alive_requests_are_not_counted_as_head(server: int) -> None:
    body = b"x" * (4 * MAX_HEAD_BYTES)
    request = (
        b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )
    with connect(server) as sock:
        for _ in range(3):  # one connection, several requests, each head well under the bound
            sock.sendall(request)
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        answers = read_all(sock)
    assert answers.count(b"HTTP/1.1 200 ") == 4
    assert answers.count(str(len(body)).encode()) == 3


def test_a_head_that_trickles_in_is_cut_after_its_time(
    server: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(httptools_nodelay, "HEAD_SECONDS", 0.5)
    with connect(server) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
        closed = False
        end = time.monotonic() + 8
        # One header byte every 0.1 s: each renews uvicorn's keep-alive wait, never the head's.
        while time.monotonic() < end:
            try:
                sock.sendall(b"X")
            except OSError:
                closed = True
                break
            sock.settimeout(0.1)
            try:
                if sock.recv(1024) == b"":
                    closed = True
                    break
            except TimeoutError:
                pass
            except OSError:  # reset: a byte sent after the server closed arrived unread
                closed = True
                break
    assert closed


def test_a_slow_answer_on_a_kept_alive_connection_is_not_cut(
    server: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The head's time runs only while a head arrives, not while the answer is computed."""
    monkeypatch.setattr(httptools_nodelay, "HEAD_SECONDS", 0.3)
    with connect(server) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        first = sock.recv(65536)
        sock.sendall(b"GET /slow HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        second = read_all(sock)
    assert first.startswith(b"HTTP/1.1 200 ") and second.startswith(b"HTTP/1.1 200 ")


@pytest.mark.parametrize("parser", ["httptools", "h11"])
def test_a_request_the_parser_cannot_read_gets_the_apis_json_error(parser: str) -> None:
    from agentscript.server.nodelay import NoDelayH11Protocol

    chosen = NoDelayHttpToolsProtocol if parser == "httptools" else NoDelayH11Protocol
    serving = _serving(chosen)
    port = next(serving)
    try:
        for garbage in (b"NOT HTTP AT ALL\r\n\r\n", b"GET / HTTP/1.1\r\nHost x\r\n\r\n"):
            with connect(port) as sock:
                sock.sendall(garbage)
                answer = read_all(sock)
            head, _, body = answer.partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 400 ")
            assert b"content-type: application/json" in head.lower()
            error = json.loads(body)["error"]
            assert error["code"] == "invalid_http" and "Invalid HTTP request" in error["message"]
        with connect(port) as sock:  # and the next client is served
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert read_all(sock).startswith(b"HTTP/1.1 200 ")
    finally:
        next(serving, None)
