"""A purge or a deletion of long sessions holds no transaction, and on SQLite no event loop, for
long (store/batches.py): the session rows go first, then their turns in transactions of
bounded rows and bytes, other tasks running between two; meanwhile no request sees a session
half deleted, and a deletion cut short is finished by the next purge.

An audit saw one purge of 25 expired sessions at the history limit (250 turns of ~720 kB each)
stall a SQLite worker's loop for 19.5 s, in one transaction."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import sqlite3
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from agentscript.store import (
    SessionGone,
    Store,
    StoreError,
    TurnConflict,
    batches,
    schema,
    store_from_url,
)
from agentscript.store.sqlite import SQLiteStore

from .conftest import pg_reset
from .test_sqlite_busy import CAP, connection, expired_sessions, opened
from .test_store import outcome, record, sql

SESSIONS = 3
TURNS = 12  # each; chunks of CHUNK rows below
CHUNK = 5


class Transactions:
    """The SQLite store's connection, noting for each transaction (from its BEGIN) how many
    times a task on the loop had run by then, and how many turn rows it deleted."""

    def __init__(self, db: sqlite3.Connection, ticks: list[int]) -> None:
        self._db = db
        self.ticks = ticks
        self.begins: list[int] = []
        self.turns_deleted: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)

    def execute(self, sql: str, params: Any = ()) -> sqlite3.Cursor:
        if sql.startswith("BEGIN"):
            self.begins.append(self.ticks[0])
            self.turns_deleted.append(0)
        return self._counted(sql, self._db.execute(sql, params))

    def executemany(self, sql: str, params: Any) -> sqlite3.Cursor:
        return self._counted(sql, self._db.executemany(sql, params))

    def _counted(self, sql: str, cursor: sqlite3.Cursor) -> sqlite3.Cursor:
        if sql.startswith("DELETE FROM agentscript_turns"):
            self.turns_deleted[-1] += cursor.rowcount
        return cursor


async def with_ticker(
    store: SQLiteStore, work: Callable[[], Awaitable[Any]]
) -> tuple[Any, Transactions]:
    """``work`` on ``store`` while a task counts the times the loop runs it."""
    ticks = [0]

    async def tick() -> None:
        while True:
            ticks[0] += 1
            await asyncio.sleep(0)

    transactions = Transactions(store.db, ticks)
    ticker = asyncio.create_task(tick())
    try:
        with connection(store, transactions):
            result = await asyncio.wait_for(work(), CAP)
    finally:
        ticker.cancel()
    return result, transactions


def smallest_turn_row(path: Path) -> int:
    """The bytes of the smallest turn row (a result and a trace as stored)."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        found = db.execute("SELECT min(length(result) + length(trace)) FROM agentscript_turns")
        return int(found.fetchone()[0])


def left_in(path: Path) -> tuple[list[Any], list[Any], list[Any]]:
    """The sessions, the sessions with turn rows, and the meta keys of the file."""
    with contextlib.closing(sqlite3.connect(path)) as db:
        return (
            db.execute("SELECT session_id FROM agentscript_sessions ORDER BY 1").fetchall(),
            db.execute("SELECT DISTINCT session_id FROM agentscript_turns ORDER BY 1").fetchall(),
            db.execute("SELECT key FROM agentscript_meta ORDER BY 1").fetchall(),
        )


def assert_bounded(transactions: Transactions, most: int, total: int) -> None:
    deleting = [n for n in transactions.turns_deleted if n]
    assert sum(deleting) == total
    assert max(deleting) <= most, transactions.turns_deleted
    assert len(deleting) >= -(-total // most) > 1
    # Another task ran between each two transactions.
    begins = transactions.begins
    assert all(b > a for a, b in itertools.pairwise(begins)), begins


@pytest.mark.parametrize("bound", ["rows", "bytes"])
def test_sqlite_purge_deletes_turns_in_bounded_transactions_the_loop_running_between(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bound: str
) -> None:
    """Expired sessions of many turns: no transaction of the purge deletes more than a chunk
    of turn rows (by count, or by bytes), and the loop runs other tasks between two. Before,
    one transaction deleted every turn of up to 500 sessions."""
    path = tmp_path / "sessions.db"

    async def main() -> None:
        async with opened(path) as store:
            expired_sessions(path, SESSIONS, turns=TURNS)
            if bound == "rows":
                monkeypatch.setattr(batches, "TURN_CHUNK_ROWS", CHUNK, raising=False)
            else:
                monkeypatch.setattr(
                    batches, "TURN_CHUNK_BYTES", CHUNK * smallest_turn_row(path), raising=False
                )
            purged, transactions = await with_ticker(store, store.purge_expired)
            assert purged == SESSIONS
            assert_bounded(transactions, CHUNK, SESSIONS * TURNS)
            assert left_in(path) == ([("a",)], [("a",)], [(schema.SCHEMA_VERSION_KEY,)])
            assert [t.turn for t in await store.list_turns("a")] == [1]

    asyncio.run(main())


def test_sqlite_delete_of_a_long_session_goes_in_bounded_transactions(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DELETE of one session at the history limit stalled the loop ~470 ms in one transaction."""
    monkeypatch.setattr(batches, "TURN_CHUNK_ROWS", CHUNK, raising=False)
    path = tmp_path / "sessions.db"

    async def main() -> None:
        async with opened(path) as store:
            expired_sessions(path, 1, turns=TURNS)  # (expired or not, a deletion deletes it)
            deleted, transactions = await with_ticker(store, lambda: store.delete_session("x00000"))
            assert deleted is True
            assert_bounded(transactions, CHUNK, TURNS)
            assert left_in(path) == ([("a",)], [("a",)], [(schema.SCHEMA_VERSION_KEY,)])

    asyncio.run(main())


def test_a_chunk_deletes_at_least_one_turn_however_large() -> None:
    assert batches.fitting([(1, 50), (2, 1)], 10, first=True) == (1, 50)
    assert batches.fitting([(1, 50), (2, 1)], 10, first=False) == (0, 0)
    assert batches.fitting([(1, 4), (2, 4), (3, 4)], 10, first=True) == (2, 8)


# ---------------------------------------------------------------- both SQL stores


def raw_turns(url: str, session_id: str) -> int:
    return int(
        sql(url, f"SELECT count(*) FROM agentscript_turns WHERE session_id = '{session_id}'")
    )


def notes(url: str) -> int:
    return int(
        sql(url, f"SELECT count(*) FROM agentscript_meta WHERE key LIKE '{schema.DELETING}%'")
    )


async def long_session(store: Store, session_id: str, turns: int, **kw: Any) -> None:
    await store.create_session(record(session_id, **kw))
    for turn in range(1, turns + 1):
        async with store.lock_session(session_id, 1.0) as lock:
            await lock.commit(outcome(turn, turn, key=f"key-{turn}", sid=session_id))


def paused_after_first_chunk(store: Any) -> tuple[asyncio.Event, asyncio.Event]:
    """Make ``store``'s deletions stop after their first chunk of turns (``mid`` set) until
    ``resume`` is set: as another worker sees a deletion under way."""
    mid, resume = asyncio.Event(), asyncio.Event()
    chunk = store._deletion_chunk

    async def first_then_wait() -> bool:
        left = await chunk()
        if not mid.is_set():
            mid.set()
            await resume.wait()
        return bool(left)

    store._deletion_chunk = first_then_wait
    return mid, resume


def test_a_session_being_deleted_is_never_seen_half_deleted(
    api_store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While one worker deletes a session's turns chunk by chunk, another sees none of the
    session: no row, no listing, no turn, no lease; and a turn that held its lease from before
    commits nothing."""
    monkeypatch.setattr(batches, "TURN_CHUNK_ROWS", 4, raising=False)

    async def main() -> None:
        deleter, other = store_from_url(api_store), store_from_url(api_store)
        await deleter.open()
        await other.open()
        try:
            await long_session(other, "s", 10)
            await long_session(other, "kept", 2)
            mid, resume = paused_after_first_chunk(deleter)
            async with other.lock_session("s", 1.0) as running:  # a turn under way
                deleting = asyncio.create_task(deleter.delete_session("s"))
                await asyncio.wait_for(mid.wait(), CAP)
                assert 0 < await asyncio.to_thread(raw_turns, api_store, "s") < 10
                assert await other.get_session("s") is None
                listed = await other.list_sessions(owner="k1", agent=None, limit=10, after=None)
                assert [r.session_id for r in listed] == ["kept"]
                assert await other.list_turns("s") == []
                assert await other.list_turns_with_traces("s", 100) == []
                assert await other.get_turn("s", 10) is None
                assert await other.find_turn("s", "key-10") is None
                with pytest.raises(TurnConflict):
                    await running.commit(outcome(11, 11, sid="s"))
            with pytest.raises(SessionGone):
                async with other.lock_session("s", 1.0):
                    pass
            resume.set()
            assert await asyncio.wait_for(deleting, CAP) is True
            assert await asyncio.to_thread(raw_turns, api_store, "s") == 0
            assert await asyncio.to_thread(notes, api_store) == 0
            assert [t.turn for t in await other.list_turns("kept")] == [1, 2]
        finally:
            await deleter.close()
            await other.close()

    asyncio.run(main())


def test_a_deletion_cut_short_is_finished_by_the_next_purge(api_store: str) -> None:
    """A worker that stops after the session's row went (killed, or its store failing) leaves
    turns that nothing reads; the next purge, by any worker, deletes them."""

    async def main() -> None:
        store = store_from_url(api_store)
        await store.open()
        try:
            await long_session(store, "s", 3)
            await long_session(store, "kept", 1)

            async def fails() -> bool:
                raise StoreError("the disk is full")

            store._deletion_chunk = fails  # type: ignore[attr-defined]
            assert await store.delete_session("s") is True  # its row went: it is deleted
            assert await asyncio.to_thread(raw_turns, api_store, "s") == 3
            assert await asyncio.to_thread(notes, api_store) == 1
            assert await store.get_session("s") is None
            assert await store.list_turns("s") == []
            assert await store.get_turn("s", 1) is None
        finally:
            await store.close()
        restarted = store_from_url(api_store)
        await restarted.open()
        try:
            assert await restarted.purge_expired() == 0  # no session expired
            assert await asyncio.to_thread(raw_turns, api_store, "s") == 0
            assert await asyncio.to_thread(notes, api_store) == 0
            assert [t.turn for t in await restarted.list_turns("kept")] == [1]
        finally:
            await restarted.close()

    asyncio.run(main())


# ---------------------------------------------------------------- PostgreSQL


# Each turn row deleted notes its transaction.
NOTE_DELETIONS = (
    "CREATE TABLE deleted_in (txid bigint)",
    "CREATE FUNCTION note_deleted() RETURNS trigger LANGUAGE plpgsql AS "
    "$$ BEGIN INSERT INTO deleted_in VALUES (txid_current()); RETURN OLD; END $$",
    "CREATE TRIGGER note_deleted AFTER DELETE ON agentscript_turns "
    "FOR EACH ROW EXECUTE PROCEDURE note_deleted()",
)
FORGET_DELETIONS = (
    "DROP TRIGGER IF EXISTS note_deleted ON agentscript_turns",
    "DROP FUNCTION IF EXISTS note_deleted()",
    "DROP TABLE IF EXISTS deleted_in",
)


def test_postgres_purge_deletes_turns_in_bounded_transactions(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL's purge does not block the loop, but deleted every turn of up to 500
    sessions in one transaction (its locks and WAL); now a chunk at most per transaction."""
    pg_reset(pg_dsn)
    monkeypatch.setattr(batches, "TURN_CHUNK_ROWS", CHUNK, raising=False)

    async def main() -> int:
        store = store_from_url(pg_dsn)
        await store.open()
        try:
            for n in range(SESSIONS):
                await long_session(store, f"x{n}", TURNS, expires_at=time.time() + 3600)
            await long_session(store, "kept", 1)
            for statement in (
                "UPDATE agentscript_sessions SET expires_at = 1 WHERE session_id != 'kept'",
                *NOTE_DELETIONS,
            ):
                await asyncio.to_thread(sql, pg_dsn, statement)
            return await store.purge_expired()
        finally:
            await store.close()

    try:
        assert asyncio.run(main()) == SESSIONS
        per_transaction = sql(
            pg_dsn, "SELECT array_agg(n) FROM (SELECT count(*) n FROM deleted_in GROUP BY txid) t"
        )
    finally:
        for statement in FORGET_DELETIONS:
            sql(pg_dsn, statement)
    assert sum(per_transaction) == SESSIONS * TURNS and max(per_transaction) <= CHUNK, (
        per_transaction
    )
    turns_left = "SELECT string_agg(DISTINCT session_id, ',') FROM agentscript_turns"
    assert sql(pg_dsn, turns_left) == "kept"
    assert notes(pg_dsn) == 0
