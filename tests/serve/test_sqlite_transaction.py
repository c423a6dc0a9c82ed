"""The SQLite store's one write transaction (``SQLiteStore._transaction``): BEGIN IMMEDIATE, the
block, COMMIT; any failure rolls it back, a SQLite error raised as StoreError and any other
failure as it is. A deletion, a purge, a chunk of deleted turns and a turn's commit all write
through it."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from agentscript.store import StoreError
from agentscript.store.sqlite import SQLiteStore

from .test_sqlite_busy import connection, opened

NOTE = "INSERT INTO agentscript_meta (key, value) VALUES ('note', 'written')"


def notes(store: SQLiteStore) -> list[Any]:
    return store.db.execute("SELECT value FROM agentscript_meta WHERE key = 'note'").fetchall()


def in_store(path: Path, body: Callable[[SQLiteStore], Awaitable[None]]) -> None:
    async def main() -> None:
        async with opened(path) as store:
            await body(store)
            # the connection is out of any transaction, and the next one commits
            assert not store.db.in_transaction
            async with store._transaction() as db:
                db.execute(NOTE)
            assert notes(store) == [("written",)]

    asyncio.run(main())


def test_sqlite_transaction_commits_its_block(tmp_path: Path) -> None:
    async def body(store: SQLiteStore) -> None:
        async with store._transaction() as db:
            assert db.in_transaction
            db.execute("INSERT INTO agentscript_meta (key, value) VALUES ('other', 'x')")
        other = "SELECT value FROM agentscript_meta WHERE key = 'other'"
        assert store.db.execute(other).fetchall() == [("x",)]

    in_store(tmp_path / "s.db", body)


def test_sqlite_error_in_a_transaction_is_a_store_error_and_rolls_it_back(
    tmp_path: Path,
) -> None:
    async def body(store: SQLiteStore) -> None:
        with pytest.raises(StoreError, match=r"^SQLite store: UNIQUE constraint failed") as caught:
            async with store._transaction() as db:
                db.execute(NOTE)
                db.execute(NOTE)  # the same key again
        assert caught.value.__suppress_context__  # the SQLite error is not shown twice
        assert notes(store) == []

    in_store(tmp_path / "s.db", body)


@pytest.mark.parametrize("failure", [RuntimeError("the turn failed"), asyncio.CancelledError()])
def test_sqlite_other_failure_in_a_transaction_is_raised_as_it_is_and_rolls_it_back(
    tmp_path: Path, failure: BaseException
) -> None:
    async def body(store: SQLiteStore) -> None:
        with pytest.raises(type(failure)) as caught:
            async with store._transaction() as db:
                db.execute(NOTE)
                raise failure
        assert caught.value is failure
        assert notes(store) == []

    in_store(tmp_path / "s.db", body)


class FailingCommit:
    """The store's connection, whose COMMIT fails as a full disk makes it fail."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)

    def execute(self, sql: str, params: Any = ()) -> sqlite3.Cursor:
        if sql == "COMMIT":
            raise sqlite3.OperationalError("database or disk is full")
        return self._db.execute(sql, params)


def test_sqlite_failed_commit_is_a_store_error_and_rolls_the_transaction_back(
    tmp_path: Path,
) -> None:
    async def body(store: SQLiteStore) -> None:
        with connection(store, FailingCommit(store.db)):
            with pytest.raises(StoreError, match="disk is full"):
                async with store._transaction() as db:
                    db.execute(NOTE)
            with pytest.raises(StoreError, match="disk is full"):
                await store.delete_session("a")
        assert notes(store) == []
        assert await store.get_session("a") is not None

    in_store(tmp_path / "s.db", body)


def test_sqlite_transaction_left_open_fails_the_next_begin_which_ends_it(tmp_path: Path) -> None:
    """A transaction left open (a ROLLBACK that failed) fails the next BEGIN with a StoreError,
    not a 500, and is ended by it: the write after that succeeds."""

    async def body(store: SQLiteStore) -> None:
        store.db.execute("BEGIN IMMEDIATE")
        store.db.execute(NOTE)
        with pytest.raises(StoreError, match="within a transaction"):
            await store.delete_session("a")
        assert notes(store) == []
        assert await store.delete_session("a") is True

    in_store(tmp_path / "s.db", body)
