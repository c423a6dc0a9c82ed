"""A session keeps the expiry its last write gave it: a server started again without
``--session-ttl`` still reads an expired session as absent, and now also purges it (an audit
found such rows left on disk forever, readable by nobody, since only a server with a TTL
purged)."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from pathlib import Path

import httpx2 as httpx
from fastapi import FastAPI

from agentscript.server.agents import load_agents, serve_agents
from agentscript.server.app import create_app
from agentscript.server.auth import ApiKeys
from agentscript.server.config import ServerConfig
from agentscript.server.standin import StandInModel
from agentscript.store import store_from_url

from .harness import NOTES, new_session

HANG_GUARD = 10.0


def test_a_server_without_a_ttl_purges_the_sessions_whose_expiry_passed(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    agents = load_agents([NOTES])

    def app(config: ServerConfig, purge_every: float | None) -> FastAPI:
        served = serve_agents(agents, {a.name: StandInModel() for a in agents})
        store = store_from_url(f"sqlite:///{path}")
        return create_app(served, store, config=config, keys=ApiKeys.of(), purge_every=purge_every)

    def stored(session_id: str) -> bool:
        with sqlite3.connect(path) as db:
            query = "SELECT COUNT(*) FROM agentscript_sessions WHERE session_id = ?"
            return bool(db.execute(query, (session_id,)).fetchone()[0])

    async def main() -> None:
        first = app(ServerConfig(session_ttl=0.2), None)
        transport = httpx.ASGITransport(app=first)
        async with (
            first.router.lifespan_context(first),
            httpx.AsyncClient(transport=transport, base_url="http://test") as client,
        ):
            expiring = await new_session(client)
        again = app(ServerConfig(), 0.05)  # started again without --session-ttl
        transport = httpx.ASGITransport(app=again)
        async with (
            again.router.lifespan_context(again),
            httpx.AsyncClient(transport=transport, base_url="http://test") as client,
        ):
            kept = await new_session(client)  # written without a TTL: it never expires
            deadline = time.monotonic() + HANG_GUARD
            while stored(expiring):
                assert time.monotonic() < deadline, "the expired session was never purged"
                await asyncio.sleep(0.05)
            assert (await client.get(f"/v1/sessions/{expiring}")).status_code == 404
            assert (await client.get(f"/v1/sessions/{kept}")).status_code == 200
            assert stored(kept)

    asyncio.run(main())
