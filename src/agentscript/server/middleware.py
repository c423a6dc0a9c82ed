"""What the server's own ASGI middlewares share: they act on HTTP requests only.

A subclass writes :meth:`HttpMiddleware.http`, called for each HTTP request with the app it
wraps in ``self.app``; every other scope (the lifespan, a websocket) goes straight to that app
untouched. Pure ASGI rather than Starlette's ``BaseHTTPMiddleware``, which runs the rest of
the app in a task of its own and relays every body chunk through a stream of its own: a cost
on every request and on every event of a streamed turn.
"""

from __future__ import annotations

import asyncio
import json

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentscript.server.errors import body
from agentscript.server.sse import event


class HttpMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        await self.http(scope, receive, send)

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        raise NotImplementedError


class CutAtShutdown(HttpMiddleware):
    """A request that uvicorn cancels at shutdown (its turn ran past ``--shutdown-grace``)
    gets an answer its client can act on: ``503 shutting_down`` with ``Retry-After`` (nothing
    of its turn was committed), or, when a streamed answer had begun, a last ``error`` event.
    Without it, uvicorn answered a plain-text ``500`` and logged a traceback. Nothing else
    cancels a request's task: a client that leaves is told by ``receive``, not cancelled."""

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        started: list[bool] = []  # the response's head went out; [True] once it is an event stream

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = dict(message.get("headers") or ())
                started.append(b"text/event-stream" in headers.get(b"content-type", b""))
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()  # handled here: what follows may await again
            why = (
                "the server stopped before this turn finished; nothing of it was committed: "
                "send it again"
            )
            if not started:
                payload = json.dumps(body("shutting_down", why)).encode()
                await send(
                    {
                        "type": "http.response.start",
                        "status": 503,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"content-length", str(len(payload)).encode()),
                            (b"retry-after", b"1"),
                            (b"connection", b"close"),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": payload})
            elif started[0]:
                error = {"status": 503, "code": "shutting_down", "message": why}
                # the stream's last event, and its end (no more_body)
                await send({"type": "http.response.body", "body": event("error", error).encode()})
