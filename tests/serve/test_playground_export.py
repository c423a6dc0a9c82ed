"""The playground's exports read a session's turns in one store call, the same on every
backend (memory, SQLite, PostgreSQL), and refuse a session past their bound before reading.

PostgreSQL: the database of this run (``pg_dsn``, conftest.py), emptied for each case; without a
server those cases are skipped (failed under ``CI=true``).
"""

from __future__ import annotations

import asyncio
import io
import zipfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx2 as httpx
import pytest
from tests.playground.harness import CARD_BANK, options, say, session
from tests.serve.harness import run_store

from agentscript.server.command import build_app
from agentscript.server.playground import export, routes
from agentscript.store import (
    SessionRecord,
    Store,
    TurnOutcome,
    TurnRecord,
)

CARD_VARS = {
    "project.authenticated": True,
    "project.customer_id": "1001",
    "project.customer_name": "Ada",
}
MOVES = [
    '/activate_skill {"skill": "card_replace"}',
    '/set_fields {"reason": "lost"}',
    '/activate_skill {"skill": "check_balance"}',
    "/get_balance",
]
# Store methods that read turns: an export should make one such call, whatever the turns.
TURN_READS = {"get_turn", "list_turns", "find_turn", "list_turns_with_traces"}


class StoreSpy:
    """Stands in for the server's store and names each method called on it."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        found = getattr(self.store, name)
        if callable(found):
            self.calls.append(name)
        return found


@asynccontextmanager
async def spied_client(store: str) -> AsyncIterator[tuple[httpx.AsyncClient, StoreSpy]]:
    app, _lines = build_app(options(CARD_BANK, store=store))
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8000"
        ) as c,
    ):
        spy = StoreSpy(app.state.service.store)
        app.state.service.store = spy
        yield c, spy


def entries(data: bytes) -> dict[str, bytes]:
    """A zip's files by name (the zip's own bytes hold the time it was written)."""
    archive = zipfile.ZipFile(io.BytesIO(data))
    return {name: archive.read(name) for name in archive.namelist()}


async def turn_by_turn(store: Store, sid: str, count: int) -> list[TurnRecord]:
    """The turns as the exports read them before: one query per turn."""
    found = [await store.get_turn(sid, n) for n in range(1, count + 1)]
    return [t for t in found if t is not None]


def test_exports_read_every_turn_in_one_store_call_and_are_unchanged(store_url: str) -> None:
    async def scenario() -> None:
        async with spied_client(store_url) as (c, spy):
            sid = await session(c, "card-bank", variables=CARD_VARS)
            for text in MOVES:
                await say(c, sid, text)
            spy.calls.clear()
            saved = await c.get(f"/playground/api/sessions/{sid}/conversation.yaml")
            yaml_calls, spy.calls = spy.calls, []
            zipped = await c.get(f"/playground/api/sessions/{sid}/traces.zip")
            zip_calls = spy.calls
            before = await turn_by_turn(spy.store, sid, len(MOVES))

        assert saved.status_code == 200 and zipped.status_code == 200
        for calls in (yaml_calls, zip_calls):
            assert [c for c in calls if c in TURN_READS] == ["list_turns_with_traces"]
            # The session's summary only: an export needs no state (4 MB at the history limit).
            assert calls == ["get_session_summary", "list_turns_with_traces"]
        assert len(before) == len(MOVES) and all(t.trace for t in before)
        assert saved.text == export.conversation_yaml("card-bank", CARD_VARS, before)
        assert entries(zipped.content) == entries(export.traces_zip("card-bank", sid, before))
        assert len(entries(zipped.content)) == len(MOVES)

    asyncio.run(scenario())


def test_exports_refuse_a_session_past_their_bound_before_reading_its_turns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(routes, "MAX_EXPORT_TURNS", 2)

    async def scenario() -> None:
        async with spied_client("memory://") as (c, spy):
            sid = await session(c, "card-bank", variables=CARD_VARS)
            await say(c, sid, MOVES[0])
            await say(c, sid, MOVES[1])
            assert (await c.get(f"/playground/api/sessions/{sid}/traces.zip")).status_code == 200
            await say(c, sid, MOVES[2])
            spy.calls.clear()
            for name in ("traces.zip", "conversation.yaml"):
                refused = await c.get(f"/playground/api/sessions/{sid}/{name}")
                assert refused.status_code == 422, refused.text
                error = refused.json()["error"]
                assert error["code"] == "export_too_large"
                assert "3 turns" in error["message"] and "at most 2" in error["message"]
            assert not [c for c in spy.calls if c in TURN_READS]

    asyncio.run(scenario())


def record(sid: str) -> SessionRecord:
    return SessionRecord(sid, "A", "k1", "v1", {"format": "x", "n": 0})


def turn(sid: str, number: int) -> TurnOutcome:
    return TurnOutcome(
        state={"format": "x", "n": number},
        record=TurnRecord(sid, number, {"turn": number}, {"steps": [sid, number]}),
        ended=False,
        escalated=False,
        expires_at=None,
    )


def test_store_lists_turns_with_their_traces_in_order_up_to_the_limit(store_url: str) -> None:
    async def body(store: Store) -> None:
        for sid, count in (("s1", 3), ("s2", 1)):
            await store.create_session(record(sid))
            for number in range(1, count + 1):
                async with store.lock_session(sid, 1.0) as lock:
                    await lock.commit(turn(sid, number))
        whole = await store.list_turns_with_traces("s1", 10)
        assert whole == await turn_by_turn(store, "s1", 3)
        assert [(t.turn, t.trace) for t in whole] == [(n, {"steps": ["s1", n]}) for n in (1, 2, 3)]
        assert [t.turn for t in await store.list_turns_with_traces("s1", 2)] == [1, 2]
        assert await store.list_turns_with_traces("s1", 0) == []
        assert [t.trace for t in await store.list_turns_with_traces("s2", 10)] == [
            {"steps": ["s2", 1]}
        ]
        assert await store.list_turns_with_traces("nobody", 10) == []
        await store.delete_session("s1")
        assert await store.list_turns_with_traces("s1", 10) == []

    run_store(store_url, body)
