"""A SQLite store already at this agentscript's schema version opens without the write lock
(store/sqlite.py): a worker starts while another process holds a long write.

An audit's purge held the lock past ``--worker-timeout``; the supervisor killed that worker,
and the worker started in its place waited ``BUSY_WAIT`` for the migration's ``BEGIN
IMMEDIATE``, which it did not need, failed to start ("database is locked") and so stopped the
whole server."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from pathlib import Path

import pytest

from agentscript.store import StoreError, schema
from agentscript.store import sqlite as sqlite_store
from agentscript.store.sqlite import SQLiteStore

from .test_sqlite_busy import WriteLock, record

# Far below the default, so that a store that waits for the lock fails at once.
SHORT_WAIT = 0.2


async def made(path: Path) -> None:
    """A store at ``path`` at this version, holding session ``a``, left closed."""
    store = SQLiteStore(path)
    await store.open()
    try:
        await store.create_session(record("a"))
    finally:
        await store.close()


def test_sqlite_store_at_its_schema_version_opens_while_another_process_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_store, "BUSY_WAIT", SHORT_WAIT)
    path = tmp_path / "sessions.db"

    async def main() -> None:
        await made(path)
        with WriteLock(path, seconds=30) as lock:
            store = SQLiteStore(path)
            await store.open()
            try:
                assert lock.holding()
                found = await store.get_session("a")  # reads do not wait for the writer
                assert found is not None and found.session_id == "a"
                lock.release()
                await store.create_session(record("b"))  # and it writes once it may
            finally:
                await store.close()

    asyncio.run(main())


def test_sqlite_store_that_needs_a_migration_still_waits_for_the_write_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A migration is written under the lock, never half-way: a store one version behind
    fails to open while another process holds the lock, and is migrated once it is free."""
    path = tmp_path / "sessions.db"

    def version() -> int:
        with contextlib.closing(sqlite3.connect(path)) as db:
            row = db.execute("SELECT value FROM agentscript_meta").fetchone()
        return int(row[0])

    async def open_and_close() -> None:
        store = SQLiteStore(path)
        await store.open()
        await store.close()

    behind = len(schema.MIGRATIONS) - 1
    with monkeypatch.context() as older:  # as an older agentscript left it
        older.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:behind])
        asyncio.run(open_and_close())
    assert version() == behind
    monkeypatch.setattr(sqlite_store, "BUSY_WAIT", SHORT_WAIT)
    with WriteLock(path, seconds=30), pytest.raises(StoreError, match="database is locked"):
        asyncio.run(open_and_close())
    assert version() == behind
    asyncio.run(open_and_close())
    assert version() == len(schema.MIGRATIONS)
