"""A request body over the limit (``BodyLimit``, ``413 body_too_large``) ends its connection: the
server stops reading the body, says ``Connection: close``, and closes after the answer without
resetting it, so that a client still sending reads the ``413`` rather than a reset
(server/nodelay.py: a lingering close, bounded in time and bytes), with either HTTP parser
(httptools, and h11, the fallback where httptools is not installed).

Before, the connection stayed open and uvicorn read and dropped whatever the client went on
sending: a declared 1 GB body was taken at loopback speed, 1 MiB every 0.1 s for as long as
it came."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentscript.server.config import ServerConfig
from agentscript.server.nodelay import LINGER_BYTES

from .harness import NOTES
from .process import WITHOUT_HTTPTOOLS, ServerProcess

LIMIT = ServerConfig().max_body_bytes
MIB = 1024 * 1024
# What a client tries to send after its head: far more than the kernel's socket buffers (up to
# 32 MiB received and 4 MiB sent here) and the server's lingering read (1 MiB) take.
ATTEMPT = 256 * MIB
TAKEN = ATTEMPT // 4  # bytes a refused client may get sent at most


@pytest.fixture(scope="module", params=["httptools", "h11"])
def port(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    here = tmp_path_factory.mktemp("body_limit")
    args = [NOTES, "--model", "standin", "--store", f"sqlite:///{here / 's.db'}"]
    command = WITHOUT_HTTPTOOLS if request.param == "h11" else None
    server = ServerProcess(args, {}, here / "server.log", command=command)
    try:
        server.wait_ready()
        # The parser asked for is the one serving: httptools' extension is mapped or not.
        maps = Path(f"/proc/{server.proc.pid}/maps").read_text()
        assert ("httptools" in maps) == (request.param == "httptools")
        yield server.port
    finally:
        server.stop()


def connect(port: int, path: str, framing: str) -> socket.socket:
    """A connection that sent the head of a POST to ``path``, its body framed by ``framing``."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    sock.sendall(f"{head}{framing}\r\n\r\n".encode())
    return sock


def send_until_refused(sock: socket.socket, block: bytes) -> tuple[int, float]:
    """Send ``block`` after ``block`` (up to ``ATTEMPT`` bytes) without reading: the bytes the
    server let through and the seconds until it stopped them."""
    sent = 0
    start = time.monotonic()
    try:
        while sent < ATTEMPT:
            sock.sendall(block)
            sent += len(block)
    except OSError:  # the server closed: a broken pipe or a reset
        pass
    return sent, time.monotonic() - start


def read_to_end(sock: socket.socket, seconds: float = 5.0) -> tuple[bytes, bool]:
    """What the server sent, and whether it ended the connection within ``seconds``."""
    sock.settimeout(seconds)
    got = b""
    try:
        while chunk := sock.recv(65536):
            got += chunk
    except TimeoutError:
        return got, False
    except ConnectionResetError:
        pass
    return got, True


def read_answer(sock: socket.socket) -> bytes:
    """One whole response (its head and its Content-Length of body), the connection left as is."""
    sock.settimeout(5)
    got = b""
    while b"\r\n\r\n" not in got:
        got += receive(sock)
    head, _, body = got.partition(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    while len(body) < length:
        body += receive(sock)
    return head + b"\r\n\r\n" + body


def receive(sock: socket.socket) -> bytes:
    chunk = sock.recv(65536)
    if not chunk:
        raise AssertionError("the connection ended within a response")
    return chunk


def assert_refused(answer: bytes) -> None:
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413 "), answer[:200]
    assert b"\r\nconnection: close" in head.lower()
    assert b'"body_too_large"' in body


def assert_still_served(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        answer, ended = read_to_end(sock)
    assert ended and answer.startswith(b"HTTP/1.1 200 ")


def test_a_declared_length_over_the_limit_is_refused_and_not_read(port: int) -> None:
    with connect(port, "/v1/sessions/any/messages", "Content-Length: 1000000000") as sock:
        sent, seconds = send_until_refused(sock, b"x" * MIB)
        answer, ended = read_to_end(sock)
    assert sent < TAKEN, f"{sent / MIB:.0f} MiB taken after the 413"
    assert seconds < 3.0
    assert_refused(answer)
    assert ended
    assert_still_served(port)


def test_a_chunked_body_over_the_limit_is_refused_and_not_read(port: int) -> None:
    # Creating a session reads its body: the limit is met on the way, not in the head.
    with connect(port, "/v1/agents/Notes/sessions", "Transfer-Encoding: chunked") as sock:
        sent, seconds = send_until_refused(sock, b"%x\r\n%s\r\n" % (MIB, b" " * MIB))
        answer, ended = read_to_end(sock)
    assert LIMIT < sent < TAKEN, f"{sent / MIB:.0f} MiB taken"
    assert seconds < 3.0
    assert_refused(answer)
    assert ended
    assert_still_served(port)


def test_a_client_sending_slowly_is_cut_after_a_short_linger(port: int) -> None:
    """16 KiB every 50 ms, under the lingering read's bytes: its time ends it."""
    with connect(port, "/v1/sessions/any/messages", "Content-Length: 1000000000") as sock:
        answer = read_answer(sock)
        refused = time.monotonic()
        closed = None
        while closed is None and time.monotonic() - refused < 6.0:
            try:
                sock.sendall(b"x" * 16384)
            except OSError:
                closed = time.monotonic() - refused
            time.sleep(0.05)
    assert_refused(answer)
    assert closed is not None and closed < 4.0, closed


def test_a_whole_body_over_the_limit_sent_then_read_gets_the_413(port: int) -> None:
    """A client that writes its whole request before reading (as most do) is not reset while it
    writes: the server reads on for a while after its answer, then ends the connection."""
    # Over the limit, and with what the client sends after the answer, within the bytes the
    # server drops while it lingers: all of it may still be unread when the 413 goes out (a
    # body of 4 x LIMIT, exactly LINGER_BYTES, passed only when the server had read 48 KiB of
    # it first, and was reset on a slow machine).
    body = b"x" * (2 * LIMIT)
    assert len(body) + 3 * 16384 < LINGER_BYTES
    framing = f"Content-Length: {len(body)}"
    with connect(port, "/v1/sessions/any/messages", framing) as sock:
        sock.sendall(body)
        answer, ended = read_to_end(sock)
        assert_refused(answer)
        assert ended
        # The server ended what it sends (a half-close) but still reads for a moment: what the
        # client sends now is dropped, not answered with a reset.
        for _ in range(3):
            sock.sendall(b"x" * 16384)
            time.sleep(0.05)
    assert_still_served(port)
