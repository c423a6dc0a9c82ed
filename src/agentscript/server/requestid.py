"""Every response names its request in ``X-Request-ID``, and so does every log line about it.

A user who reports "my message failed" can quote one header, and the operator finds the lines
the server wrote while it handled that request (the access line, an internal error, an
unreachable store). A proxy in front often makes the id itself (nginx's ``$request_id``, a load
balancer's trace header) and sends it on: a well-formed one (1-128 letters, digits or
``-_.:/+=@``) is kept, so the proxy's log and ours share it. Anything else (absent, too long, a
space, a line break) is replaced by a new random id, so a client can neither forge a log line
nor make one grow.

The id is in :data:`current` while the request is handled, in tasks started for it too (a
streamed turn's), for code that wants it beyond the log.
"""

from __future__ import annotations

import re
import uuid
from contextvars import ContextVar

from starlette.types import Message, Receive, Scope, Send

from agentscript.server.middleware import HttpMiddleware

HEADER = b"x-request-id"
WELL_FORMED = re.compile(rb"[A-Za-z0-9._:/+=@-]{1,128}")

current: ContextVar[str] = ContextVar("agentscript_request_id", default="-")


def request_id_of(headers: list[tuple[bytes, bytes]]) -> str:
    """The request's own id if it sent a well-formed one (the first), else a new one."""
    for name, value in headers:
        if name == HEADER:
            if WELL_FORMED.fullmatch(value):
                return value.decode("ascii")
            break
    return uuid.uuid4().hex


class RequestId(HttpMiddleware):
    """Sets :data:`current` for the request and adds ``X-Request-ID`` to its response."""

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        request_id = request_id_of(scope["headers"])
        header = (HEADER, request_id.encode("ascii"))

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                # A new list: the one sent may be a response object's own.
                message["headers"] = [*message.get("headers", ()), header]
            await send(message)

        token = current.set(request_id)
        try:
            await self.app(scope, receive, sending)
        finally:
            current.reset(token)
