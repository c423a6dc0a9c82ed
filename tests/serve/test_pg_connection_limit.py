"""At a connection limit (a role's CONNECTION LIMIT here; the database's and the server's
max_connections refuse alike, SQLSTATE 53300), a worker that lost its presence takes it again
by closing an idle connection of its pool: its idle connections kept the presence out, and every
turn and /readyz answered 503 for as long as the limit lasted, while reads worked on them."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from .conftest import _admin_connect, limited_role_database
from .test_pg_row_locks import opened
from .test_store import outcome, record

# The store's pool (2) and its presence (1): the role has no room for one more.
LIMIT = 3


@pytest.fixture
def limited_dsn(pg_dsn: str) -> Iterator[str]:
    """A database owned by a role of its own that may hold LIMIT connections (a superuser has
    no such limit), dropped afterwards."""
    with limited_role_database("agentscript_limited", LIMIT) as url:
        yield url


def test_a_lost_presence_is_taken_again_at_the_roles_connection_limit(limited_dsn: str) -> None:
    async def main() -> None:
        async with opened(limited_dsn, max_connections=2) as store:
            await store.create_session(record())
            await asyncio.gather(*(store._fetch("SELECT pg_sleep(0.2)") for _ in range(2)))
            assert len(store._idle) == 2  # with the presence, the role's limit
            before = await store.worker()
            admin: Any = _admin_connect()
            try:
                admin.execute(
                    "SELECT pg_terminate_backend(%s)", (store._presence.info.backend_pid,)
                )
            finally:
                admin.close()
            for _ in range(500):  # until the terminated presence's backend has exited
                if _readable(store._presence):
                    break
                await asyncio.sleep(0.01)
            # Another client of the role takes the room the presence left.
            async with await _connected(limited_dsn):
                async with asyncio.timeout(20):
                    assert await store.worker() != before
                    async with store.lock_session("s1", 1.0) as lock:
                        await lock.commit(outcome(1, 1))
                assert len(store._idle) == 1  # one made room for the presence
            got = await store.get_session("s1")
            assert got is not None and got.turns == 1

    asyncio.run(main())


async def _connected(dsn: str) -> Any:
    """A connection of the role, once the limit has room for it (a backend just terminated
    counts until it has exited)."""
    import psycopg

    for _ in range(200):
        try:
            return await psycopg.AsyncConnection.connect(dsn)
        except psycopg.OperationalError:
            await asyncio.sleep(0.02)
    return await psycopg.AsyncConnection.connect(dsn)


def _readable(conn: Any) -> bool:
    import select

    poller = select.poll()
    poller.register(conn.fileno(), select.POLLIN)
    return bool(poller.poll(0))
