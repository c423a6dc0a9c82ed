"""The playground app built by the real command code (``build_app`` with ``playground=True``),
driven in-process with httpx (no sockets) for the API tests."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2 as httpx
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from agentscript.server.command import ServeOptions, build_app

ROOT = Path(__file__).parents[2]
ORDER_STATUS = str(ROOT / "examples" / "order_status" / "order_status.agent")
LATE_ORDER = str(ROOT / "examples" / "order_status" / "late_order.yaml")
CARD_BANK = str(ROOT / "examples" / "card_bank")


def options(*paths: str, **given: Any) -> ServeOptions:
    base: dict[str, Any] = {
        "store": "memory://",
        "model": "standin",
        "rate_limit": 0.0,
        "playground": True,
    }
    base.update(given)
    return ServeOptions(paths=list(paths), **base)


class BehindProxy:
    """The app as a reverse proxy serving it under ``prefix`` hands requests to it: without
    the prefix in the path; with ``told``, run as ``uvicorn --root-path PREFIX`` is, the
    prefix in ``root_path`` and back at the head of the path (uvicorn puts it there). Paths
    outside the prefix are the proxy's 404."""

    def __init__(self, app: ASGIApp, prefix: str, *, told: bool) -> None:
        self.app = app
        self.prefix = prefix
        self.told = told

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # lifespan
            await self.app(scope, receive, send)
            return
        path: str = scope["path"]
        if path != self.prefix and not path.startswith(self.prefix + "/"):
            await PlainTextResponse("not served by this proxy", 404)(scope, receive, send)
            return
        inner = path[len(self.prefix) :] or "/"
        if self.told:
            scope = {**scope, "root_path": self.prefix, "path": self.prefix + inner}
        else:
            scope = {**scope, "root_path": "", "path": inner, "raw_path": inner.encode()}
        await self.app(scope, receive, send)


@asynccontextmanager
async def client(
    opts: ServeOptions, wrap: Callable[[ASGIApp], ASGIApp] | None = None
) -> AsyncIterator[httpx.AsyncClient]:
    """An httpx client of the app (``wrap``: what stands between them, a proxy say)."""
    app, _lines = build_app(opts)
    served = wrap(app) if wrap is not None else app
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=served), base_url="http://127.0.0.1:8000"
        ) as c,
    ):
        yield c


def run(opts: ServeOptions, scenario: Callable[[httpx.AsyncClient], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        async with client(opts) as c:
            return await scenario(c)

    return asyncio.run(main())


async def session(c: httpx.AsyncClient, agent: str, **body: Any) -> str:
    response = await c.post(f"/playground/api/agents/{agent}/sessions", json=body)
    assert response.status_code == 201, response.text
    return str(response.json()["session_id"])


async def say(c: httpx.AsyncClient, sid: str, text: str) -> dict[str, Any]:
    response = await c.post(f"/v1/sessions/{sid}/messages", json={"text": text})
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()
    return data
