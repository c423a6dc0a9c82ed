"""What the server's own ASGI middlewares share: they act on HTTP requests only.

A subclass writes :meth:`HttpMiddleware.http`, called for each HTTP request with the app it
wraps in ``self.app``; every other scope (the lifespan, a websocket) goes straight to that app
untouched. Pure ASGI rather than Starlette's ``BaseHTTPMiddleware``, which runs the rest of
the app in a task of its own and relays every body chunk through a stream of its own: a cost
on every request and on every event of a streamed turn.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send


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
