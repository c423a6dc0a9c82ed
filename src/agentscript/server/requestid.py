"""Every response names its request in ``X-Request-ID``, and so does every log line about it.

A user who reports "my message failed" can quote one header, and the operator finds the lines
the server wrote while it handled that request (the access line, an internal error, an
unreachable store). A proxy in front often makes the id itself (nginx's ``$request_id``, a load
balancer's trace header) and sends it on: a well-formed one (1-128 letters, digits or
``-_.:/+=@``) is kept, so the proxy's log and ours share it. Anything else (absent, too long, a
space, a line break) is replaced by a new random id, so a client can neither forge a log line
nor make one grow.

The id is in :data:`current` while the request is handled, in tasks started for it too (a
streamed turn's), for code that wants it beyond the log. So is the request's W3C trace context
(``traceparent`` and ``tracestate``, in :data:`trace_context`), which the OpenTelemetry export
makes the parent of the turn's trace (``integrations/otel.py``): the caller's trace goes on
through the agent.
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

# What went wrong with the request being handled, for its access line (``logs.AccessLog``):
# the code of its error answer (``message_too_long``), ``turn_error`` for a turn answered 200
# with an ``error`` inside, or ``session_ended`` for a message to a session that had ended
# (answered 200 with the refusal as its ``error``, and no warning: the client's doing). Set
# only on those answers, where they are made, in the request's task (a streamed turn's
# outcome is handed over by ``streaming.EventStream``), so an answer that went well costs
# nothing; only the access log reads it, and clears it first.
outcome: ContextVar[str | None] = ContextVar("agentscript_outcome", default=None)
TURN_ERROR = "turn_error"
SESSION_ENDED = "session_ended"


# The request's W3C trace context headers, as sent (bounded): the propagator reads them, and
# ignores what is not well formed.
trace_context: ContextVar[dict[str, str] | None] = ContextVar(
    "agentscript_trace_context", default=None
)
TRACE_HEADERS = frozenset({b"traceparent", b"tracestate"})
# tracestate: at most 32 members of 256 characters (W3C); anything longer is not one.
MOST_TRACE_HEADER = 8_192


def trace_context_of(headers: list[tuple[bytes, bytes]]) -> dict[str, str] | None:
    """The ``traceparent`` (and ``tracestate``) the request sent, None without one."""
    found = {
        name.decode("ascii"): value.decode("latin-1")
        for name, value in headers
        if name in TRACE_HEADERS and len(value) <= MOST_TRACE_HEADER
    }
    return found if "traceparent" in found else None


def request_id() -> str | None:
    """The id of the request being handled, None outside one (``-`` in a log line)."""
    found = current.get()
    return None if found == "-" else found


def request_id_of(headers: list[tuple[bytes, bytes]]) -> str:
    """The request's own id if it sent a well-formed one (the first), else a new one."""
    for name, value in headers:
        if name == HEADER:
            # "-" stands for no request in a log line (and in request_id()): never one's id.
            if WELL_FORMED.fullmatch(value) and value != b"-":
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
        parent = trace_context.set(trace_context_of(scope["headers"]))
        try:
            await self.app(scope, receive, sending)
        finally:
            trace_context.reset(parent)
            current.reset(token)
