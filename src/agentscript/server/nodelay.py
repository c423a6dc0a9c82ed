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
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from agentscript.server.shutdown import ShutdownClock

H11 = "agentscript.server.nodelay:NoDelayH11Protocol"
HTTPTOOLS = "agentscript.server.httptools_nodelay:NoDelayHttpToolsProtocol"

# Seconds and bytes of a refused client's further sending that are read and dropped before the
# connection closes: closing with bytes unread resets it, and a client still sending could lose
# the answer before reading it. Past either the connection closes anyway: the answer went out
# first, and a client that goes on sending this long or this much would not stop for it.
LINGER_SECONDS = 2.0
LINGER_BYTES = 1024 * 1024


def protocol() -> str:
    """What `agentscript serve` passes to uvicorn as its ``http`` protocol: an import string,
    so worker processes load it too."""
    return HTTPTOOLS if importlib.util.find_spec("httptools") is not None else H11


def invalid_http(reason: str) -> bytes:
    """The body of the ``400`` for a request the HTTP parser cannot read (it never reaches the
    app): the API's error shape, where uvicorn answers in plain text."""
    return json.dumps({"error": {"code": "invalid_http", "message": reason}}).encode()


class LingeringClose:
    """The lingering close both protocols share (the protocol classes come after it in their
    bases): a connection whose answer ended it while its request's body still arrives, or
    whose unread body outlasts an answer kept alive past LINGER_BYTES, ends what this side
    sends now, reads and drops what the client still sends for LINGER_SECONDS or LINGER_BYTES
    (a lingering close, as nginx does), then closes. A close with bytes unread resets the
    connection, which can lose the answer on the way to a client still sending."""

    transport: asyncio.Transport
    loop: asyncio.AbstractEventLoop
    _lingering: int | None = None  # bytes dropped since the connection began to end; None before
    _unwanted = 0  # bytes of the request's body that came after its response was complete

    def _linger(self) -> None:
        self._lingering = 0
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_SECONDS, self.transport.close)

    def _drop(self, data: bytes) -> None:
        """Read and drop what came while lingering; close past LINGER_BYTES."""
        assert self._lingering is not None
        self._lingering += len(data)
        if self._lingering > LINGER_BYTES and not self.transport.is_closing():
            self.transport.close()

    def _unwanted_bytes(self, size: int) -> None:
        """``size`` more bytes of a body whose answer was complete and kept the connection
        (a 404, a 401: routes that read no body, which uvicorn reads and drops to reach the
        next request): so much, and no more, before the connection ends."""
        self._unwanted += size
        if self._unwanted > LINGER_BYTES and not self.transport.is_closing():
            self._linger()


class NoDelayH11Protocol(LingeringClose, H11Protocol):
    """uvicorn's h11 protocol with TCP_NODELAY, the API's ``400`` and the lingering close, as
    the httptools protocol has them."""

    _cycle_transport: CycleTransport

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        set_nodelay(transport)
        super().connection_made(transport)
        self._cycle_transport = CycleTransport(self)

    def data_received(self, data: bytes) -> None:
        cycle = self.cycle
        if (
            self._lingering is None
            and cycle is not None
            and cycle.response_complete
            and self.conn.their_state is h11.SEND_BODY
        ):
            self._unwanted_bytes(len(data))
        if self._lingering is not None:
            self._drop(data)
            return
        super().data_received(data)

    def handle_events(self) -> None:
        super().handle_events()
        # A request's cycle, once created, closes through the protocol (one cycle at a time:
        # h11 pauses a pipelined request until the answer before it is complete).
        cycle = self.cycle
        if cycle is not None and cycle.transport is self.transport:
            cycle.transport = self._cycle_transport  # type: ignore[assignment]
            self._unwanted = 0

    def close_after_response(self) -> None:
        """A request's cycle ends the connection: lingering if the request's body is still
        arriving, else at once."""
        if self._lingering is not None:
            return
        if self.conn.their_state is h11.SEND_BODY:
            self._linger()
        else:
            self.transport.close()

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


class CycleTransport:
    """A connection's transport as uvicorn's request cycles see it: the same, but for
    ``close``, which the protocol decides (its ``close_after_response``). A cycle writes
    through the transport's own bound methods, so a response costs nothing more."""

    def __init__(self, protocol: Any) -> None:
        transport = protocol.transport
        self.write = transport.write
        self.is_closing = transport.is_closing
        self.get_extra_info = transport.get_extra_info
        self.close = protocol.close_after_response
