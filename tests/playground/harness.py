"""The playground app built by the real command code (``build_app`` with ``playground=True``),
driven in-process with httpx (no sockets) for the API tests."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2 as httpx

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


@asynccontextmanager
async def client(opts: ServeOptions) -> AsyncIterator[httpx.AsyncClient]:
    app, _lines = build_app(opts)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8000"
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
