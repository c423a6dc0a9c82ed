"""The commonest request, a well-formed JSON message to a session, without FastAPI's
per-request parameter machinery.

FastAPI solves a route's dependencies and validates its parameters anew on every request;
for ``POST /v1/sessions/{id}/messages`` that was about a fifth of a turn's CPU with the
stand-in model (``bench/serve.py``). This middleware sits just inside the body limit and
answers that one request itself when every part of it is plainly valid: the path's session
id, a JSON body that is exactly ``{"text": "..."}``, an ``Idempotency-Key`` (if any) of
printable ASCII up to 200 characters. It authenticates, rate-limits and calls
:meth:`SessionService.send` as the route does (a stream asked for by ``Accept``: through
``streaming.py``, as the route does too), and answers errors through the same mapping.

Everything else goes on to FastAPI with the body replayed: a malformed request, any other
route. So the route declared in ``app.py`` stays what ``/openapi.json`` describes and the
one place that validates a bad request and words its 422; this module only ever accepts what
that route would accept.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentscript import jsontext
from agentscript.server import sse
from agentscript.server.service import SessionService, mounted
from agentscript.server.streaming import stream_turn

MESSAGE_PATH = re.compile(r"/v1/sessions/([A-Za-z0-9_-]{1,64})/messages")
IDEMPOTENCY_KEY = re.compile(r"[\x21-\x7e]{1,200}")
JSON_MEDIA_TYPES = frozenset({"application/json", "application/json; charset=utf-8"})
READ = frozenset({b"content-type", b"accept", b"authorization", b"idempotency-key"})

# The owner id for a request's Authorization header (None when absent), or an ApiError.
Authenticate = Callable[[str | None], str]
ErrorResponse = Callable[[BaseException], Response]


class JsonTextResponse(JSONResponse):
    """A JSON answer written like the stored results (``jsontext``): a turn's, on both paths,
    and every route's (the app's default). A lone surrogate a model said, kept in a session's
    history, variables or trace, is written as its escape (``"\\ud800"``), as the turn that
    said it was; FastAPI's own writer (pydantic) fails on it, a 500 for every read of that
    session."""

    def render(self, content: Any) -> bytes:
        return jsontext.dumps_bytes(content)


class MessageFastPath:
    def __init__(
        self,
        app: ASGIApp,
        service: SessionService,
        authenticate: Authenticate,
        error_response: ErrorResponse,
    ) -> None:
        self.app = app
        self.service = service
        self.authenticate = authenticate
        self.error_response = error_response

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        match = _message_route(scope)
        headers = _plain_headers(scope) if match is not None else None
        if match is None or headers is None:
            await self.app(scope, receive, send)
            return
        received: list[Message] = []
        text = await _read_text(receive, received)
        if text is None:
            await self.app(scope, _replaying(received, receive), send)
            return
        try:
            owner = self.authenticate(headers.get(b"authorization"))
            key = headers.get(b"idempotency-key")
            root = scope.get("root_path", "")
            response: Response
            if sse.wants_stream(headers.get(b"accept")):
                response = await stream_turn(self.service, owner, match, text, key, root)
            else:
                response = JsonTextResponse(
                    mounted(root, await self.service.send(owner, match, text, key))
                )
        except Exception as exc:
            response = self.error_response(exc)
        await response(scope, receive, send)


def _message_route(scope: Scope) -> str | None:
    """The session id if ``scope`` is a POST to a session's messages, else None."""
    if scope["type"] != "http" or scope["method"] != "POST":
        return None
    match = MESSAGE_PATH.fullmatch(route_path(scope))
    return match.group(1) if match is not None else None


def route_path(scope: Scope) -> str:
    """The path below the app's mount, as Starlette's router reads it: a Starlette ``Mount``
    (and an ASGI server run with a root path) puts the prefix both in ``root_path`` and at the
    head of ``path``; an older server may have stripped it from ``path`` already."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(root) and path[len(root) : len(root) + 1] == "/":
        return path[len(root) :]
    return path


def _plain_headers(scope: Scope) -> dict[bytes, str] | None:
    """The headers this path reads, decoded, or None when the request is not its kind: no
    JSON content type, a repeated or malformed header."""
    found: dict[bytes, str] = {}
    for name, value in scope["headers"]:
        if name in READ:
            if name in found:
                return None  # which one FastAPI would read is its business
            found[name] = value.decode("latin-1")
    if found.get(b"content-type", "").lower() not in JSON_MEDIA_TYPES:
        return None
    key = found.get(b"idempotency-key")
    if key is not None and IDEMPOTENCY_KEY.fullmatch(key) is None:
        return None
    return found


async def _read_text(receive: Receive, received: list[Message]) -> str | None:
    """The message text of a body that is exactly ``{"text": "..."}``; None otherwise (what
    was received is in ``received``, for the route to read again)."""
    chunks: list[bytes] = []
    while True:
        message = await receive()
        received.append(message)
        if message["type"] != "http.request":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    try:
        data: Any = json.loads(b"".join(chunks))
    except (ValueError, RecursionError):  # FastAPI then words the 4xx
        return None
    if type(data) is not dict or len(data) != 1:
        return None
    text = data.get("text")
    return text if type(text) is str else None


def _replaying(received: list[Message], receive: Receive) -> Receive:
    pending = list(received)

    async def replay() -> Message:
        return pending.pop(0) if pending else await receive()

    return replay
