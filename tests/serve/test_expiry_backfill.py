"""--session-ttl on a store written without one: the expiry backfill (``Store.backfill_expiry``)
runs in the background once the server is ready, never before. On a large store it can take
longer than the supervisor's start timeout, which then killed every worker as not started.
test_lifetime_ready_bounds.py checks that the sessions it reaches expire."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx2 as httpx
import pytest

from agentscript.server.agents import load_agents, serve_agents
from agentscript.server.app import create_app
from agentscript.server.auth import ApiKeys
from agentscript.server.config import ServerConfig
from agentscript.server.standin import StandInModel
from agentscript.store.base import StoreError
from agentscript.store.memory import MemoryStore

from .harness import NOTES, new_session

TTL = 50.0
# Only against a hang: before the fix, the start waited for a backfill that waited for the
# test, which runs once the start is over.
HANG_GUARD = 20.0


class HeldBackfill(MemoryStore):
    """A memory store whose backfill goes on until ``release`` is set, as a large one would."""

    def __init__(self) -> None:
        super().__init__()
        self.release = asyncio.Event()
        self.backfilled: int | None = None

    async def backfill_expiry(self, ttl: float) -> int:
        await asyncio.wait_for(self.release.wait(), HANG_GUARD)
        self.backfilled = await super().backfill_expiry(ttl)
        return self.backfilled


class FailedBackfill(MemoryStore):
    async def backfill_expiry(self, ttl: float) -> int:
        raise StoreError("SQLite store: database is locked")


@asynccontextmanager
async def served(
    store: MemoryStore, config: ServerConfig | None = None
) -> AsyncIterator[httpx.AsyncClient]:
    agents = load_agents([NOTES])
    served = serve_agents(agents, {a.name: StandInModel() for a in agents})
    app = create_app(served, store, config=config, keys=ApiKeys.of(), purge_every=None)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client,
    ):
        yield client


def test_the_server_is_ready_and_serves_while_the_expiry_backfill_runs() -> None:
    async def main() -> None:
        store = HeldBackfill()
        async with served(store) as client:  # no TTL: a session without an expiry
            untimed = await new_session(client)
        async with served(store, ServerConfig(session_ttl=TTL)) as client:
            assert (await client.get("/readyz")).status_code == 200
            sid = await new_session(client)
            sent = await client.post(f"/v1/sessions/{sid}/messages", json={"text": "hello"})
            assert sent.status_code == 200, sent.text
            # Not reached yet: no expiry, so it does not expire meanwhile.
            assert (await client.get(f"/v1/sessions/{untimed}")).json()["expires_at"] is None
            assert store.backfilled is None
            store.release.set()
            await client._transport.app.state.expiry_backfill  # type: ignore[attr-defined]
            assert store.backfilled == 1  # the other session got its expiry when written
            view = (await client.get(f"/v1/sessions/{untimed}")).json()
            assert view["expires_at"] == pytest.approx(view["updated_at"] + TTL)

    asyncio.run(main())


def test_a_failed_expiry_backfill_is_one_line_and_the_server_serves(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> None:
        async with served(FailedBackfill(), ServerConfig(session_ttl=TTL)) as client:
            await client._transport.app.state.expiry_backfill  # type: ignore[attr-defined]
            assert (await client.get("/readyz")).status_code == 200
            sid = await new_session(client)
            sent = await client.post(f"/v1/sessions/{sid}/messages", json={"text": "hello"})
            assert sent.status_code == 200, sent.text

    with caplog.at_level(logging.ERROR, logger="agentscript.server"):
        asyncio.run(main())
    (line,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert line.startswith("expiry backfill stopped") and "database is locked" in line
    assert "\n" not in line


def test_a_stop_before_the_expiry_backfill_ends_cancels_it() -> None:
    async def main() -> asyncio.Task[None]:
        async with served(HeldBackfill(), ServerConfig(session_ttl=TTL)) as client:
            backfill: asyncio.Task[None] = client._transport.app.state.expiry_backfill  # type: ignore[attr-defined]
            await client.get("/readyz")  # the backfill has begun, held
        await asyncio.sleep(0)  # the cancellation reaches it
        return backfill

    assert asyncio.run(main()).cancelled()
