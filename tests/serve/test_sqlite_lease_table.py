"""SQLite keeps a session's lease in a table of its own (schema version 6, store/sqlite.py).

SQLite writes a whole record on any UPDATE of it, state included: a lease taken and given back
on the session's row rewrote a state of 4 MB at the history limit twice a turn (16 MB of log,
30-45 ms of the event loop). A lease is now a row of ``agentscript_leases``: taking, taking over
and giving back a lease never write the session's row, and every rule of the lease holds as
before. A store of version 5 is migrated with the leases held in it, and a worker of the older
agentscript still running then can give back its lease but not take one.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentscript.store import (
    SessionBusy,
    SessionGone,
    SessionRecord,
    TurnConflict,
    TurnOutcome,
    TurnRecord,
    schema,
)
from agentscript.store.sqlite import PID_NAMESPACE, SQLiteStore

# A holder that is alive whatever the pid says (another pid namespace: its time decides), and one
# whose process is gone (a pid no process has; this namespace).
AWAY = f"999999.1.{PID_NAMESPACE + 1}.away:t1"
DEAD = f"999999.1.{PID_NAMESPACE}.dead:t1"
STATE = {"format": "x", "history": ["lorem ipsum " * 1000]}

# The lease statements of the agentscript before version 6, as a worker still running it at the
# upgrade issues them (store/sqlite.py and schema.py at version 5).
OLD_TAKE_LEASE = (
    "UPDATE agentscript_sessions SET lease_holder = ?, lease_until = ? WHERE session_id = ? "
    "AND (expires_at IS NULL OR expires_at > ?) AND (lease_holder IS NULL OR lease_until <= ?)"
)
OLD_TAKE_STALE_LEASE = (
    "UPDATE agentscript_sessions SET lease_holder = ?, lease_until = ? "
    "WHERE session_id = ? AND lease_holder = ?"
)
OLD_DROP_LEASE = (
    "UPDATE agentscript_sessions SET lease_holder = NULL WHERE session_id = ? AND lease_holder = ?"
)
OLD_UPDATE_AFTER_TURN = (
    "UPDATE agentscript_sessions SET state = ?, revision = ?, turns = turns + 1, ended = ?, "
    "escalated = ?, updated_at = ?, expires_at = ?, lease_holder = NULLIF(lease_holder, ?) "
    "WHERE session_id = ? AND turns = ?"
)


def record(sid: str = "s1", **kw: Any) -> SessionRecord:
    return SessionRecord(sid, "A", "k1", "v1", STATE, revision="r0", **kw)


def outcome(turn: int, key: str | None = None, sid: str = "s1") -> TurnOutcome:
    return TurnOutcome(
        state={**STATE, "n": turn},
        record=TurnRecord(sid, turn, {"turn": turn}, {"steps": [turn]}, key),
        ended=False,
        escalated=False,
        expires_at=None,
    )


@contextlib.asynccontextmanager
async def opened(path: Path) -> AsyncIterator[SQLiteStore]:
    store = SQLiteStore(path)
    await store.open()
    try:
        yield store
    finally:
        await store.close()


def rows(path: Path, sql: str, *params: Any) -> list[Any]:
    """A statement's rows, on a connection of its own (committed)."""
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as db:
        return db.execute(sql, params).fetchall()


def leases(path: Path) -> list[tuple[str, str]]:
    return rows(path, "SELECT session_id, holder FROM agentscript_leases ORDER BY session_id")


@contextlib.contextmanager
def session_writes(store: SQLiteStore) -> Iterator[list[str]]:
    """Every write of a row of ``agentscript_sessions`` by the store's connection while in the
    block, as its kind (temporary triggers: they see that connection's statements only)."""
    db = store.db
    db.execute("CREATE TEMP TABLE session_writes (kind TEXT)")
    for kind in ("INSERT", "UPDATE", "DELETE"):
        db.execute(
            f"CREATE TEMP TRIGGER session_{kind.lower()} AFTER {kind} ON main.agentscript_sessions "
            f"BEGIN INSERT INTO session_writes VALUES ('{kind}'); END"
        )
    seen: list[str] = []
    try:
        yield seen
    finally:
        seen += [kind for (kind,) in db.execute("SELECT kind FROM session_writes")]
        for kind in ("insert", "update", "delete"):
            db.execute(f"DROP TRIGGER temp.session_{kind}")
        db.execute("DROP TABLE temp.session_writes")


def session_row(path: Path, sid: str = "s1") -> list[Any]:
    """A session's row as stored: its rowid, revision, state and update time."""
    return rows(
        path,
        "SELECT rowid, revision, state, updated_at FROM agentscript_sessions WHERE session_id = ?",
        sid,
    )


# ------------------------------------------------------------------ the session row is not written


def test_sqlite_lease_taken_taken_over_and_given_back_never_writes_the_session_row(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"

    async def main() -> None:
        async with opened(path) as store:
            await store.create_session(record())
            before = session_row(path)
            with session_writes(store) as writes:
                async with store.lock_session("s1", 1.0) as lock:
                    assert leases(path) == [("s1", lock.holder)]
                    assert lock.session.revision == "r0"
                # a dead holder's lease, taken over, then given back
                rows(path, "INSERT INTO agentscript_leases VALUES ('s1', ?, 1e12)", DEAD)
                assert (await store.take_lease("s1", "me:2"))[0] is True
                assert leases(path) == [("s1", "me:2")]
                await store.drop_lease("s1", "me:2")
                # a lease that ran out, taken again
                rows(path, "INSERT INTO agentscript_leases VALUES ('s1', ?, 0)", AWAY)
                assert (await store.take_lease("s1", "me:3"))[0] is True
                await store.drop_lease("s1", "me:3")
            assert writes == []
            assert session_row(path) == before
            assert leases(path) == []
            # the commit writes the row once, and gives the lease back with it
            with session_writes(store) as writes:
                async with store.lock_session("s1", 1.0) as lock:
                    await lock.commit(outcome(1))
            assert writes == ["UPDATE"]
            assert leases(path) == []

    asyncio.run(main())


# ------------------------------------------------------------------ the rules of the lease


def test_sqlite_take_lease_takes_a_free_or_run_out_lease_of_a_live_session_only(
    tmp_path: Path,
) -> None:
    """Taken when nobody holds it, when its time ran out, or when its holder is gone or this
    store; not while a live holder of another store has it; never on a session that is gone or
    expired, where no lease row is left written."""
    path = tmp_path / "s.db"

    async def main() -> None:
        async with opened(path) as store:
            own = f"{await store.worker()}:old"
            await store.create_session(record())
            await store.create_session(record("gone", expires_at=time.time() - 1))
            assert await store.take_lease("none", "me:1") == (True, None)
            assert await store.take_lease("gone", "me:1") == (True, None)
            assert leases(path) == []
            for held, until, taken in [
                (AWAY, 1e12, False),  # a live holder, in time
                (AWAY, 0, True),  # its time ran out
                (DEAD, 1e12, True),  # its process is gone
                (own, 1e12, True),  # this store's own (a give-back that failed)
            ]:
                rows(path, "DELETE FROM agentscript_leases")
                rows(path, "INSERT INTO agentscript_leases VALUES ('s1', ?, ?)", held, until)
                got, session = await store.take_lease("s1", "me:2")
                assert got is taken, held
                assert leases(path) == [("s1", "me:2" if taken else held)]
                assert (session is not None and session.session_id == "s1") is taken
                if taken:  # its time starts again
                    (until_now,) = rows(path, "SELECT until FROM agentscript_leases")[0]
                    assert until_now > time.time() + 500
            rows(path, "DELETE FROM agentscript_leases")
            assert (await store.take_lease("s1", "me:3"))[0] is True
            await store.drop_lease("s1", "someone else:1")  # not its holder: no change
            assert leases(path) == [("s1", "me:3")]
            await store.drop_lease("s1", "me:3")
            assert leases(path) == []

    asyncio.run(main())


def test_sqlite_commit_gives_the_lease_back_in_its_own_transaction(tmp_path: Path) -> None:
    """The commit's statements and the lease's give-back commit or roll back together; a commit
    whose lease was taken over leaves the taker's lease in place."""
    path = tmp_path / "s.db"

    async def main() -> None:
        async with opened(path) as store:
            await store.create_session(record())
            async with store.lock_session("s1", 1.0) as lock:
                await lock.commit(outcome(1, "k"))
            taken, session = await store.take_lease("s1", "me:1")
            assert taken and session is not None
            with pytest.raises(ValueError, match="Idempotency-Key"):
                await store.commit_turn(session, outcome(2, "k"), "me:1")
            assert leases(path) == [("s1", "me:1")]  # rolled back with the failed commit
            stale = SessionRecord("s1", "A", "k1", "v1", STATE, turns=0)
            with pytest.raises(TurnConflict):
                await store.commit_turn(stale, outcome(1), "me:1")
            assert leases(path) == [("s1", "me:1")]
            rows(path, "UPDATE agentscript_leases SET holder = ?", AWAY)  # taken over
            await store.commit_turn(session, outcome(2), "me:1")
            assert leases(path) == [("s1", AWAY)]
            rows(path, "UPDATE agentscript_leases SET holder = 'me:1'")
            session.turns = 2
            await store.commit_turn(session, outcome(3), "me:1")
            assert leases(path) == []
            found = await store.get_session("s1")
            assert found is not None and found.turns == 3

    asyncio.run(main())


# ------------------------------------------------------------------ no lease outlives its session


def test_sqlite_deletion_and_purge_leave_no_lease_and_a_new_session_of_the_id_is_free(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"

    async def main() -> None:
        async with opened(path) as store:
            await store.create_session(record())
            await store.create_session(record("old", expires_at=time.time() - 1))
            await store.create_session(record("running", expires_at=time.time() - 1))
            rows(path, "INSERT INTO agentscript_leases VALUES ('s1', ?, 1e12)", AWAY)
            rows(path, "INSERT INTO agentscript_leases VALUES ('old', ?, 0)", AWAY)
            rows(path, "INSERT INTO agentscript_leases VALUES ('running', ?, 1e12)", AWAY)
            with pytest.raises(SessionBusy):
                async with store.lock_session("s1", 0.05):
                    pass
            assert await store.delete_session("s1") is True
            assert await store.purge_expired() == 1  # a turn still runs on "running"
            assert leases(path) == [("running", AWAY)]
            rows(path, "DELETE FROM agentscript_sessions WHERE session_id = 'running'")
            assert leases(path) == []  # however the row goes
            with pytest.raises(SessionGone):
                async with store.lock_session("s1", 0.05):
                    pass
            assert leases(path) == []
            await store.create_session(record())  # the id again: no lease inherited
            async with store.lock_session("s1", 0.05) as lock:
                await lock.commit(outcome(1))
            assert leases(path) == []

    asyncio.run(main())


# ------------------------------------------------------------------ the upgrade from version 5


async def at_version_5(path: Path) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:5])
        async with opened(path) as store:
            await store.create_session(record("held"))
            await store.create_session(record("free"))
            await store.create_session(record("stale"))
    until = time.time() + 600
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        # As version 5 left them: a lease of a running worker, one given back (its time stays),
        # and one of a worker killed mid-turn.
        db.execute(OLD_TAKE_LEASE, (AWAY, until, "held", 0, 0))
        db.execute(OLD_TAKE_LEASE, ("old:1", until, "free", 0, 0))
        db.execute(OLD_DROP_LEASE, ("free", "old:1"))
        db.execute(OLD_TAKE_LEASE, (DEAD, until, "stale", 0, 0))


def test_sqlite_store_of_version_5_is_migrated_with_the_leases_held_in_it(tmp_path: Path) -> None:
    """The leases held at the upgrade are carried into the table: a turn another worker runs
    then is still waited for, a dead worker's lease is still taken over at once. The migration
    writes no session row (the revisions of kept sessions stay)."""
    path = tmp_path / "s.db"
    asyncio.run(at_version_5(path))
    assert rows(path, "SELECT value FROM agentscript_meta") == [("5",)]
    before = {sid: session_row(path, sid) for sid in ("held", "free", "stale")}

    async def main() -> None:
        async with opened(path) as store:
            assert leases(path) == [("held", AWAY), ("stale", DEAD)]
            assert {sid: session_row(path, sid) for sid in before} == before
            with pytest.raises(SessionBusy):
                async with store.lock_session("held", 0.05):
                    pass
            for sid in ("free", "stale"):
                async with store.lock_session(sid, 0.05) as lock:
                    assert lock.session.revision == "r0"
                    await lock.commit(outcome(1, sid=sid))
            assert leases(path) == [("held", AWAY)]

    asyncio.run(main())
    assert rows(path, "SELECT value FROM agentscript_meta") == [(str(len(schema.MIGRATIONS)),)]


def test_sqlite_worker_of_version_5_still_running_gives_its_lease_back_but_takes_none(
    tmp_path: Path,
) -> None:
    """A worker of the older agentscript that runs on after another one migrated the store: its
    turn under way commits and gives back the lease carried over for it, so a new worker's turn
    waits for it and then runs; its taking a lease fails loudly (naming the fix), so its turns
    never run beside a new worker's on the row nobody reads any more."""
    path = tmp_path / "s.db"
    asyncio.run(at_version_5(path))

    async def main() -> None:
        async with opened(path) as store:
            with contextlib.closing(sqlite3.connect(path)) as old, old:
                for statement, params in [
                    (OLD_TAKE_LEASE, ("old:2", 1e12, "free", 0, 0)),
                    (OLD_TAKE_STALE_LEASE, ("old:2", 1e12, "stale", DEAD)),
                ]:
                    with pytest.raises(sqlite3.IntegrityError, match="restart it"):
                        old.execute(statement, params)
                # the holder of "held" commits its turn (old statements), giving its lease back
                written = (schema.dumps(STATE), "r1", 0, 0, time.time(), None, AWAY, "held", 0)
                assert old.execute(OLD_UPDATE_AFTER_TURN, written).rowcount == 1
            assert leases(path) == [("stale", DEAD)]
            async with store.lock_session("held", 0.05) as lock:
                assert lock.session.turns == 1 and lock.session.revision == "r1"
            # an old worker's drop of a lease carried over for it
            with contextlib.closing(sqlite3.connect(path)) as old, old:
                old.execute(OLD_DROP_LEASE, ("stale", DEAD))
            assert leases(path) == []

    asyncio.run(main())
