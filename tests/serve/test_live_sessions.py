"""Kept sessions (server/live.py): a turn that skips the restore is the turn a restore would run.

Each conversation runs three ways and must give the same turn results, the same traces (up to
timings and ids) and the same stored session: every turn restored from the store
(``live_sessions=0``), every turn on the kept session (the default), and turns alternating
between two servers on one store, where each finds its kept session stale.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest

from agentscript.mantle.run.prompt import without_moment
from agentscript.models.base import Message, ToolCall
from agentscript.models.function import FunctionInfo, FunctionModel
from agentscript.server.agents import load_agents, serve_agents
from agentscript.server.config import ServerConfig
from agentscript.server.live import LiveSessions
from agentscript.store import SessionRecord, StoreError, store_from_url
from agentscript.trace_inputs import rebuild_messages

from .harness import CARD_BANK, NOTES, api

SEED = Path(__file__).parents[2] / "examples" / "order_status" / "order_status.agent"
ORDERS = """
def get_delivery_date(order_ID: str) -> dict[str, object]:
    return {"delivery_date": "2026-11-30"}

def check_if_late(order_ID: str, delivery_date: str) -> dict[str, object]:
    return {"is_late": delivery_date < "2026-12-01"}
"""


def answer(messages: list[Message], info: FunctionInfo) -> str | ToolCall:
    """``call TOOL {json}`` from the user calls that tool when offered; anything else is text."""
    last = messages[-1] if messages else None
    if last is not None and last.role == "user" and last.content.startswith("call "):
        name, _, args = last.content[5:].partition(" ")
        if name in info.tool_names:  # an id of its own: two servers have two models
            return ToolCall(f"call_{len(messages)}", name, json.loads(args or "{}"))
    if last is not None and last.role == "tool":
        return f"done: {last.content[:40]}"
    return f"ok: {last.content if last else ''}"


NOTES_TURNS = [
    "hello",
    'call note {"text": "milk"}',
    'call note {"text": "eggs"}',
    "what did I save?",
    'call note {"text": "bread"}',
]
ORDER_TURNS = [
    "call go_to_orders {}",
    'call get_delivery_date {"order_ID": "1234"}',
    "thanks",
    'call check_if_late {"order_ID": "1234", "delivery_date": "2026-12-01"}',
]
BANK_TURNS = [
    "hi",
    'call activate_skill {"skill": "authenticate"}',
    "my name is Ada",
    "call cannot_help {}",
    "bye",
]
CONVERSATIONS = [("Notes", NOTES, NOTES_TURNS), ("card-bank", CARD_BANK, BANK_TURNS)]


@asynccontextmanager
async def server(
    store_url: str, path: str, live: int, received: list[Any] | None = None
) -> AsyncIterator[httpx.AsyncClient]:
    """A server of the agent at ``path``; ``received`` gets the messages of every model call."""

    def witnessed(messages: list[Message], info: FunctionInfo) -> str | ToolCall:
        if received is not None:
            received.append([m.to_json() for m in messages])
        return answer(messages, info)

    config = ServerConfig(rate_limit=0, live_sessions=live)
    async with api(
        store_url, paths=(path,), config=config, model=lambda: FunctionModel(witnessed)
    ) as client:
        yield client


def live_of(client: httpx.AsyncClient) -> LiveSessions:
    live: LiveSessions = client._transport.app.state.service.live  # type: ignore[attr-defined]
    return live


def comparable(data: Any, session_id: str) -> Any:
    """``data`` without what differs between two runs of one conversation: timings, ids."""
    if isinstance(data, dict):
        return {
            key: comparable(value, session_id)
            for key, value in data.items()
            if not key.endswith(("Ms", "_ms", "_at")) and key not in ("sessionId", "planId")
        }
    if isinstance(data, list):
        return [comparable(item, session_id) for item in data]
    if isinstance(data, str):
        # A Mantle system prompt states the minute it was built; runs may straddle a minute.
        return without_moment(data.replace(session_id, "<session>"))
    return data


async def converse(
    clients: list[httpx.AsyncClient] | Callable[[], AbstractAsyncContextManager[Any]],
    agent: str,
    turns: list[str],
    received: list[Any],
) -> list[Any]:
    """Create a session, send ``turns`` (client by client in turn, or each on a server of its
    own that ``clients()`` starts and stops: a restart before every turn), and return
    everything the API says about it: each turn, each trace, the session and its turn list.
    The stored traces rebuild the messages the model was sent (``received``), and each one
    after the first records only the messages added since the previous model call."""

    @asynccontextmanager
    async def client_for(number: int) -> AsyncIterator[httpx.AsyncClient]:
        if callable(clients):
            async with clients() as started:
                yield started
        else:
            yield clients[max(number - 1, 0) % len(clients)]

    async with client_for(0) as client:
        created = await client.post(f"/v1/agents/{agent}/sessions", json={"variables": {}})
    assert created.status_code == 201, created.text
    sid = created.json()["session_id"]
    seen: list[Any] = [created.json()["messages"]]
    traces: list[Any] = []
    for number, text in enumerate(turns, start=1):
        async with client_for(number) as client:
            reply = await client.post(f"/v1/sessions/{sid}/messages", json={"text": text})
            assert reply.status_code == 200, reply.text
            trace = (await client.get(f"/v1/sessions/{sid}/turns/{number}/trace")).json()
        traces.append(trace)
        seen += [reply.json(), trace]
    async with client_for(0) as client:
        seen.append((await client.get(f"/v1/sessions/{sid}")).json())
        seen.append((await client.get(f"/v1/sessions/{sid}/turns")).json())
    assert rebuild_messages(traces) == received
    firsts = [first_llm_input(trace) for trace in traces]
    assert firsts[0] is not None and firsts[0]["messagesFrom"] == 0
    for given in firsts[1:]:
        if given is not None:  # a turn without a model call has none
            assert given["messagesFrom"] > 0 and len(given["messages"]) <= 5, given
    return comparable(seen, sid)


def first_llm_input(trace: dict[str, Any]) -> dict[str, Any] | None:
    """The input of the turn's first LLM_STEP."""
    steps = trace["planTrace"]["steps"]
    return next((s["input"] for s in steps if s["type"] == "LLM_STEP"), None)


def run_three_ways(store_url: str, agent: str, path: str, turns: list[str]) -> None:
    """... and a fourth: a server restarted before every turn."""

    async def main() -> None:
        received: list[Any] = []
        async with server(store_url, path, live=0, received=received) as restoring:
            restored = await converse([restoring], agent, turns, received)
            assert live_of(restoring).hits == 0
        received.clear()
        restarted = await converse(
            lambda: server(store_url, path, live=1000, received=received),
            agent,
            turns,
            received,
        )
        assert restarted == restored
        received.clear()
        async with server(store_url, path, live=1000, received=received) as keeping:
            kept = await converse([keeping], agent, turns, received)
            assert live_of(keeping).hits == len(turns) and live_of(keeping).misses == 0
            metrics = (await keeping.get("/metrics")).text
            assert f'agentscript_session_loads_total{{source="kept"}} {len(turns)}' in metrics
            assert 'agentscript_session_loads_total{source="restored"} 0' in metrics
            assert "agentscript_kept_sessions 1" in metrics
        received.clear()
        async with AsyncExitStack() as stack:
            one = await stack.enter_async_context(server(store_url, path, 1000, received))
            two = await stack.enter_async_context(server(store_url, path, 1000, received))
            alternating = await converse([one, two], agent, turns, received)
            # Each server's kept session is one turn behind the store every time but the first.
            assert live_of(one).hits + live_of(two).hits == 1
        assert kept == restored
        assert alternating == restored

    asyncio.run(main())


@pytest.mark.parametrize(("agent", "path", "turns"), CONVERSATIONS, ids=["agentscript", "mantle"])
def test_kept_session_runs_the_turn_a_restore_would(
    api_store: str, agent: str, path: str, turns: list[str]
) -> None:
    run_three_ways(api_store, agent, path, turns)


def test_kept_session_with_transitions_and_actions(tmp_path: Path) -> None:
    text = SEED.read_text()
    for name, function in (
        ("Get_Delivery_Date", "get_delivery_date"),
        ("Check_If_Late", "check_if_late"),
    ):
        text = text.replace(f"flow://{name}", f"python://orders:{function}")
    (tmp_path / "orders.py").write_text(ORDERS)
    (tmp_path / "order_status.agent").write_text(text)
    agent = str(tmp_path / "order_status.agent")
    run_three_ways(f"sqlite:///{tmp_path}/s.db", "Order_Status", agent, ORDER_TURNS)


def test_turn_whose_commit_failed_leaves_no_kept_session(tmp_path: Path) -> None:
    """The session object ran the failed turn; the next turn must not see any of it."""

    async def main() -> None:
        async with server(f"sqlite:///{tmp_path}/s.db", NOTES, live=1000) as client:
            sid = (await client.post("/v1/agents/Notes/sessions", json={})).json()["session_id"]
            ok = await client.post(f"/v1/sessions/{sid}/messages", json={"text": "first"})
            assert ok.json()["turn"] == 1
            store = client._transport.app.state.service.store  # type: ignore[attr-defined]
            real = store.lock_session

            @asynccontextmanager
            async def failing(
                session_id: str, wait: float, *, kept: str | None = None
            ) -> AsyncIterator[Any]:
                async with real(session_id, wait, kept=kept) as lock:

                    class Refusing:
                        session = lock.session

                        async def commit(self, outcome: Any) -> None:
                            raise StoreError("the disk is full")

                    yield Refusing()

            store.lock_session = failing
            lost = await client.post(
                f"/v1/sessions/{sid}/messages", json={"text": 'call note {"text": "lost"}'}
            )
            assert lost.status_code == 503
            store.lock_session = real
            assert len(live_of(client)) == 0
            again = await client.post(f"/v1/sessions/{sid}/messages", json={"text": "second"})
            assert again.json()["turn"] == 2 and again.json()["variables"]["count"] == 0
            # The lost turn's trace is not stored, and turn 2's step goes on from turn 1's.
            traces = [
                (await client.get(f"/v1/sessions/{sid}/turns/{n}/trace")).json() for n in (1, 2)
            ]
            llm = next(s for s in traces[1]["planTrace"]["steps"] if s["type"] == "LLM_STEP")
            assert llm["input"]["messagesFrom"] == 1
            sent = [m["content"] for m in rebuild_messages(traces)[-1]]
            assert sent == ["first", "ok: first", "second"], sent

    asyncio.run(main())


def test_deleted_session_is_not_kept(tmp_path: Path) -> None:
    async def main() -> None:
        async with server(f"sqlite:///{tmp_path}/s.db", NOTES, live=1000) as client:
            sid = (await client.post("/v1/agents/Notes/sessions", json={})).json()["session_id"]
            assert len(live_of(client)) == 1
            assert (await client.delete(f"/v1/sessions/{sid}")).status_code == 204
            assert len(live_of(client)) == 0

    asyncio.run(main())


@pytest.mark.parametrize("threshold", [0, None], ids=["large", "usual"])
def test_a_large_stored_state_is_restored_off_the_event_loop(
    api_store: str, threshold: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A state of ``RESTORE_IN_THREAD_CHARS`` or more restores in a thread, for a turn and for
    ``GET``: on the event loop, its checks would stall every other session of the worker."""
    from agentscript.server import service as service_module

    if threshold is not None:
        monkeypatch.setattr(service_module, "RESTORE_IN_THREAD_CHARS", threshold)
    restored_on: list[int] = []
    restore = service_module.SessionService._restore

    def watched(self: Any, record: SessionRecord, *, checking: bool = False) -> Any:
        restored_on.append(threading.get_ident())
        return restore(self, record, checking=checking)

    monkeypatch.setattr(service_module.SessionService, "_restore", watched)

    async def main() -> None:
        loop_thread = threading.get_ident()
        async with server(api_store, NOTES, live=0) as client:
            sid = (await client.post("/v1/agents/Notes/sessions", json={})).json()["session_id"]
            for text in ["first", 'call note {"text": "milk"}']:
                reply = await client.post(f"/v1/sessions/{sid}/messages", json={"text": text})
                assert reply.status_code == 200, reply.text
            shown = await client.get(f"/v1/sessions/{sid}")
            assert shown.status_code == 200, shown.text
            assert shown.json()["turns"] == 2
            assert len(restored_on) == 3  # two turns and the GET
            if threshold is None:
                assert set(restored_on) == {loop_thread}
            else:
                assert loop_thread not in restored_on

    asyncio.run(main())


# The database as a lost commit leaves it: the session row as it was one turn earlier, its
# revision included, and that turn's row gone (synchronous_commit = off and a crash, a failover
# to an asynchronous replica, a restored backup).
SAVED_ROW = (
    "SELECT state, revision, turns, updated_at, expires_at FROM agentscript_sessions "
    "WHERE session_id = ?"
)
REWIND_ROW = (
    "UPDATE agentscript_sessions SET state = ?, revision = ?, turns = ?, updated_at = ?, "
    "expires_at = ? WHERE session_id = ?"
)
LOSE_TURN = "DELETE FROM agentscript_turns WHERE session_id = ? AND turn = ?"


def sql(url: str, statement: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
    """``statement`` on the SQL store at ``url``, on a connection of its own, committed."""
    if url.startswith("sqlite:///"):
        with contextlib.closing(sqlite3.connect(url[len("sqlite:///") :])) as db, db:
            return db.execute(statement, params).fetchall()
    import psycopg

    with psycopg.connect(url) as conn:
        cursor = conn.execute(statement.replace("?", "%s"), params)  # type: ignore[arg-type]
        return cursor.fetchall() if cursor.description else []


def test_kept_session_of_a_commit_the_database_lost_is_not_resumed(api_store: str) -> None:
    """Worker one's turn 2 is lost and worker two commits another turn 2: worker one's kept
    session has the stored turn count, but not the stored revision, so its turn 3 restores
    worker two's turn 2 instead of writing its own lost turn back over it."""

    async def main() -> None:
        async with AsyncExitStack() as stack:
            one = await stack.enter_async_context(server(api_store, NOTES, live=1000))
            two = await stack.enter_async_context(server(api_store, NOTES, live=1000))
            sid = (await one.post("/v1/agents/Notes/sessions", json={})).json()["session_id"]
            url = f"/v1/sessions/{sid}/messages"
            await one.post(url, json={"text": 'call note {"text": "one"}'})
            saved = sql(api_store, SAVED_ROW, (sid,))[0]
            lost = await one.post(url, json={"text": 'call note {"text": "LOST"}'})
            assert lost.json()["variables"]["last_note"] == "LOST"
            sql(api_store, REWIND_ROW, (*saved, sid))
            sql(api_store, LOSE_TURN, (sid, 2))
            retried = await two.post(url, json={"text": 'call note {"text": "two"}'})
            assert retried.json()["turn"] == 2
            third = await one.post(url, json={"text": "hello"})
            assert third.json()["turn"] == 3, third.text
            assert third.json()["variables"]["last_note"] == "two"
            assert (live_of(one).hits, live_of(one).misses) == (2, 1)
            trace = (await one.get(f"/v1/sessions/{sid}/turns/3/trace")).json()
            llm = next(s for s in trace["planTrace"]["steps"] if s["type"] == "LLM_STEP")
            sent = " ".join(str(m["content"]) for m in llm["input"]["messages"])
            assert "two" in sent and "LOST" not in sent, sent
        stored = sql(
            api_store, "SELECT state FROM agentscript_sessions WHERE session_id = ?", (sid,)
        )
        assert "LOST" not in stored[0][0]

    asyncio.run(main())


def test_kept_session_turn_never_parses_the_stored_state(
    api_store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A turn that runs the kept session reads the row's turn count, version and revision, not
    its state: at the history limit, parsing it took tens of milliseconds of every turn."""
    parsed: list[str] = []
    loads = json.loads

    def counted(text: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(text, (str, bytes)) and b"agentscript-session/" in (
            text if isinstance(text, bytes) else text.encode()
        ):
            parsed.append("state")
        return loads(text, *args, **kwargs)

    async def main() -> None:
        async with server(api_store, NOTES, live=1000) as client:
            sid = (await client.post("/v1/agents/Notes/sessions", json={})).json()["session_id"]
            monkeypatch.setattr(json, "loads", counted)
            for text in ["hello", 'call note {"text": "milk"}', "and again"]:
                reply = await client.post(f"/v1/sessions/{sid}/messages", json={"text": text})
                assert reply.status_code == 200, reply.text
            monkeypatch.setattr(json, "loads", loads)
            service = client._transport.app.state.service  # type: ignore[attr-defined]
            assert service.metrics.session_loads == {"kept": 3}
            assert parsed == []
            shown = await client.get(f"/v1/sessions/{sid}")  # shows the state: parses it
            assert shown.json()["variables"]["last_note"] == "milk"

    asyncio.run(main())


STATE_WRITTEN = (
    "UPDATE agentscript_sessions SET state = (SELECT state FROM agentscript_sessions "
    "WHERE session_id = ?) WHERE session_id = ?"
)


def test_a_state_written_by_hand_is_restored_not_taken_for_the_kept_session(
    api_store: str,
) -> None:
    """An UPDATE of the state that does not write a new revision clears the row's revision (a
    trigger of the schema): the next turn restores what the row holds, even one byte for byte
    the same, rather than trust a kept session to be the state an operator wrote."""

    async def main() -> None:
        async with server(api_store, NOTES, live=1000) as client:
            sid = (await client.post("/v1/agents/Notes/sessions", json={})).json()["session_id"]
            url = f"/v1/sessions/{sid}/messages"
            await client.post(url, json={"text": 'call note {"text": "one"}'})
            revision = sql(api_store, REVISION, (sid,))[0][0]
            assert revision
            state = json.loads(sql(api_store, "SELECT state FROM agentscript_sessions", ())[0][0])
            state["variables"]["last_note"] = "by hand"
            sql(api_store, "UPDATE agentscript_sessions SET state = ?", (json.dumps(state),))
            assert sql(api_store, REVISION, (sid,)) == [(None,)]
            second = await client.post(url, json={"text": "hello"})
            assert second.json()["variables"]["last_note"] == "by hand"
            assert sql(api_store, REVISION, (sid,))[0][0] not in (None, revision)
            sql(api_store, STATE_WRITTEN, (sid, sid))  # the same bytes written again
            third = await client.post(url, json={"text": "hello"})
            assert third.json()["turn"] == 3, third.text
            service = client._transport.app.state.service  # type: ignore[attr-defined]
            assert service.metrics.session_loads == {"kept": 1, "restored": 2}

    asyncio.run(main())


REVISION = "SELECT revision FROM agentscript_sessions WHERE session_id = ?"
# Schema version 4's session columns: a row as an agentscript before revisions wrote it.
OLD_ROW = (
    "INSERT INTO agentscript_sessions (session_id, agent, owner, agent_version, format, state, "
    "turns, ended, escalated, created_at, updated_at, expires_at) "
    "VALUES (?, ?, '', ?, 'agentscript-store/1', ?, 0, 0, 0, 0, 0, NULL)"
)


def test_a_store_written_before_revisions_runs_its_sessions_restored_once_then_kept(
    api_store: str,
) -> None:
    """Schema version 5 adds the revision column: a session an older agentscript wrote has
    none, which matches no kept session, so its first turn here restores it and the next
    ones run the kept session its commit wrote a revision for."""
    from agentscript.store import schema

    sid = "0123456789abcdef0123456789abcdef"
    served = serve_agents(load_agents([NOTES]), {"Notes": FunctionModel(answer)})["Notes"]
    state = json.dumps(served.agent.session(model=served.model, session_id=sid).to_json())

    async def at_version_4() -> None:
        store = store_from_url(api_store)
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:4])
            await store.open()
        await store.close()

    asyncio.run(at_version_4())
    sql(api_store, OLD_ROW, (sid, "Notes", served.version, state))
    assert sql(api_store, "SELECT value FROM agentscript_meta", ()) == [("4",)]

    async def main() -> None:
        async with server(api_store, NOTES, live=1000) as client:
            url = f"/v1/sessions/{sid}/messages"
            assert sql(api_store, REVISION, (sid,)) == [(None,)]
            for number, text in enumerate(["hello", 'call note {"text": "milk"}', "bye"], 1):
                reply = await client.post(url, json={"text": text})
                assert reply.json()["turn"] == number, reply.text
            assert reply.json()["variables"]["last_note"] == "milk"
            service = client._transport.app.state.service  # type: ignore[attr-defined]
            assert service.metrics.session_loads == {"restored": 1, "kept": 2}
        assert sql(api_store, "SELECT value FROM agentscript_meta", ()) == [
            (str(len(schema.MIGRATIONS)),)
        ]
        assert sql(api_store, REVISION, (sid,))[0][0]

    asyncio.run(main())


def record(
    session_id: str, turns: int, version: str = "v1", revision: str | None = "r1"
) -> SessionRecord:
    return SessionRecord(session_id, "A", "owner", version, STATE, turns=turns, revision=revision)


STATE: dict[str, Any] = {"variables": {"note": "one"}}


class FakeSession:
    def __init__(self, chars: int = 100) -> None:
        self.resumed = 0
        self.chars = chars

    def resume(self) -> None:
        self.resumed += 1

    def history_chars(self) -> int:
        return self.chars


def test_live_sessions_match_turn_count_version_and_revision_and_forget_the_oldest() -> None:
    live = LiveSessions(2)
    a, b, c = FakeSession(), FakeSession(), FakeSession()
    live.keep("a", 3, "v1", a, "r1")  # type: ignore[arg-type]
    assert live.take(record("a", 4)) is None  # another worker ran turn 4
    live.keep("a", 3, "v1", a, "r1")  # type: ignore[arg-type]
    assert live.take(record("a", 3, "v2")) is None  # another version of the agent
    live.keep("a", 3, "v1", a, "r1")  # type: ignore[arg-type]
    # The database lost our turn 3 and another worker committed its own turn 3.
    assert live.take(record("a", 3, revision="r2")) is None
    live.keep("a", 3, "v1", a, "r1")  # type: ignore[arg-type]
    # A row written before revisions, or whose state was written by hand since.
    assert live.take(record("a", 3, revision=None)) is None
    live.keep("a", 3, "v1", a, "r1")  # type: ignore[arg-type]
    assert live.take(record("a", 3)) is a
    assert a.resumed == 1
    assert live.take(record("a", 3)) is None  # taken: out until kept again
    live.keep("a", 4, "v1", a, "r1")  # type: ignore[arg-type]
    live.keep("b", 1, "v1", b, "r1")  # type: ignore[arg-type]
    live.keep("a", 5, "v1", a, "r1")  # a is now the most recent
    live.keep("c", 1, "v1", c, "r1")  # type: ignore[arg-type]
    assert len(live) == 2 and live.take(record("b", 1)) is None
    assert (live.hits, live.misses) == (1, 6)
    nothing = LiveSessions(0)
    nothing.keep("a", 1, "v1", a, "r1")  # type: ignore[arg-type]
    assert len(nothing) == 0


def test_live_sessions_keep_at_most_their_budget_of_history_the_oldest_dropped_first() -> None:
    live = LiveSessions(100, max_chars=1000)
    small, big, huge = FakeSession(300), FakeSession(600), FakeSession(5000)
    live.keep("small", 1, "v1", small, "r1")  # type: ignore[arg-type]
    live.keep("big", 1, "v1", big, "r1")  # type: ignore[arg-type]
    assert (len(live), live.chars) == (2, 900)
    big.chars = 750  # its next turn grew it: kept again, counted again, not twice
    live.keep("big", 2, "v1", big, "r1")  # type: ignore[arg-type]
    assert (len(live), live.chars) == (1, 750)  # small, the oldest, made room
    assert live.take(record("big", 2)) is big and live.chars == 0
    live.keep("huge", 1, "v1", huge, "r1")  # type: ignore[arg-type]
    assert (len(live), live.chars) == (0, 0)  # alone past the budget: restored next time


def test_a_sessions_history_size_is_what_the_history_limit_counts() -> None:
    from agentscript import load
    from agentscript.engine.history import message_chars

    session = load(NOTES).session(model=FunctionModel(answer))
    assert session.history_chars() == 0
    session.send("hello")
    session.send("and again")
    assert session.history_chars() == sum(message_chars(m) for m in session.state.history) > 0
