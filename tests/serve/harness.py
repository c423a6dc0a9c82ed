"""Run the real ASGI app in-process with httpx (no sockets): the helpers the API tests share."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2 as httpx

from agentscript.server.agents import load_agents, serve_agents
from agentscript.server.app import create_app
from agentscript.server.auth import ApiKeys
from agentscript.server.config import ServerConfig
from agentscript.server.standin import StandInModel
from agentscript.store import Store, store_from_url

AGENTS = Path(__file__).parent / "agents"
NOTES = str(AGENTS / "notes" / "notes.agent")
CARD_BANK = str(Path(__file__).parents[2] / "examples" / "card_bank")


@asynccontextmanager
async def api(
    store_url: str,
    *,
    paths: tuple[str, ...] = (NOTES,),
    keys: tuple[str, ...] = (),
    config: ServerConfig | None = None,
    model: Callable[[], Any] = StandInModel,
) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the app serving ``paths``, each agent with a model ``model()`` makes (the
    stand-in by default)."""
    agents = load_agents(list(paths))
    served = serve_agents(agents, {a.name: model() for a in agents})
    app = create_app(
        served, store_from_url(store_url), config=config, keys=ApiKeys.of(*keys), purge_every=None
    )
    headers = {"Authorization": f"Bearer {keys[0]}"} if keys else {}
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://test", headers=headers
        ) as client,
    ):
        yield client


def run(
    store_url: str,
    scenario: Callable[[httpx.AsyncClient], Awaitable[Any]],
    **options: Any,
) -> Any:
    async def main() -> Any:
        async with api(store_url, **options) as client:
            return await scenario(client)

    return asyncio.run(main())


async def new_session(client: httpx.AsyncClient, agent: str = "Notes", **variables: Any) -> str:
    response = await client.post(f"/v1/agents/{agent}/sessions", json={"variables": variables})
    assert response.status_code == 201, response.text
    return str(response.json()["session_id"])


async def say(client: httpx.AsyncClient, sid: str, text: str) -> dict[str, Any]:
    """The turn of ``text`` in session ``sid``: the body of its answer, which must be a 200."""
    response = await client.post(f"/v1/sessions/{sid}/messages", json={"text": text})
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()
    return result


# How many leases a store holds: SQLite's are rows of a table of their own (schema version 6),
# PostgreSQL's are on the session's row.
SQLITE_LEASES = "SELECT COUNT(*) FROM agentscript_leases"
POSTGRESQL_LEASES = "SELECT COUNT(*) FROM agentscript_sessions WHERE lease_holder IS NOT NULL"


def leases_query(url: str) -> str:
    """The statement counting the leases of the SQL store at ``url``."""
    return SQLITE_LEASES if url.startswith("sqlite:///") else POSTGRESQL_LEASES


def lease_rows(url: str) -> int:
    """How many leases a SQL store holds, read on a connection of its own."""
    if url.startswith("sqlite:///"):
        with contextlib.closing(sqlite3.connect(url[len("sqlite:///") :])) as db:
            return int(db.execute(SQLITE_LEASES).fetchone()[0])
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute(POSTGRESQL_LEASES).fetchone()
        return int(row[0]) if row else -1


def stored_state(url: str, session_id: str) -> str:
    """The state column of the session's row in the SQL store at ``url``, as the store keeps
    it, read on a connection of its own."""
    query = "SELECT state FROM agentscript_sessions WHERE session_id = ?"
    if url.startswith("sqlite:///"):
        with contextlib.closing(sqlite3.connect(url[len("sqlite:///") :])) as db:
            return str(db.execute(query, (session_id,)).fetchone()[0])
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute(query.replace("?", "%s"), (session_id,)).fetchone()
        assert row is not None
        return str(row[0])


def execute(url: str, sql: str, *params: Any) -> None:
    """One statement on a SQL store, on a connection of its own (``?`` placeholders)."""
    if url.startswith("sqlite:///"):
        with contextlib.closing(sqlite3.connect(url[len("sqlite:///") :])) as db:
            db.execute(sql, params)
            db.commit()
        return
    import psycopg

    with psycopg.connect(url) as conn:
        conn.execute(sql.replace("?", "%s"), params)


def run_store(url: str, body: Callable[[Store], Awaitable[Any]]) -> Any:
    """``body`` on the store at ``url``, opened for it and closed after."""

    async def main() -> Any:
        store = store_from_url(url)
        await store.open()
        try:
            return await body(store)
        finally:
            await store.close()

    return asyncio.run(main())
