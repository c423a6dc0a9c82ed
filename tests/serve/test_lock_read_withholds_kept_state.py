"""A turn's lock read leaves out the state its worker keeps (server/live.py): the row's state is
not read when the row still has the revision of the session kept, since that session runs
instead (4 MB at the history limit: 5-6 ms of the event loop on SQLite, 3 ms and more on
PostgreSQL). A state left out is never run on: a turn whose kept session left meanwhile reads
it under the lock."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from agentscript.server.config import ServerConfig
from agentscript.server.live import LiveSessions
from agentscript.store import (
    SessionGone,
    SessionRecord,
    Store,
    TurnOutcome,
    TurnRecord,
    base,
    new_revision,
    store_from_url,
)

from .conftest import pg_reset
from .harness import api, execute, new_session
from .harness import run_store as run

STATE = {"format": "x", "n": 0, "words": "lorem ipsum " * 50}


def created(revision: str | None) -> SessionRecord:
    return SessionRecord("s1", "A", "k1", "v1", dict(STATE), revision=revision)


def outcome(turn: int, n: int) -> TurnOutcome:
    return TurnOutcome(
        state={"format": "x", "n": n},
        record=TurnRecord("s1", turn, {"turn": turn}, {"steps": [n]}),
        ended=False,
        escalated=False,
        expires_at=None,
    )


def test_a_lock_read_with_the_kept_revision_reads_no_state(
    store_url: str, states_read: list[Any]
) -> None:
    revision = new_revision()

    async def body(store: Store) -> None:
        await store.create_session(created(revision))
        async with store.lock_session("s1", 1.0, kept=revision) as lock:
            got = lock.session
            assert got.withheld and got.revision == revision
            assert (got.owner, got.turns, got.agent_version) == ("k1", 0, "v1")
            with pytest.raises(base.StateWithheld):
                _ = got.state
            with pytest.raises(base.StateWithheld):  # nor is it taken for undamaged
                _ = got.damaged
        if store_url != "memory://":
            assert states_read == [None]  # the database gave no state
        # Any other revision, or none asked for, reads the state as before.
        for kept in ("another", None):
            states_read.clear()
            async with store.lock_session("s1", 1.0, kept=kept) as lock:
                assert not lock.session.withheld
                assert lock.session.state == STATE
            if store_url != "memory://":
                assert len(states_read) == 1 and json.loads(states_read[0]) == STATE

    run(store_url, body)


def test_a_withheld_state_is_read_under_the_lock_and_the_turn_commits(store_url: str) -> None:
    revision = new_revision()

    async def body(store: Store) -> None:
        await store.create_session(created(revision))
        async with store.lock_session("s1", 1.0, kept=revision) as lock:
            assert lock.session.withheld
            full = await lock.read_state()
            assert full is lock.session and not full.withheld
            assert (full.state, full.turns, full.revision) == (STATE, 0, revision)
            assert await lock.read_state() is full  # read once
            await lock.commit(outcome(1, 1))
        got = await store.get_session("s1")
        assert got is not None and (got.turns, got.state) == (1, {"format": "x", "n": 1})

    run(store_url, body)


def test_a_withheld_state_of_a_session_deleted_meanwhile_is_gone(store_url: str) -> None:
    revision = new_revision()

    async def body(store: Store) -> None:
        await store.create_session(created(revision))
        async with store.lock_session("s1", 1.0, kept=revision) as lock:
            assert await store.delete_session("s1")
            with pytest.raises(SessionGone):
                await lock.read_state()

    run(store_url, body)


def test_rows_without_a_revision_or_edited_by_hand_are_read_whatever_is_kept(
    api_store: str,
) -> None:
    """A row written before revisions has none, which no kept revision matches; a state
    written by hand loses its revision (schema migration 5), so it is read and checked."""
    revision = new_revision()

    async def body(store: Store) -> None:
        await store.create_session(created(None))
        for kept in (None, "None", ""):
            async with store.lock_session("s1", 1.0, kept=kept) as lock:
                assert not lock.session.withheld and lock.session.state == STATE
        await store.delete_session("s1")
        await store.create_session(created(revision))
        execute(
            api_store,
            "UPDATE agentscript_sessions SET state = ? WHERE session_id = ?",
            '{"format": "x", "n": 7}',
            "s1",
        )
        async with store.lock_session("s1", 1.0, kept=revision) as lock:
            got = lock.session
            assert not got.withheld and got.revision is None
            assert got.state == {"format": "x", "n": 7}

    run(api_store, body)


def test_postgres_lock_read_waits_for_a_commit_in_flight_and_reads_its_state(
    pg_dsn: str,
) -> None:
    """The lease's UPDATE ... RETURNING waits for a commit that holds the row and returns the
    row as committed: a new revision, so its state is read, not the kept one's left out."""
    pg_reset(pg_dsn)
    import psycopg

    kept, written = new_revision(), new_revision()

    async def body(store: Store) -> None:
        await store.create_session(created(kept))
        async with await psycopg.AsyncConnection.connect(pg_dsn) as other:
            await other.execute(
                "UPDATE agentscript_sessions SET state = %s, revision = %s, turns = 1 "
                "WHERE session_id = 's1'",
                ('{"format": "x", "n": 1}', written),
            )

            async def locked() -> SessionRecord:
                async with store.lock_session("s1", 5.0, kept=kept) as lock:
                    return lock.session

            reading = asyncio.ensure_future(locked())
            await asyncio.sleep(0.3)
            assert not reading.done()  # waits for the row
            await other.commit()
            got = await reading
        assert not got.withheld and (got.revision, got.turns) == (written, 1)
        assert got.state == {"format": "x", "n": 1}

    run(pg_dsn, body)


def test_live_sessions_tell_the_kept_revision_without_taking_it() -> None:
    live = LiveSessions(2)
    session: Any = type("Parked", (), {"history_chars": lambda self: 0})()
    live.keep("a", 3, "v1", session, "r1")
    assert (live.revision("a"), live.revision("b")) == ("r1", None)
    assert len(live) == 1 and (live.hits, live.misses) == (0, 0)


def test_a_turn_whose_kept_session_left_while_it_waited_reads_the_state_under_the_lock(
    api_store: str,
) -> None:
    """One session kept at most: session A's turn reads the revision A is kept at, then waits
    for A's lock (another worker's turn holds it) while session B is created and kept, which
    drops A. The lock read leaves out A's state (the row still has that revision), finds no kept
    session, reads the state under the lock and runs the turn on it."""

    async def main() -> None:
        async with AsyncExitStack() as stack:
            client = await stack.enter_async_context(
                api(api_store, config=ServerConfig(live_sessions=1, lock_wait=10.0))
            )
            service = client._transport.app.state.service  # type: ignore[attr-defined]
            a = await new_session(client)
            first = await client.post(
                f"/v1/sessions/{a}/messages", json={"text": '/note {"text": "milk"}'}
            )
            assert first.status_code == 200 and first.json()["variables"]["last_note"] == "milk"
            seen = spy_locks(service.store, stack)
            other = store_from_url(api_store)
            await other.open()
            stack.push_async_callback(other.close)
            turn = None
            try:
                async with other.lock_session(a, 1.0):  # another worker's turn of A
                    turn = asyncio.ensure_future(
                        client.post(f"/v1/sessions/{a}/messages", json={"text": "hello"})
                    )
                    async with asyncio.timeout(10):  # A's turn waits for the lock
                        while not service.metrics.in_progress and not turn.done():
                            await asyncio.sleep(0.005)
                    assert not turn.done()
                    # A's turn asked for A's lock without the state of the A kept here.
                    assert service.live.revision(a) is not None
                    await new_session(client)  # B, kept in A's place
                    assert service.live.revision(a) is None
            finally:
                if turn is not None:  # never left running past the server
                    await asyncio.wait([turn], timeout=15)
            second = turn.result()
        assert second.status_code == 200, second.text
        body = second.json()
        assert body["turn"] == 2 and body["response"] == "You said: hello"
        assert body["variables"]["last_note"] == "milk"  # the state turn 1 committed
        assert seen == [(a, True, False)]  # withheld, then read under the lock
        assert service.metrics.session_loads["restored"] == 1

    asyncio.run(main())


def spy_locks(store: Any, stack: AsyncExitStack) -> list[tuple[str, bool, bool]]:
    """Each lock the service takes: the session, whether its read left the state out, and
    whether the state was still left out when the turn ended."""
    seen: list[tuple[str, bool, bool]] = []
    real = store.lock_session

    @asynccontextmanager
    async def spying(session_id: str, wait: float, **kept: str | None) -> AsyncIterator[Any]:
        async with real(session_id, wait, **kept) as lock:
            withheld = getattr(lock.session, "withheld", False)
            try:
                yield lock
            finally:
                seen.append((session_id, withheld, getattr(lock.session, "withheld", False)))

    store.lock_session = spying
    stack.callback(setattr, store, "lock_session", real)
    return seen


def test_a_turn_queued_behind_one_of_this_worker_reads_no_state_once_that_one_kept_its_own(
    store_url: str, states_read: list[Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two messages to one session at once, on one worker: the second arrives while the first
    runs (its session taken out of the kept ones), and waits for the session's local queue;
    the first commits and keeps its revision. The second's lock read then names that revision,
    so the row is read without its state, and the second runs the session the first kept."""
    block, log = tmp_path / "block", tmp_path / "calls.jsonl"
    monkeypatch.setenv("NOTES_BLOCK", str(block))
    monkeypatch.setenv("NOTES_LOG", str(log))

    async def main() -> None:
        async with AsyncExitStack() as stack:
            client = await stack.enter_async_context(
                api(store_url, config=ServerConfig(lock_wait=10.0))
            )
            service = client._transport.app.state.service  # type: ignore[attr-defined]
            sid = await new_session(client)
            seen = spy_locks(service.store, stack)
            url = f"/v1/sessions/{sid}/messages"
            block.touch()
            first = asyncio.ensure_future(client.post(url, json={"text": '/note {"text": "a"}'}))
            second = None
            try:
                async with asyncio.timeout(10):  # the first turn is inside its action
                    while not log.exists() and not first.done():
                        await asyncio.sleep(0.005)
                assert not first.done() and service.live.revision(sid) is None
                second = asyncio.ensure_future(client.post(url, json={"text": "hello"}))
                async with asyncio.timeout(10):  # the second waits for the session's lock
                    while service.metrics.in_progress < 2 and not second.done():
                        await asyncio.sleep(0.005)
                assert not second.done()
                states_read.clear()
            finally:
                block.unlink()
                await asyncio.wait([t for t in (first, second) if t is not None], timeout=15)
            assert second is not None
            replies = [first.result(), second.result()]
        assert [r.status_code for r in replies] == [200, 200], replies[1].text
        assert [r.json()["turn"] for r in replies] == [1, 2]
        assert replies[1].json()["variables"]["last_note"] == "a"
        assert seen == [(sid, True, True), (sid, True, True)]  # neither read the state
        if store_url != "memory://":
            assert states_read == [None]  # the second's lock read: no state from the database
        assert service.metrics.session_loads == {"kept": 2}  # none restored

    asyncio.run(main())
