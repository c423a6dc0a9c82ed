"""uvicorn's HTTP/1.1 protocol with TCP_NODELAY on every accepted connection.

With ``--workers N`` uvicorn binds the listening socket itself as ``socket.socket(family)``
(protocol 0), and asyncio turns Nagle's algorithm off only for sockets whose protocol is
``IPPROTO_TCP``: each response, written as headers then body, then waited ~40 ms for the
client's delayed ACK (measured: every request of a 2-worker server took 44 ms on loopback).
One worker listens through ``loop.create_server``, whose sockets already have it; setting it
again is harmless.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket

from uvicorn.protocols.http.h11_impl import H11Protocol

# What `agentscript serve` passes to uvicorn as its ``http`` protocol (an import string, so
# worker processes load it too).
PROTOCOL = "agentscript.server.nodelay:NoDelayH11Protocol"


class NoDelayH11Protocol(H11Protocol):
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        set_nodelay(transport)
        super().connection_made(transport)


def set_nodelay(transport: asyncio.BaseTransport) -> None:
    """Turn Nagle's algorithm off for a TCP transport (anything else is left alone)."""
    sock = transport.get_extra_info("socket")
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
