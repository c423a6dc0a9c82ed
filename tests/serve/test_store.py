"""The store contract, on every backend (memory, SQLite, PostgreSQL)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from agentscript import jsontext
from agentscript.store import (
    SessionBusy,
    SessionGone,
    SessionRecord,
    Store,
    StoreError,
    TurnConflict,
    TurnOutcome,
    TurnRecord,
    store_from_url,
)
from agentscript.store import lease as lease_module
from agentscript.store.sqlite import SQLiteStore

from .conftest import pg_reset
from .harness import leases_query
from .harness import run_store as run


def record(sid: str = "s1", owner: str = "k1", agent: str = "A", **kw: Any) -> SessionRecord:
    return SessionRecord(sid, agent, owner, "v1", {"format": "x", "n": 0}, **kw)


def outcome(turn: int, n: int, key: str | None = None, sid: str = "s1") -> TurnOutcome:
    return TurnOutcome(
        state={"format": "x", "n": n},
        record=TurnRecord(sid, turn, {"turn": turn}, {"steps": [n]}, key),
        ended=False,
        escalated=False,
        expires_at=None,
    )


def test_store_commit_writes_state_turn_and_trace_together(store_url: str) -> None:
    async def body(store: Store) -> None:
        await store.create_session(record())
        async with store.lock_session("s1", 1.0) as lock:
            assert lock.session.turns == 0
            await lock.commit(outcome(1, 5, "key-1"))
        got = await store.get_session("s1")
        assert got is not None and got.turns == 1 and got.state == {"format": "x", "n": 5}
        turn = await store.get_turn("s1", 1)
        assert turn is not None and turn.trace == {"steps": [5]} and turn.result == {"turn": 1}
        found = await store.find_turn("s1", "key-1")
        assert found is not None and found.turn == 1
        assert await store.find_turn("s1", "other") is None
        assert [t.turn for t in await store.list_turns("s1")] == [1]

    run(store_url, body)


def test_store_turn_not_committed_leaves_session_as_before(store_url: str) -> None:
    async def body(store: Store) -> None:
        await store.create_session(record())
        with pytest.raises(RuntimeError):
            async with store.lock_session("s1", 1.0):
                raise RuntimeError("the turn failed before its commit")
        got = await store.get_session("s1")
        assert got is not None and got.turns == 0 and got.state["n"] == 0
        assert await store.list_turns("s1") == []
        # the lock was released: the next turn runs
        async with store.lock_session("s1", 1.0) as lock:
            await lock.commit(outcome(1, 1))

    run(store_url, body)


def test_store_same_idempotency_key_twice_is_refused(store_url: str) -> None:
    async def body(store: Store) -> None:
        await store.create_session(record())
        async with store.lock_session("s1", 1.0) as lock:
            await lock.commit(outcome(1, 1, "k"))
        with pytest.raises(ValueError, match="Idempotency-Key"):
            async with store.lock_session("s1", 1.0) as lock:
                await lock.commit(outcome(2, 2, "k"))
        got = await store.get_session("s1")
        assert got is not None and got.turns == 1

    run(store_url, body)


def test_store_second_turn_waits_then_busy(store_url: str) -> None:
    async def body(store: Store) -> None:
        await store.create_session(record())
        await store.create_session(record("s2"))
        async with store.lock_session("s1", 1.0):
            with pytest.raises(SessionBusy):
                async with store.lock_session("s1", 0.1):
                    pass
            # another session never waits on this one
            async with store.lock_session("s2", 0.1) as other:
                assert other.session.session_id == "s2"

    run(store_url, body)


def test_store_waiting_turn_runs_after_the_first_commits(store_url: str) -> None:
    async def body(store: Store) -> list[int]:
        await store.create_session(record())
        seen: list[int] = []

        async def turn() -> None:
            async with store.lock_session("s1", 5.0) as lock:
                n = lock.session.turns
                await asyncio.sleep(0.01)
                seen.append(n)
                await lock.commit(outcome(n + 1, n + 1))

        await asyncio.gather(*(turn() for _ in range(5)))
        return seen

    assert run(store_url, body) == [0, 1, 2, 3, 4]


def test_store_commit_against_a_moved_session_is_a_conflict(store_url: str) -> None:
    async def body(store: Store) -> None:
        await store.create_session(record())
        async with store.lock_session("s1", 1.0) as lock:
            lock.session.turns = 7  # as if read before another worker committed
            with pytest.raises(TurnConflict):
                await lock.commit(outcome(8, 8))
        # neither the state nor the turn was written, and the session is free again
        got = await store.get_session("s1")
        assert got is not None and got.turns == 0 and got.state["n"] == 0
        assert await store.list_turns("s1") == []
        async with store.lock_session("s1", 0.5) as lock:
            await lock.commit(outcome(1, 1))
        assert [t.turn for t in await store.list_turns("s1")] == [1]

    run(store_url, body)


HOLD_AND_DIE = """
import asyncio, os, signal, sys
from agentscript.store import store_from_url

async def main():
    store = store_from_url(sys.argv[1])
    await store.open()
    async with store.lock_session("s1", 5.0):
        print("held", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # mid-turn, as a crashed worker

asyncio.run(main())
"""


def test_store_lease_of_a_killed_worker_is_taken_over_at_once(api_store: str) -> None:
    """A worker killed mid-turn leaves its lease row behind; the next turn takes it over at
    once (its holder is gone), not after the lease's time, and finds the session as before."""

    async def create(store: Store) -> None:
        await store.create_session(record())

    run(api_store, create)
    worker = subprocess.run(
        [sys.executable, "-c", HOLD_AND_DIE, api_store], capture_output=True, text=True, timeout=60
    )
    assert worker.returncode == -signal.SIGKILL and worker.stdout == "held\n", worker.stderr

    async def next_turn(store: Store) -> int:
        async with store.lock_session("s1", 5.0) as lock:  # well below the lease's 600 s
            assert lock.session.turns == 0
            await lock.commit(outcome(1, 1))
        got = await store.get_session("s1")
        assert got is not None
        return got.turns

    assert run(api_store, next_turn) == 1


def test_sqlite_lease_whose_pid_now_names_another_process_is_taken_over_at_once(
    tmp_path: Path,
) -> None:
    """In a container the restarted server has the pid of the one killed (pid 1): a lease
    names its holder's pid, when that process started and its pid namespace, so a live
    process with that pid but another start is not taken for the holder, and its lease is
    taken over at once, not after LEASE_SECONDS."""
    from agentscript.store.sqlite import PID_NAMESPACE, process_start

    url = f"sqlite:///{tmp_path / 's.db'}"
    me = os.getpid()
    started = process_start(me)
    assert started is not None  # Linux: /proc/<pid>/stat

    async def lease_of(holder: str, store: Store) -> int:
        await store.create_session(record(sid=holder[-4:]))
        sql(
            url,
            "INSERT INTO agentscript_leases (session_id, holder, until) "
            f"VALUES ('{holder[-4:]}', '{holder}:t1', {time.time() + 600})",
        )
        try:
            async with store.lock_session(holder[-4:], 0.3) as lock:
                await lock.commit(outcome(1, 1, sid=holder[-4:]))
            return 1
        except SessionBusy:
            return 0

    async def body(store: Store) -> None:
        # this very process, by pid: alive unless its start says it is another one
        ns = PID_NAMESPACE
        assert await lease_of(f"{me}.{started + 7}.{ns}.dead", store) == 1
        assert await lease_of(f"{me}.{started}.{ns}.live", store) == 0
        assert await lease_of(f"{me}.olde", store) == 0  # an earlier version's: the pid alone
        # a holder in another pid namespace (another container on the file): its pid means
        # nothing here, so its lease's time decides, even for a pid that does not run here
        assert await lease_of(f"999999.1.{ns + 1}.away", store) == 0

    run(url, body)


@contextlib.asynccontextmanager
async def two_stores(url: str) -> AsyncIterator[tuple[Store, Store]]:
    """Two open stores on one database, as two workers would have."""
    first, second = store_from_url(url), store_from_url(url)
    await first.open()
    await second.open()
    try:
        yield first, second
    finally:
        await first.close()
        await second.close()


async def failing_drop(session_id: str, holder: str) -> None:
    """A lease give-back whose connection failed just then."""
    raise StoreError("connection lost")


def lease_ran_out(url: str) -> str:
    """The statement that makes the lease a store holds run out (SQLite's are rows of their own
    table, PostgreSQL's on the session's row)."""
    if url.startswith("sqlite"):
        return "UPDATE agentscript_leases SET until = 0"
    return "UPDATE agentscript_sessions SET lease_until = 0"


def lease_holder(url: str) -> str:
    """The statement reading the holder of the one lease a store holds."""
    if url.startswith("sqlite"):
        return "SELECT holder FROM agentscript_leases"
    return "SELECT lease_holder FROM agentscript_sessions"


@pytest.mark.parametrize("slow_commits_first", [False, True], ids=["taker-first", "slow-first"])
def test_store_lease_of_another_live_store_is_waited_for(
    api_store: str, slow_commits_first: bool
) -> None:
    """Two stores on one database (two workers): a live holder's lease is respected; one whose
    time ran out is taken over. Whichever of the slow holder and the taker commits second gets
    TurnConflict, so no update is lost. A slow holder that commits first leaves the taker's
    lease in place: giving it back would let a third turn run beside the taker's."""

    async def main() -> None:
        async with two_stores(api_store) as (first, second):
            await first.create_session(record())
            async with first.lock_session("s1", 1.0) as slow:
                with pytest.raises(SessionBusy):
                    async with second.lock_session("s1", 0.1):
                        pass
                await asyncio.to_thread(sql, api_store, lease_ran_out(api_store))
                async with second.lock_session("s1", 0.1) as fast:
                    if slow_commits_first:
                        await slow.commit(outcome(1, 20))
                        holder = lease_holder(api_store)
                        assert await asyncio.to_thread(sql, api_store, holder) == fast.holder
                        third = store_from_url(api_store)
                        await third.open()
                        try:
                            with pytest.raises(SessionBusy):
                                async with third.lock_session("s1", 0.05):
                                    pass
                        finally:
                            await third.close()
                        with pytest.raises(TurnConflict):
                            await fast.commit(outcome(1, 10))
                    else:
                        await fast.commit(outcome(1, 10))
                if not slow_commits_first:
                    with pytest.raises(TurnConflict):
                        await slow.commit(outcome(1, 20))
            got = await second.get_session("s1")
            assert got is not None and got.turns == 1
            assert got.state["n"] == (20 if slow_commits_first else 10)
            assert await asyncio.to_thread(sql, api_store, leases_query(api_store)) == 0

    asyncio.run(main())


def test_store_waiter_for_another_stores_lease_polls_less_often_as_it_waits(
    api_store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A turn waiting out another worker's turn looks again 5 ms later, then twice as long
    each time up to 100 ms, and its last pause ends at its deadline: 15 statements in a
    second where a fixed 10 ms made 100. The waiter's clock is a fake one that its pauses
    advance, so the count does not depend on how fast this machine runs the statements."""
    clock = [0.0]
    pauses: list[float] = []

    async def pause(seconds: float) -> None:
        pauses.append(round(seconds, 6))
        clock[0] += seconds

    waiter_clock = SimpleNamespace(monotonic=lambda: clock[0])
    waiter_asyncio = SimpleNamespace(**{**vars(asyncio), "sleep": pause})

    async def main() -> int:
        async with two_stores(api_store) as (first, second):
            await first.create_session(record())
            looks = 0
            take = second.take_lease  # type: ignore[attr-defined]

            async def counted(*args: Any) -> Any:
                nonlocal looks
                looks += 1
                return await take(*args)

            monkeypatch.setattr(second, "take_lease", counted)
            async with first.lock_session("s1", 1.0):
                monkeypatch.setattr(lease_module, "time", waiter_clock)
                monkeypatch.setattr(lease_module, "asyncio", waiter_asyncio)
                with pytest.raises(SessionBusy):
                    async with second.lock_session("s1", 1.0):
                        pass
                monkeypatch.undo()
            return looks

    looks = asyncio.run(main())
    assert pauses[:6] == [0.005, 0.01, 0.02, 0.04, 0.08, 0.1]
    assert set(pauses[5:-1]) == {0.1} and sum(pauses) == pytest.approx(1.0)
    assert looks == len(pauses) + 1 == 15


def test_store_takes_back_its_own_lease_whose_give_back_failed(
    api_store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A turn that did not commit and could not give its lease back (the connection failed
    just then) ends with its own error; another store waits for the lease, but the session's
    next turn in the same store runs at once, even while the database still refuses the
    give-back."""

    async def main() -> None:
        async with two_stores(api_store) as (store, other):
            await store.create_session(record())
            monkeypatch.setattr(store, "drop_lease", failing_drop)
            with pytest.raises(RuntimeError, match="the turn failed"):
                async with store.lock_session("s1", 1.0):
                    raise RuntimeError("the turn failed")
            assert await asyncio.to_thread(sql, api_store, leases_query(api_store)) == 1
            with pytest.raises(SessionBusy):
                async with other.lock_session("s1", 0.05):
                    pass
            async with store.lock_session("s1", 0.05) as lock:
                await lock.commit(outcome(1, 1))
            assert await asyncio.to_thread(sql, api_store, leases_query(api_store)) == 0

    asyncio.run(main())


def test_store_gives_back_a_failed_give_back_before_its_next_turn(
    api_store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lease whose give-back failed is owed: the store drops it before its next turn of any
    session, so another worker does not wait for it until it times out."""

    async def main() -> None:
        async with two_stores(api_store) as (store, other):
            await store.create_session(record())
            await store.create_session(record("s2"))
            drop = store.drop_lease  # type: ignore[attr-defined]
            monkeypatch.setattr(store, "drop_lease", failing_drop)
            with pytest.raises(RuntimeError):
                async with store.lock_session("s1", 1.0):
                    raise RuntimeError("the turn failed")
            monkeypatch.setattr(store, "drop_lease", drop)  # the database is back
            async with store.lock_session("s2", 1.0) as lock:  # another session's turn
                await lock.commit(outcome(1, 1, sid="s2"))
            assert await asyncio.to_thread(sql, api_store, leases_query(api_store)) == 0
            async with other.lock_session("s1", 0.05) as lock:  # no wait
                await lock.commit(outcome(1, 1))

    asyncio.run(main())


def sql(url: str, statement: str) -> Any:
    """Run one statement on a SQL store's database over a connection of its own; the first
    value of its first row, if it returns any."""
    if url.startswith("sqlite:///"):
        import sqlite3

        with contextlib.closing(sqlite3.connect(url[len("sqlite:///") :])) as db, db:
            found = db.execute(statement).fetchone()
    else:
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            cur = conn.execute(statement)
            found = cur.fetchone() if cur.description else None
    return found[0] if found else None


def test_store_delete_removes_session_and_turns(store_url: str) -> None:
    async def body(store: Store) -> None:
        await store.create_session(record())
        async with store.lock_session("s1", 1.0) as lock:
            await lock.commit(outcome(1, 1))
        assert await store.delete_session("s1") is True
        assert await store.get_session("s1") is None
        assert await store.list_turns("s1") == []
        assert await store.delete_session("s1") is False
        with pytest.raises(SessionGone):
            async with store.lock_session("s1", 1.0):
                pass

    run(store_url, body)


def test_store_expired_session_reads_as_absent_and_is_purged(store_url: str) -> None:
    async def body(store: Store) -> None:
        await store.create_session(record("old", expires_at=time.time() - 1))
        await store.create_session(record("new", expires_at=time.time() + 100))
        assert await store.get_session("old") is None
        listed = await store.list_sessions(owner="k1", agent=None, limit=10, after=None)
        assert [r.session_id for r in listed] == ["new"]
        assert await store.purge_expired() == 1
        assert await store.purge_expired() == 0

    run(store_url, body)


def test_store_lists_by_owner_and_agent_in_pages(store_url: str) -> None:
    async def body(store: Store) -> None:
        for i in range(5):
            await store.create_session(record(f"s{i}", agent="A" if i % 2 else "B"))
        await store.create_session(record("x", owner="k2"))
        page = await store.list_sessions(owner="k1", agent=None, limit=2, after=None)
        assert [r.session_id for r in page] == ["s0", "s1"]
        page = await store.list_sessions(owner="k1", agent=None, limit=10, after="s1")
        assert [r.session_id for r in page] == ["s2", "s3", "s4"]
        only_a = await store.list_sessions(owner="k1", agent="A", limit=10, after=None)
        assert [r.session_id for r in only_a] == ["s1", "s3"]

    run(store_url, body)


def test_store_lists_sessions_without_reading_their_state(store_url: str) -> None:
    """A page of up to 1,000 sessions shows ids, turns and times; their states, up to millions
    of characters each, stay in the store."""

    async def body(store: Store) -> None:
        await store.create_session(record("s1", turns=3, ended=True, expires_at=None))
        async with store.lock_session("s1", 1.0) as lock:
            await lock.commit(outcome(4, 9))
        (listed,) = await store.list_sessions(owner="k1", agent=None, limit=10, after=None)
        assert (listed.session_id, listed.agent, listed.owner) == ("s1", "A", "k1")
        assert (listed.turns, listed.agent_version, listed.damaged) == (4, "v1", {})
        assert listed.state == {}
        got = await store.get_session("s1")
        assert got is not None and got.state == {"format": "x", "n": 9}

    run(store_url, body)


def test_store_keeps_the_revision_its_creation_or_last_commit_wrote(store_url: str) -> None:
    """A session's revision is the one its creation or its last commit wrote (a new one each
    commit); a lease taken and given back leaves it. The state read with it is the one that
    commit wrote, whole."""

    async def body(store: Store) -> None:
        await store.create_session(record(revision="r0"))
        async with store.lock_session("s1", 1.0) as lock:
            assert lock.session.revision == "r0"
            done = outcome(1, 5)
            await lock.commit(done)
        async with store.lock_session("s1", 1.0):
            pass  # a lease taken and given back, no commit
        async with store.lock_session("s1", 1.0) as lock:
            read = lock.session
            assert read.revision == done.revision and read.revision not in (None, "r0")
            assert (read.damaged, read.state) == ({}, {"format": "x", "n": 5})
            if store_url != "memory://":
                assert read.state_text == jsontext.dumps({"format": "x", "n": 5})
        assert outcome(1, 5).revision != done.revision

    run(store_url, body)


def test_store_state_written_by_hand_loses_its_revision(api_store: str) -> None:
    """Only a write of the state with a revision of its own keeps one: a state written by
    anything else (an operator's UPDATE, an older agentscript's commit) is not the state the
    last commit wrote, and a worker that kept that commit's session must not take it for it."""
    run(api_store, lambda store: store.create_session(record(revision="r0")))
    revision = "SELECT revision FROM agentscript_sessions"
    # PostgreSQL's lease is on the row (SQLite's has a table of its own, and its row's old
    # lease columns refuse a holder: ``schema.LEASE_ON_ROW_REFUSED_SQLITE``).
    lease = "" if api_store.startswith("sqlite") else "lease_holder = 'x:y', "
    sql(api_store, f"UPDATE agentscript_sessions SET {lease}turns = 4")
    sql(api_store, "UPDATE agentscript_sessions SET expires_at = 1e12, lease_holder = NULL")
    assert sql(api_store, revision) == "r0"
    sql(api_store, "UPDATE agentscript_sessions SET state = state")
    assert sql(api_store, revision) is None
    sql(api_store, "UPDATE agentscript_sessions SET state = '{}', revision = 'r1'")
    assert sql(api_store, revision) == "r1"
    sql(api_store, "UPDATE agentscript_sessions SET state = '{\"n\": 1}', revision = 'r1'")
    assert sql(api_store, revision) is None


def test_store_duplicate_session_id_is_refused(store_url: str) -> None:
    async def body(store: Store) -> None:
        await store.create_session(record())
        with pytest.raises(ValueError, match="already exists"):
            await store.create_session(record())

    run(store_url, body)


def test_store_reopen_keeps_sessions_and_migrates_once(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path}/s.db"

    async def first(store: Store) -> None:
        await store.create_session(record())

    async def second(store: Store) -> None:
        got = await store.get_session("s1")
        assert got is not None and got.agent == "A"

    run(url, first)
    run(url, second)


def test_store_unknown_url_scheme_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown store"):
        store_from_url("redis://localhost")


@pytest.mark.parametrize(
    "conninfo", ["host=127.0.0.1 port=5432 password=hunter2 dbname=test", " DBNAME = app"]
)
def test_a_postgresql_key_value_string_is_refused_not_taken_for_a_sqlite_file(
    conninfo: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError) as caught:
        store_from_url(conninfo)
    assert "write it as a URL: postgresql://" in str(caught.value)
    assert "hunter2" not in str(caught.value)
    assert list(tmp_path.iterdir()) == []  # no file made of it
    assert isinstance(store_from_url("data/host-notes.db"), SQLiteStore)  # paths still work


def test_a_store_written_by_a_newer_agentscript_is_refused_naming_it(
    api_store: str,
) -> None:
    """Each backend records its schema version; one ahead of this agentscript's migrations is
    a clear StoreError at open, never a store read with the wrong schema."""
    from agentscript.store import schema

    async def bump(store: Store) -> None:
        newer = str(len(schema.MIGRATIONS) + 1)
        if api_store.startswith("sqlite"):
            import sqlite3

            db = sqlite3.connect(api_store.removeprefix("sqlite:///"))
            db.execute("UPDATE agentscript_meta SET value = ?", (newer,))
            db.commit()
            db.close()
        else:
            import psycopg

            with psycopg.connect(api_store, autocommit=True) as conn:
                conn.execute("UPDATE agentscript_meta SET value = %s", (newer,))

    run(api_store, bump)
    with pytest.raises(StoreError, match="newer than this agentscript") as caught:
        run(api_store, lambda store: asyncio.sleep(0))
    assert "upgrade agentscript" in str(caught.value)


# A session row as schema versions 1 to 4 wrote it: without a revision (version 5).
OLD_SESSION_ROW = (
    "INSERT INTO agentscript_sessions (session_id, agent, owner, agent_version, format, state, "
    "turns, ended, escalated, created_at, updated_at, expires_at) "
    "VALUES ('s1', 'A', 'k1', 'v1', 'agentscript-store/1', '{\"format\": \"x\", \"n\": 0}', "
    "0, 0, 0, 0, 0, NULL)"
)


def test_a_store_of_schema_version_1_is_migrated_with_its_sessions(api_store: str) -> None:
    """Version 2 moved leases from their own table onto the session's row: a store written by
    an agentscript at version 1 opens with its sessions and turns intact, its old lease table
    dropped (an older worker still running then fails loudly instead of taking leases nobody
    reads), and its sessions take turns again."""
    from agentscript.store import schema

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:1])
        run(api_store, lambda store: asyncio.sleep(0))
    # A session that version created, a turn it committed, and a lease it left behind in its
    # own table.
    sql(api_store, OLD_SESSION_ROW)
    sql(
        api_store,
        "INSERT INTO agentscript_turns (session_id, turn, idempotency_key, result, trace, "
        "created_at) VALUES ('s1', 1, 'k', '{\"turn\": 1}', '{\"steps\": [1]}', 0)",
    )
    sql(api_store, "UPDATE agentscript_sessions SET turns = 1")
    sql(
        api_store,
        "INSERT INTO agentscript_locks (session_id, holder, until) VALUES ('s1', 'x:y', 1e12)",
    )
    assert sql(api_store, "SELECT value FROM agentscript_meta") == "1"

    async def upgraded(store: Store) -> int:
        first = await store.find_turn("s1", "k")
        assert first is not None and first.trace == {"steps": [1]}
        async with store.lock_session("s1", 0.5) as lock:
            await lock.commit(outcome(2, 5))
        got = await store.get_session("s1")
        assert got is not None and got.state["n"] == 5
        assert [t.turn for t in await store.list_turns("s1")] == [1, 2]
        return got.turns

    assert run(api_store, upgraded) == 2
    assert sql(api_store, "SELECT value FROM agentscript_meta") == str(len(schema.MIGRATIONS))
    assert sql(api_store, leases_query(api_store)) == 0
    with pytest.raises(Exception, match="agentscript_locks"):
        sql(api_store, "SELECT COUNT(*) FROM agentscript_locks")


def test_store_trace_is_kept_packed_in_sqlite_and_as_text_in_postgresql(api_store: str) -> None:
    """SQLite keeps a trace deflated (schema version 3: the bulk of a turn row, packed to about
    40 % of its text); PostgreSQL keeps the JSON text, which it compresses itself. Either way
    the trace reads back exactly, every character included."""
    steps = [
        {"kind": "llm", "text": f"Bonjour {n} \u2014 caf\u00e9 \u2615 \ud800 \U0001f600"}
        for n in range(60)
    ]
    trace = {"steps": steps}
    text = jsontext.dumps(trace)

    async def body(store: Store) -> Any:
        await store.create_session(record())
        done = outcome(1, 1, "k")
        done.record.trace = trace
        async with store.lock_session("s1", 1.0) as lock:
            await lock.commit(done)
        by_number, by_key = await store.get_turn("s1", 1), await store.find_turn("s1", "k")
        assert by_number is not None and by_key is not None
        return by_number.trace, by_key.trace

    assert run(api_store, body) == (trace, trace)
    if api_store.startswith("sqlite"):
        assert sql(api_store, "SELECT typeof(trace) FROM agentscript_turns") == "blob"
        stored = sql(api_store, "SELECT length(trace) FROM agentscript_turns")
        assert stored < len(text.encode()) / 3
    else:
        assert sql(api_store, "SELECT trace FROM agentscript_turns") == text


def test_sqlite_checkpoints_run_on_their_own_thread_not_in_a_requests_commit(
    tmp_path: Any,
) -> None:
    """A commit that crossed SQLite's WAL threshold used to copy the log into the file itself
    (5-7 ms on the event loop's thread); the store's connection now never checkpoints, and the
    checkpointer's thread copies whatever was written (turns and new sessions alike)."""
    from agentscript.store.sqlite import SQLiteStore

    async def body() -> tuple[int, int, int, int]:
        store = SQLiteStore(tmp_path / "s.db")
        store.checkpointer.interval = 0.01
        await store.open()
        try:
            (autocheckpoint,) = store.db.execute("PRAGMA wal_autocheckpoint").fetchone()
            for n in range(40):  # sessions only: no turn commits at all
                await store.create_session(record(f"s{n}"))
            copied_sessions = await copied(store, 1)
            for n in range(1, 13):
                async with store.lock_session("s1", 1.0) as lock:
                    await lock.commit(outcome(n - 1, n, sid="s1"))
            return (
                autocheckpoint,
                copied_sessions,
                await copied(store, copied_sessions + 1),
                (store.checkpointer.failed),
            )
        finally:
            await store.close()

    async def copied(store: SQLiteStore, at_least: int) -> int:
        for _ in range(500):  # the thread's work is asynchronous
            if store.checkpointer.frames >= at_least:
                break
            await asyncio.sleep(0.01)
        return store.checkpointer.frames

    autocheckpoint, after_sessions, after_turns, failed = asyncio.run(body())
    assert autocheckpoint == 0
    assert 0 < after_sessions < after_turns
    assert failed == 0
    reopened = SQLiteStore(tmp_path / "s.db")

    async def reopen() -> int:
        await reopened.open()
        try:
            session = await reopened.get_session("s1")
            assert session is not None
            return session.turns
        finally:
            await reopened.close()

    assert asyncio.run(reopen()) == 12


def watch_discards(store: Any) -> list[object]:
    """The connections the store closes from now on (a flushed pool closes its idle ones)."""
    closed: list[object] = []
    discard = store._discard

    async def counting(conn: object) -> None:
        closed.append(conn)
        await discard(conn)

    store._discard = counting
    return closed


def test_postgres_store_keeps_its_connection_after_a_busy_or_missing_session(
    pg_dsn: str,
) -> None:
    pg_reset(pg_dsn)

    async def body(store: Any) -> None:
        await store.create_session(record())
        closed = watch_discards(store)
        async with store.lock_session("s1", 1.0) as lock:
            for _ in range(3):
                with pytest.raises(SessionBusy):
                    async with store.lock_session("s1", 0.05):
                        pass
            for _ in range(3):
                with pytest.raises(SessionGone):
                    async with store.lock_session("no-such-session", 0.05):
                        pass
            await lock.commit(outcome(1, 1))
        assert closed == []
        # the connections given back are clean: the next turns run and commit on them
        for turn in (2, 3):
            async with store.lock_session("s1", 0.5) as lock:
                await lock.commit(outcome(turn, turn))
        got = await store.get_session("s1")
        assert got is not None and got.turns == 3 and closed == []

    run(pg_dsn, body)


def test_postgres_store_opens_at_most_its_connections_and_keeps_them(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A burst of statements (hundreds of turns starting at once) waits for the store's
    connections instead of opening one each: it used to run PostgreSQL out of max_connections
    ("too many clients already"). A statement that waits too long fails clearly (503)."""
    pg_reset(pg_dsn)
    from agentscript.store import postgres

    async def main() -> tuple[int, int, list[str]]:
        store = store_from_url(pg_dsn, max_connections=2)
        await store.open()
        try:
            opened: list[object] = []
            new = store._new_connection  # type: ignore[attr-defined]

            async def counting() -> object:
                opened.append(await new())
                return opened[-1]

            store._new_connection = counting  # type: ignore[attr-defined]
            for n in range(6):
                await store.create_session(record(f"s{n}"))
            found = await asyncio.gather(*(store.get_session(f"s{n}") for n in range(6)))
            ids = [r.session_id for r in found if r is not None]
            monkeypatch.setattr(postgres, "CONNECTION_WAIT", 0.05)
            async with store._conn(), store._conn():  # type: ignore[attr-defined]
                with pytest.raises(StoreError, match=r"all 2 connections .* stayed busy"):
                    await store.get_session("s0")
            assert await store.get_session("s0") is not None  # free again
            return len(opened), len(store._idle), ids  # type: ignore[attr-defined]
        finally:
            await store.close()

    opened, idle, ids = asyncio.run(main())
    # the migration's connection is reused; one more is opened, and both are kept
    assert opened == 1 and idle == 2
    assert ids == [f"s{n}" for n in range(6)]


def test_postgres_turns_hold_no_connection_or_transaction_while_they_run(pg_dsn: str) -> None:
    """A running turn holds a lease row, not a connection: many turns waiting on their models
    need neither many connections nor open transactions (which would also hold back VACUUM)."""
    pg_reset(pg_dsn)
    import psycopg

    def in_transaction() -> int:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND state LIKE 'idle in transaction%'"
            ).fetchone()
            return int(row[0]) if row else -1

    async def main() -> tuple[int, int, int]:
        store = store_from_url(pg_dsn)
        await store.open()
        try:
            for n in range(8):
                await store.create_session(record(f"s{n}"))
            async with contextlib.AsyncExitStack() as held:  # eight turns running at once
                locks = [
                    await held.enter_async_context(store.lock_session(f"s{n}", 1.0))
                    for n in range(8)
                ]
                opened = len(store._idle)  # type: ignore[attr-defined]
                waiting = await asyncio.to_thread(in_transaction)
                for n, lock in enumerate(locks):
                    await lock.commit(outcome(1, 1, sid=f"s{n}"))
            return opened, waiting, len(store._idle)  # type: ignore[attr-defined]
        finally:
            await store.close()

    opened, waiting, after = asyncio.run(main())
    assert opened == 1 and after == 1  # every turn's statements ran on the one connection
    assert waiting == 0


def test_postgres_store_takes_a_new_presence_when_its_connection_drops(pg_dsn: str) -> None:
    """The presence lock dies with its connection (a database restart, a failover, an admin's
    pg_terminate_backend): the next turn or readiness check takes a new one, so the store's
    later leases are respected by other workers again instead of looking abandoned."""
    pg_reset(pg_dsn)

    async def main() -> None:
        async with two_stores(pg_dsn) as (store, other):
            await store.create_session(record())
            before = await store.worker()  # type: ignore[attr-defined]
            pid = store._presence.info.backend_pid  # type: ignore[attr-defined]
            await asyncio.to_thread(sql, pg_dsn, f"SELECT pg_terminate_backend({pid}, 5000)")
            await asyncio.sleep(0.2)  # the backend is gone (it waited): its goodbye is read
            async with store.lock_session("s1", 1.0):  # the turn itself notices
                with pytest.raises(SessionBusy):
                    async with other.lock_session("s1", 0.1):
                        pass
            assert await store.worker() != before  # type: ignore[attr-defined]
            # a readiness check notices too
            pid = store._presence.info.backend_pid  # type: ignore[attr-defined]
            renewed = await store.worker()  # type: ignore[attr-defined]
            await asyncio.to_thread(sql, pg_dsn, f"SELECT pg_terminate_backend({pid}, 5000)")
            await asyncio.sleep(0.2)
            await store.ping()
            assert store._presence.info.backend_pid != pid  # type: ignore[attr-defined]
            assert await store.worker() != renewed  # type: ignore[attr-defined]

    asyncio.run(main())


def test_postgres_store_never_hands_out_a_connection_the_server_closed(pg_dsn: str) -> None:
    """Idle connections closed by the server (a restart, idle_session_timeout, an admin) are
    dropped when next taken, not handed to a request that would then fail with a 503."""
    pg_reset(pg_dsn)

    async def main() -> None:
        store = store_from_url(pg_dsn)
        await store.open()
        try:
            await store.create_session(record())
            await asyncio.gather(*(store.get_session("s1") for _ in range(3)))
            pids = [c.info.backend_pid for c in store._idle]  # type: ignore[attr-defined]
            assert len(pids) >= 2
            for pid in pids:
                await asyncio.to_thread(sql, pg_dsn, f"SELECT pg_terminate_backend({pid}, 5000)")
            await asyncio.sleep(0.2)
            got = await store.get_session("s1")  # no StoreError
            assert got is not None and got.session_id == "s1"
            async with store.lock_session("s1", 1.0) as lock:
                await lock.commit(outcome(1, 1))
            live = [c.info.backend_pid for c in store._idle]  # type: ignore[attr-defined]
            assert live and not set(live) & set(pids)
        finally:
            await store.close()

    asyncio.run(main())


def test_postgres_lease_writes_skip_the_wal_flush_and_turn_commits_do_not(pg_dsn: str) -> None:
    """Taking and giving back a lease runs with synchronous_commit off (no lease outlives a
    database crash, so waiting for its fsync would only slow the turn), while a turn's commit
    keeps the server's setting: it is durable once the client has its answer."""
    pg_reset(pg_dsn)
    import psycopg

    from agentscript.store import postgres, schema

    run(pg_dsn, lambda store: store.create_session(record()))
    take = {"session": "s1", "holder": "1:x", "now": time.time(), "worker": "1", "kept": None}
    commit = (
        *schema.after_turn_params(outcome(1, 1), record(), "1:x", time.time()),
        *schema.turn_params(outcome(1, 1).record),
    )
    setting = "SELECT current_setting('synchronous_commit')"
    seen = []
    with psycopg.connect(pg_dsn) as conn:  # each statement in a transaction of its own
        for statement, params in (
            (postgres.TAKE_LEASE, take),
            (schema.pyformat(postgres.DROP_LEASE), ("s1", "1:x")),
            (postgres.TAKE_LEASE, take),
            (schema.pyformat(schema.COMMIT_TURN), commit),
        ):
            assert conn.execute(statement, params).rowcount == 1  # each one wrote
            seen.append(conn.execute(setting).fetchone()[0])  # type: ignore[index]
            conn.commit()
    assert seen == ["off", "off", "off", "on"]
