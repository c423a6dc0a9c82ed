"""uvicorn's HTTP/1.1 protocols with TCP_NODELAY on every accepted connection.

With ``--workers N`` uvicorn binds the listening socket itself as ``socket.socket(family)``
(protocol 0), and asyncio turns Nagle's algorithm off only for sockets whose protocol is
``IPPROTO_TCP``: each response, written as headers then body, then waited ~40 ms for the
client's delayed ACK (measured: every request of a 2-worker server took 44 ms on loopback).
One worker listens through ``loop.create_server``, whose sockets already have it; setting it
again is harmless.

The parser is httptools (C) when it is installed (``agentscript[serve]`` installs it), else
h11 (pure Python): httptools costs a fraction of h11's CPU per request, which is most of what
a turn costs the server besides the engine (docs/performance.md, issue 11).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import socket

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from agentscript.server.shutdown import ShutdownClock

H11 = "agentscript.server.nodelay:NoDelayH11Protocol"
HTTPTOOLS = "agentscript.server.httptools_nodelay:NoDelayHttpToolsProtocol"


def protocol() -> str:
    """What `agentscript serve` passes to uvicorn as its ``http`` protocol: an import string,
    so worker processes load it too."""
    return HTTPTOOLS if importlib.util.find_spec("httptools") is not None else H11


def invalid_http(reason: str) -> bytes:
    """The body of the ``400`` for a request the HTTP parser cannot read (it never reaches the
    app): the API's error shape, where uvicorn answers in plain text."""
    return json.dumps({"error": {"code": "invalid_http", "message": reason}}).encode()


class NoDelayH11Protocol(H11Protocol):
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        set_nodelay(transport)
        super().connection_made(transport)

    def shutdown(self) -> None:
        ShutdownClock.mark()
        super().shutdown()

    def send_400_response(self, msg: str) -> None:
        body = invalid_http(msg)
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            (b"connection", b"close"),
        ]
        for event in (
            h11.Response(status_code=400, headers=headers, reason=b"Bad Request"),
            h11.Data(data=body),
            h11.EndOfMessage(),
        ):
            self.transport.write(self.conn.send(event) or b"")
        self.transport.close()


def set_nodelay(transport: asyncio.BaseTransport) -> None:
    """Turn Nagle's algorithm off for a TCP transport (anything else is left alone)."""
    sock = transport.get_extra_info("socket")
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
