"""A response sent before its request's body was read (a 404, a 401: routes that read no body)
keeps the connection only while the rest of the body is small: uvicorn reads and drops it to
reach the next request, and before it did so for as long as the client sent."""

from __future__ import annotations

import socket
import time

from .test_body_limit_closes import ATTEMPT, MIB, TAKEN, port, read_answer, read_to_end

__all__ = ["port"]  # the module's server, shared


def test_an_unread_body_past_a_bound_ends_the_connection(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(
            b"POST /nope HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        answer = read_answer(sock)
        frame = b"%x\r\n%s\r\n" % (MIB, b"x" * MIB)
        sent = 0
        try:
            while sent < ATTEMPT:
                sock.sendall(frame)
                sent += len(frame)
        except OSError:
            pass
        _, ended = read_to_end(sock)
    assert answer.startswith(b"HTTP/1.1 404 ")
    assert sent < TAKEN, f"{sent / MIB:.0f} MiB taken after the 404"
    assert ended


def test_a_small_unread_body_keeps_the_connection(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(
            b"POST /nope HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n"
        )
        first = read_answer(sock)
        time.sleep(0.05)
        sock.sendall(b"%x\r\n%s\r\n0\r\n\r\n" % (100_000, b"x" * 100_000))
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        second = read_answer(sock)
    assert first.startswith(b"HTTP/1.1 404 ") and second.startswith(b"HTTP/1.1 200 ")
