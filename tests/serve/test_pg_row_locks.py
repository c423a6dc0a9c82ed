"""A session whose row another PostgreSQL client keeps locked (an operator's open
``SELECT ... FOR UPDATE``) is busy, not a hang: its turns and its deletion end with
SessionBusy (409) and hold no connection meanwhile; the store's connections bound every lock
wait and statement, and a timeout keeps the connection and the pool.

Each test caps its waits generously (a loaded CI machine) and asserts only that things ended
as they should, never that they were fast. The other client's transaction also ends by itself
(idle_in_transaction_session_timeout), so that without the bounds a test fails instead of
hanging."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2 as httpx
import pytest

from agentscript.server.agents import load_agents, serve_agents
from agentscript.server.app import create_app
from agentscript.server.auth import ApiKeys
from agentscript.server.config import ServerConfig
from agentscript.server.standin import StandInModel
from agentscript.store import SessionBusy, StoreError, store_from_url
from agentscript.store import postgres as pg

from .conftest import pg_reset
from .harness import NOTES, new_session
from .test_store import outcome, record, watch_discards

# How long the other client's transaction lasts at most: longer than any test needs it, so
# that it ends first only when the store waits for it unbounded (and the test then fails).
FOREIGN_HOLD = 40.0
# Slack on top of what a bounded wait may take, for a loaded machine.
SLACK = 10.0


@asynccontextmanager
async def row_locked(dsn: str, session_id: str) -> AsyncIterator[None]:
    """Another client holding the session's row in an open transaction."""
    import psycopg

    hold = f"-c idle_in_transaction_session_timeout={round(FOREIGN_HOLD * 1000)}"
    conn = await psycopg.AsyncConnection.connect(dsn, options=hold)
    try:
        cur = await conn.execute(
            "SELECT 1 FROM agentscript_sessions WHERE session_id = %s FOR UPDATE", (session_id,)
        )
        assert await cur.fetchone() is not None
        yield
    finally:
        with contextlib.suppress(psycopg.Error):  # the server may have ended it already
            await conn.rollback()
        await conn.close()


@asynccontextmanager
async def opened(dsn: str, **options: Any) -> AsyncIterator[Any]:
    store = store_from_url(dsn, **options)
    await store.open()
    try:
        yield store
    finally:
        await store.close()


@asynccontextmanager
async def served(dsn: str, config: ServerConfig) -> AsyncIterator[tuple[httpx.AsyncClient, Any]]:
    """The real ASGI app on a PostgreSQL store, with that store (harness.api, store exposed)."""
    agents = load_agents([NOTES])
    store = store_from_url(dsn)
    app = create_app(
        serve_agents(agents, {a.name: StandInModel() for a in agents}),
        store,
        config=config,
        keys=ApiKeys.of(),
        purge_every=None,
    )
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://test", timeout=None
        ) as client,
    ):
        yield client, store


def error_code(response: httpx.Response) -> tuple[int, str]:
    return response.status_code, str(response.json()["error"]["code"])


def test_postgres_store_connections_bound_lock_waits_and_statements(pg_dsn: str) -> None:
    """Both the migration's connection (whose transaction lifted the bounds for itself only)
    and a connection opened later have them."""
    pg_reset(pg_dsn)

    async def main() -> list[Any]:
        async with opened(pg_dsn) as store:
            show = "SELECT current_setting('lock_timeout'), current_setting('statement_timeout')"
            first, second = await asyncio.gather(store._fetch(show), store._fetch(show))
            return [tuple(row) for row in first + second]

    assert asyncio.run(main()) == [("2s", "30s"), ("2s", "30s")]


def test_postgres_turn_on_a_row_locked_by_another_client_is_busy_then_runs(pg_dsn: str) -> None:
    pg_reset(pg_dsn)
    wait = 1.0

    async def main() -> float:
        async with opened(pg_dsn) as store:
            await store.create_session(record())
            closed = watch_discards(store)
            async with row_locked(pg_dsn, "s1"):
                started = time.monotonic()
                with pytest.raises(SessionBusy):
                    async with asyncio.timeout(wait + pg.LOCK_TIMEOUT + SLACK):
                        async with store.lock_session("s1", wait):
                            pass
                waited = time.monotonic() - started
            async with asyncio.timeout(SLACK), store.lock_session("s1", wait) as lock:
                await lock.commit(outcome(1, 1))
            got = await store.get_session("s1")
            assert got is not None and got.turns == 1
            assert closed == []  # every connection went back to the pool
            return waited

    assert asyncio.run(main()) >= wait  # busy only once the turn's wait ran out


def test_postgres_commit_on_a_row_locked_by_another_client_fails_clearly(pg_dsn: str) -> None:
    """A turn whose row gets locked while it runs: its commit fails (503) saying what held it,
    nothing is written, and the next turn runs from the state before it."""
    pg_reset(pg_dsn)

    async def main() -> None:
        async with opened(pg_dsn) as store:
            await store.create_session(record())
            closed = watch_discards(store)
            async with asyncio.timeout(2 * pg.LOCK_TIMEOUT + SLACK):
                async with store.lock_session("s1", 1.0) as lock, row_locked(pg_dsn, "s1"):
                    with pytest.raises(StoreError) as failed:
                        await lock.commit(outcome(1, 1))
            assert "the row of session s1 stayed locked by another client" in str(failed.value)
            async with asyncio.timeout(SLACK), store.lock_session("s1", 1.0) as lock:
                assert lock.session.turns == 0
                await lock.commit(outcome(1, 1))
            assert closed == [] and not store._presence_doubtful

    asyncio.run(main())


def test_postgres_api_turn_and_delete_of_a_row_locked_by_another_client_are_409(
    pg_dsn: str,
) -> None:
    pg_reset(pg_dsn)
    wait = 0.5

    async def main() -> None:
        async with served(pg_dsn, ServerConfig(lock_wait=wait)) as (client, _):
            sid = await new_session(client)
            url = f"/v1/sessions/{sid}"
            async with row_locked(pg_dsn, sid), asyncio.timeout(2 * pg.LOCK_TIMEOUT + SLACK):
                sent = await client.post(f"{url}/messages", json={"text": "hi"})
                assert error_code(sent) == (409, "session_busy")
                deleted = await client.delete(url)
                assert error_code(deleted) == (409, "session_busy")
                assert "locked by another client" in deleted.json()["error"]["message"]
                assert (await client.get(url)).status_code == 200  # still there
            async with asyncio.timeout(SLACK):
                sent = await client.post(f"{url}/messages", json={"text": "hi"})
                assert sent.status_code == 200 and sent.json()["turn"] == 1
                assert (await client.delete(url)).status_code == 204
                assert error_code(await client.get(url)) == (404, "session_not_found")

    asyncio.run(main())


def test_postgres_deletes_of_a_locked_row_do_not_exhaust_the_pool(pg_dsn: str) -> None:
    """More DELETEs of a locked session than the store has connections: each ends with 409
    and gives its connection back, so other sessions' turns still run and no connection of
    the pool is lost."""
    pg_reset(pg_dsn)
    deletes = pg.MAX_CONNECTIONS + 4

    async def main() -> None:
        async with served(pg_dsn, ServerConfig(lock_wait=1.0)) as (client, store):
            locked, other = await new_session(client), await new_session(client)
            opened: list[object] = []
            new = store._new_connection

            async def counting() -> object:
                opened.append(await new())
                return opened[-1]

            store._new_connection = counting
            closed = watch_discards(store)
            kept = len(store._idle)
            cap = 2 * pg.LOCK_TIMEOUT + SLACK  # two rounds of the pool's connections
            async with row_locked(pg_dsn, locked), asyncio.timeout(cap):
                responses = await asyncio.gather(
                    *(client.delete(f"/v1/sessions/{locked}") for _ in range(deletes))
                )
                assert [error_code(r) for r in responses] == [(409, "session_busy")] * deletes
                sent = await client.post(f"/v1/sessions/{other}/messages", json={"text": "hi"})
                assert sent.status_code == 200
            assert closed == [] and len(store._idle) == kept + len(opened)
            assert not store._presence_doubtful
            async with asyncio.timeout(SLACK):
                assert (await client.delete(f"/v1/sessions/{locked}")).status_code == 204

    asyncio.run(main())


def test_postgres_statement_timeout_fails_clearly_and_keeps_the_connection(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pg_reset(pg_dsn)
    monkeypatch.setattr(pg, "STATEMENT_TIMEOUT", 0.5)
    # trust auth ignores the password; the error must not quote it
    dsn = pg_dsn.replace("://postgres@", "://postgres:s3cret@")
    assert dsn != pg_dsn

    async def main() -> None:
        async with opened(dsn) as store:
            await store.create_session(record())
            pids = [c.info.backend_pid for c in store._idle]
            closed = watch_discards(store)
            with pytest.raises(StoreError) as failed:
                async with asyncio.timeout(SLACK):
                    await store._fetch("SELECT pg_sleep(30)")
            message = str(failed.value)
            assert "took longer than 0.5 s (statement_timeout)" in message
            assert "s3cret" not in message and "postgres:***@" in message
            assert closed == [] and not store._presence_doubtful
            assert [c.info.backend_pid for c in store._idle] == pids
            assert await store.get_session("s1") is not None

    asyncio.run(main())


def test_postgres_start_up_waits_for_a_slow_migration_past_the_lock_timeout(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Workers starting while another one migrates wait for it, however long it takes (the
    migration lock is waited for without the lock timeout)."""
    pg_reset(pg_dsn)
    import psycopg

    monkeypatch.setattr(pg, "LOCK_TIMEOUT", 0.2)

    async def start() -> Any:
        store = store_from_url(pg_dsn)
        await store.open()
        return store

    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(pg_dsn, autocommit=True) as migrating:
            await migrating.execute("SELECT pg_advisory_lock(%s)", (pg._MIGRATION_LOCK,))
            starting = [asyncio.ensure_future(start()) for _ in range(2)]
            await asyncio.sleep(5 * pg.LOCK_TIMEOUT)
            assert not any(task.done() for task in starting)  # still waiting, not failed
            await migrating.execute("SELECT pg_advisory_unlock(%s)", (pg._MIGRATION_LOCK,))
            async with asyncio.timeout(SLACK):
                stores = await asyncio.gather(*starting)
        for store in stores:
            await store.create_session(record(f"s{id(store)}"))
            await store.close()

    asyncio.run(main())
