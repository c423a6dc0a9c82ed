"""uvicorn's httptools protocol with TCP_NODELAY (see ``nodelay``) and a bound on each request's
head; a module of its own because importing it needs httptools, which only the ``serve`` extra
installs.

uvicorn's h11 protocol refuses a head past 16 KiB; its httptools one takes any size and any
time: httptools gathers a header's value until its end, so a client sending one 100 MB header
held 470 MB of the worker's memory, and one sending a byte every few seconds held its
connection forever (the keep-alive timeout counts only the wait between requests). Here a head
(request line and headers) may take ``MAX_HEAD_BYTES`` and ``HEAD_SECONDS``; past either the
connection is answered ``431`` or closed. A proxy in front bounds both too.

A response that ends its connection (``Connection: close``, as the ``413`` for a body over the
limit says) before its request's body has all arrived closes it lingering, as the ``431`` does:
uvicorn would close the socket at once, and a close with bytes unread resets the connection,
which can lose the response on the way to a client still sending.
"""

from __future__ import annotations

import asyncio
import json

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from agentscript.server.nodelay import CycleTransport, LingeringClose, invalid_http, set_nodelay
from agentscript.server.shutdown import ShutdownClock

# Bytes of one request's head (request line and headers): four times nginx's default, far
# above any real client's.
MAX_HEAD_BYTES = 64 * 1024
# Seconds a request's head may take to arrive, from its first byte (nginx waits 60 s).
HEAD_SECONDS = 30.0

_TOO_LARGE = json.dumps(
    {
        "error": {
            "code": "headers_too_large",
            "message": f"the request line and headers are over {MAX_HEAD_BYTES} bytes",
        }
    }
).encode()


class NoDelayHttpToolsProtocol(LingeringClose, HttpToolsProtocol):
    # Bytes counted of the head being read; None while a request's body is being read.
    _head_bytes: int | None = 0
    _heads = 0  # heads begun on this connection: tells a chunk that ended one from the next
    _in_head = False  # a request's head has begun and not ended
    _head_timer: asyncio.TimerHandle | None = None
    _cycle_transport: CycleTransport

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        set_nodelay(transport)
        super().connection_made(transport)
        self._cycle_transport = CycleTransport(self)

    def data_received(self, data: bytes) -> None:
        if self._lingering is not None:
            self._drop(data)
            return
        # A chunk counts when the same head was being read before and after it: exact for a
        # head that takes many reads, and a chunk where a head ends or begins (the end of the
        # last body, pipelined requests) never counts, so no real request is refused; the
        # parser holds at most one read (256 KiB) more than the bound.
        head = self._heads if self._head_bytes is not None else None
        super().data_received(data)
        if self._head_bytes is None:
            self._count_unwanted(len(data))
            return
        if self.transport.is_closing():
            return
        if head == self._heads:
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES:
                self._refuse_head()
                return
        # The head's time runs from the read where it began: not while a response is being
        # computed (a turn may take minutes), nor between requests (uvicorn's keep-alive
        # timeout). A head that arrives whole in one read, as nearly all do, arms no timer.
        if self._in_head and self._head_timer is None:
            self._head_timer = self.loop.call_later(HEAD_SECONDS, self._head_too_slow)

    def on_message_begin(self) -> None:
        self._in_head = True
        super().on_message_begin()

    def on_headers_complete(self) -> None:
        self._head_bytes = None
        self._in_head = False
        self._stop_head_timer()
        super().on_headers_complete()
        self._unwanted = 0
        if self.cycle is not None:
            self.cycle.transport = self._cycle_transport  # type: ignore[assignment]

    def on_message_complete(self) -> None:
        self._head_bytes = 0  # what comes next is the next request's head
        self._heads += 1
        super().on_message_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._stop_head_timer()
        super().connection_lost(exc)

    def shutdown(self) -> None:
        ShutdownClock.mark()
        super().shutdown()

    def send_400_response(self, msg: str) -> None:
        body = invalid_http(msg)
        head = [b"HTTP/1.1 400 Bad Request\r\n"]
        head += [
            name + b": " + value + b"\r\n" for name, value in self.server_state.default_headers
        ]
        self.transport.write(
            b"".join(head) + b"content-type: application/json\r\n"
            b"content-length: " + str(len(body)).encode() + b"\r\n"
            b"connection: close\r\n\r\n" + body
        )
        self.transport.close()

    def _stop_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_too_slow(self) -> None:
        self._head_timer = None
        if self._head_bytes is not None and not self.transport.is_closing():
            self.transport.close()

    def _refuse_head(self) -> None:
        self._stop_head_timer()
        self._head_bytes = None
        self.transport.write(
            b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
            b"content-type: application/json\r\n"
            b"content-length: " + str(len(_TOO_LARGE)).encode() + b"\r\n"
            b"connection: close\r\n\r\n" + _TOO_LARGE
        )
        self._linger()

    def close_after_response(self) -> None:
        """A request's cycle ends the connection (its response said ``Connection: close``, or
        the app failed): lingering if the request's body is still arriving, else at once."""
        if self._lingering is not None:
            return
        if self._head_bytes is None:  # between a request's head and the end of its body
            self._linger()
        else:
            self.transport.close()

    def _linger(self) -> None:
        self._stop_head_timer()
        self.pipeline.clear()  # requests queued behind this one are never answered
        super()._linger()

    def _count_unwanted(self, size: int) -> None:
        cycle = self.cycle
        if cycle is not None and cycle.response_complete and self._lingering is None:
            self._unwanted_bytes(size)
