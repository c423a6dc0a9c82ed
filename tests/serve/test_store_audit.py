"""Store fixes from an audit: a deletion or purge racing a turn's commit on PostgreSQL leaves no
turn rows of a deleted session, a purge goes in batches past locked rows, listing sessions on
SQLite reads an index in order, a new SQLite store is private to its user, and sessions written
without a TTL expire once one is set (``backfill_expiry``)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import stat
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from agentscript.store import Store, schema
from agentscript.store import postgres as pg
from agentscript.store.sqlite import SQLiteStore

from .conftest import pg_reset
from .harness import run_store as run
from .test_pg_row_locks import opened, row_locked
from .test_store import outcome, record, sql

# Upper bound on any wait below (a guard against hanging, never a measurement).
HANG_GUARD = 30.0


async def lock_waiters(dsn: str, count: int) -> None:
    """Return once ``count`` statements of this database wait for a lock."""
    import psycopg

    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        while True:
            cur = await conn.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
            row = await cur.fetchone()
            if row is not None and row[0] >= count:
                return
            await asyncio.sleep(0.01)


def orphaned_turns(dsn: str) -> Any:
    return sql(
        dsn,
        "SELECT count(*) FROM agentscript_turns t WHERE NOT EXISTS "
        "(SELECT 1 FROM agentscript_sessions s WHERE s.session_id = t.session_id)",
    )


# ---------------------------------------------------------------- PostgreSQL deletion and purge


def test_postgres_delete_racing_a_turn_commit_leaves_no_turn_rows(pg_dsn: str) -> None:
    """Another client holds the session's row, so that the turn's commit and then the deletion
    queue on it, in that order: the commit lands first, and the deletion takes its turn too."""
    pg_reset(pg_dsn)

    async def main() -> tuple[bool, int]:
        async with opened(pg_dsn) as store, asyncio.timeout(HANG_GUARD):
            await store.create_session(record())
            async with store.lock_session("s1", 1.0) as lock:
                async with row_locked(pg_dsn, "s1"):
                    commit = asyncio.create_task(lock.commit(outcome(1, 1)))
                    await lock_waiters(pg_dsn, 1)
                    delete = asyncio.create_task(store.delete_session("s1"))
                    await lock_waiters(pg_dsn, 2)
                await commit  # committed before the deletion saw the row
            deleted = await delete
            rows = await asyncio.to_thread(
                sql, pg_dsn, "SELECT count(*) FROM agentscript_turns WHERE session_id = 's1'"
            )
            return deleted, rows

    assert asyncio.run(main()) == (True, 0)


@asynccontextmanager
async def turn_running(store: Store, session_id: str) -> AsyncIterator[None]:
    """A turn of the session holds its lease in the block, and ends without a commit."""
    async with store.lock_session(session_id, 1.0):
        yield


def test_postgres_purge_racing_a_turn_that_ends_uncommitted_leaves_no_turn_rows(
    pg_dsn: str,
) -> None:
    """S expired while a turn of it ran (its lease kept it); the purge meets a turn row of X,
    another expired session, locked by another client, and the turn of S ends meanwhile."""
    import psycopg

    pg_reset(pg_dsn)

    async def main() -> tuple[int, Any, Any]:
        async with opened(pg_dsn) as store, asyncio.timeout(HANG_GUARD):
            for sid in ("S", "X"):
                await store.create_session(record(sid, expires_at=time.time() + 3600))
                async with store.lock_session(sid, 1.0) as lock:
                    await lock.commit(outcome(1, 1, sid=sid))
            other = await psycopg.AsyncConnection.connect(pg_dsn)
            try:
                async with turn_running(store, "S"):
                    await asyncio.to_thread(
                        sql, pg_dsn, "UPDATE agentscript_sessions SET expires_at = 1"
                    )
                    await other.execute(
                        "SELECT 1 FROM agentscript_turns WHERE session_id = 'X' FOR UPDATE"
                    )
                    purge = asyncio.create_task(store.purge_expired())
                    await lock_waiters(pg_dsn, 1)
                await other.rollback()
            finally:
                await other.close()
            purged = await purge
            left = await asyncio.to_thread(
                sql, pg_dsn, "SELECT string_agg(session_id, ',') FROM agentscript_sessions"
            )
            return purged, left, await asyncio.to_thread(orphaned_turns, pg_dsn)

    # X went with its turns; S, whose turn ended during the purge, waits for the next one.
    assert asyncio.run(main()) == (1, "S", 0)


def test_postgres_purge_goes_in_batches_and_skips_a_row_another_client_holds(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pg_reset(pg_dsn)
    monkeypatch.setattr(pg, "PURGE_BATCH", 2)

    async def main() -> tuple[int, Any, Any]:
        async with opened(pg_dsn) as store, asyncio.timeout(HANG_GUARD):
            for i in range(6):
                await store.create_session(record(f"s{i}", expires_at=time.time() + 3600))
                async with store.lock_session(f"s{i}", 1.0) as lock:
                    await lock.commit(outcome(1, 1, sid=f"s{i}"))
            await asyncio.to_thread(sql, pg_dsn, "UPDATE agentscript_sessions SET expires_at = 1")
            async with row_locked(pg_dsn, "s3"):
                purged = await store.purge_expired()
            left = await asyncio.to_thread(
                sql, pg_dsn, "SELECT string_agg(session_id, ',') FROM agentscript_sessions"
            )
            return purged, left, await asyncio.to_thread(orphaned_turns, pg_dsn)

    assert asyncio.run(main()) == (5, "s3", 0)


# ---------------------------------------------------------------- SQLite listing


@pytest.mark.parametrize("agent", [None, "A"])
def test_sqlite_list_sessions_reads_an_index_in_order(tmp_path: Path, agent: str | None) -> None:
    """No sort of every session of the key for each page: the rows come in order from an index."""
    path = tmp_path / "sessions.db"
    run(f"sqlite:///{path}", lambda store: store.ping())
    query, params = schema.list_sessions_query(
        owner="k1", agent=agent, after=None, now=time.time(), limit=101
    )
    with contextlib.closing(sqlite3.connect(path)) as db:
        plan = " | ".join(row[-1] for row in db.execute(f"EXPLAIN QUERY PLAN {query}", params))
    assert "USING INDEX" in plan and "TEMP B-TREE" not in plan, plan


# ---------------------------------------------------------------- SQLite file permissions


@contextlib.contextmanager
def umask(mask: int) -> Iterator[None]:
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_sqlite_new_store_folder_and_files_are_private_to_their_user(tmp_path: Path) -> None:
    folder = tmp_path / "made" / ".agentscript"
    path = folder / "sessions.db"

    async def main() -> dict[str, int]:
        store = SQLiteStore(path)
        await store.open()
        try:
            await store.create_session(record())  # the log and shared memory exist now
            files = [path, Path(f"{path}-wal"), Path(f"{path}-shm")]
            return {p.name: mode(p) for p in (folder.parent, folder, *files)}
        finally:
            await store.close()

    with umask(0o022):
        modes = asyncio.run(main())
    assert modes == {
        "made": 0o700,
        ".agentscript": 0o700,
        "sessions.db": 0o600,
        "sessions.db-wal": 0o600,
        "sessions.db-shm": 0o600,
    }


def test_sqlite_store_keeps_the_modes_of_a_folder_and_file_the_user_made(tmp_path: Path) -> None:
    folder = tmp_path / "shared"
    folder.mkdir(mode=0o755)
    path = folder / "sessions.db"
    sqlite3.connect(path).close()
    path.chmod(0o640)
    with umask(0o022):
        run(f"sqlite:///{path}", lambda store: store.ping())
    assert (mode(folder), mode(path)) == (0o755, 0o640)


# ---------------------------------------------------------------- a TTL set later


def test_store_backfill_expiry_expires_sessions_written_without_a_ttl(store_url: str) -> None:
    """Sessions created while no TTL was set expire ``ttl`` after their last update once one is;
    a session with an expiry keeps it."""

    async def body(store: Store) -> tuple[int, list[Any], int]:
        now = time.time()
        await store.create_session(record("idle", updated_at=now - 100))
        await store.create_session(record("recent", updated_at=now))
        await store.create_session(record("timed", updated_at=now - 100, expires_at=now + 5000))
        backfilled = await store.backfill_expiry(50.0)
        found = [await store.get_session(sid) for sid in ("idle", "recent", "timed")]
        expiries = [None if r is None else round(r.expires_at or 0) for r in found]
        return backfilled, expiries, await store.purge_expired()

    backfilled, expiries, purged = run(store_url, body)
    assert backfilled == 2
    assert expiries[0] is None  # updated 100 s ago, TTL 50 s: expired
    assert expiries[1] is not None and abs(expiries[1] - (time.time() + 50)) < 30
    assert expiries[2] is not None and expiries[2] > time.time() + 4000
    assert purged == 1


def test_store_backfill_expiry_goes_in_batches(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentscript.store import sqlite as sqlite_store

    monkeypatch.setattr(sqlite_store, "PURGE_BATCH", 2)
    monkeypatch.setattr(pg, "PURGE_BATCH", 2)

    async def body(store: Store) -> tuple[int, int]:
        for i in range(5):
            await store.create_session(record(f"s{i}", updated_at=time.time() - 100))
        return await store.backfill_expiry(50.0), await store.purge_expired()

    assert run(store_url, body) == (5, 5)
