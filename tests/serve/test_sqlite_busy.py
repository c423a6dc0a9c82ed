"""Another process holding the SQLite write lock (store/sqlite.py).

An operator's ``sqlite3`` shell left in ``BEGIN IMMEDIATE``, or another worker's long
transaction, holds the write lock of the store's file. The store's writes wait for it asleep on
the event loop, so the worker goes on answering its other requests meanwhile, and fail with
StoreError (503 ``store_unavailable``, naming the lock) after ``BUSY_WAIT`` seconds; a read
that finds a lock taken is tried again the same way. A purge deletes in batches, one
transaction each, so it never holds the write lock for long itself.

The other process is a connection of its own on a thread of its own: SQLite locks between two
connections of one process as between two processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest

from agentscript.store import SessionRecord, StoreError, TurnOutcome, TurnRecord, schema
from agentscript.store import sqlite as sqlite_store
from agentscript.store.sqlite import SQLiteStore

from .harness import SQLITE_LEASES, api, new_session

# How long the other process holds the lock in the tests that wait it out: long enough for a
# loop that keeps running to do many things meanwhile, far below BUSY_WAIT.
HOLD = 0.6
# The cap on anything awaited here: a test that would hang fails instead.
CAP = 30.0


class WriteLock:
    """Another process's write transaction on ``path``: held from ``__enter__`` (once it is
    taken) for ``seconds``, or until ``release``. ``ending`` is set just before it is given
    back, so whatever the store did after waiting for it happened once ``ending`` was set."""

    def __init__(self, path: Path, seconds: float = HOLD) -> None:
        self.path = path
        self.seconds = seconds
        self.held = threading.Event()
        self.ending = threading.Event()
        self._release = threading.Event()
        self._thread = threading.Thread(target=self._hold, daemon=True)

    def __enter__(self) -> WriteLock:
        self._thread.start()
        assert self.held.wait(CAP), "the other connection could not take the write lock"
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()

    def release(self) -> None:
        self._release.set()
        self._thread.join(CAP)

    def holding(self) -> bool:
        return self.held.is_set() and not self.ending.is_set()

    def _hold(self) -> None:
        db = sqlite3.connect(self.path, isolation_level=None)
        try:
            db.execute("BEGIN IMMEDIATE")
            self.held.set()
            self._release.wait(self.seconds)
            self.ending.set()
            db.execute("ROLLBACK")
        finally:
            self.ending.set()
            db.close()


class Ticker:
    """A task that counts, every 10 ms, the ticks it ran while ``lock`` was held: none when
    something blocks the event loop for the whole hold."""

    def __init__(self, lock: WriteLock) -> None:
        self.lock = lock
        self.during = 0
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Ticker:
        self._task = asyncio.create_task(self._tick())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(0.01)
            if self.lock.holding():
                self.during += 1


def busy(code: int = sqlite3.SQLITE_BUSY) -> sqlite3.OperationalError:
    """The error SQLite raises for a lock taken (``code``: SQLITE_BUSY or an extended one)."""
    exc = sqlite3.OperationalError("database is locked")
    exc.sqlite_errorcode = code
    exc.sqlite_errorname = "SQLITE_BUSY"
    return exc


class BusyFirst:
    """The store's connection, whose statements that ``matches`` find a lock taken their
    first ``times`` tries each (as a reader does while another connection recovers the log,
    or a writer while another holds the write lock); ``before`` runs before every statement."""

    def __init__(
        self,
        db: sqlite3.Connection,
        matches: Callable[[str], bool],
        times: int = 3,
        code: int = sqlite3.SQLITE_BUSY,
        before: Callable[[sqlite3.Connection, str], None] | None = None,
    ) -> None:
        self._db = db
        self.matches = matches
        self.times = times
        self.code = code
        self.before = before
        self.tries: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)

    def execute(self, sql: str, params: Any = ()) -> sqlite3.Cursor:
        if self.before is not None:
            self.before(self._db, sql)
        if self.matches(sql):
            tries = self.tries[sql] = self.tries.get(sql, 0) + 1
            if tries <= self.times:
                raise busy(self.code)
        return self._db.execute(sql, params)


@contextlib.contextmanager
def connection(store: SQLiteStore, wrapper: Any) -> Any:
    real = store.db
    store._db = wrapper
    try:
        yield wrapper
    finally:
        store._db = real


def record(sid: str, expires_at: float | None = None) -> SessionRecord:
    return SessionRecord(sid, "A", "", "v1", {"format": "x", "n": 0}, expires_at=expires_at)


def outcome(sid: str, turn: int) -> TurnOutcome:
    return TurnOutcome(
        state={"format": "x", "n": turn},
        record=TurnRecord(sid, turn, {"turn": turn}, {"steps": [turn]}, f"key-{turn}"),
        ended=False,
        escalated=False,
        expires_at=None,
    )


@contextlib.asynccontextmanager
async def opened(path: Path) -> AsyncIterator[SQLiteStore]:
    """A store at ``path`` holding session ``a`` with one turn."""
    store = SQLiteStore(path)
    await store.open()
    try:
        await store.create_session(record("a"))
        async with store.lock_session("a", 1.0) as lease:
            await lease.commit(outcome("a", 1))
        yield store
    finally:
        await store.close()


def leases(path: Path) -> int:
    with contextlib.closing(sqlite3.connect(path)) as db:
        return int(db.execute(SQLITE_LEASES).fetchone()[0])


# ------------------------------------------------------------------ a lock waited out


async def create(store: SQLiteStore, lock: WriteLock) -> None:
    with lock:
        await store.create_session(record("b"))
        assert lock.ending.is_set()
    assert await store.get_session("b") is not None


async def take_lease(store: SQLiteStore, lock: WriteLock) -> None:
    with lock:
        async with store.lock_session("a", CAP) as lease:
            assert lock.ending.is_set()
            await lease.commit(outcome("a", 2))
    found = await store.get_session("a")
    assert found is not None and found.turns == 2


async def commit(store: SQLiteStore, lock: WriteLock) -> None:
    async with store.lock_session("a", CAP) as lease:
        with lock:
            await lease.commit(outcome("a", 2))
            assert lock.ending.is_set()
    found = await store.get_session("a")
    assert found is not None and found.turns == 2
    assert [t.turn for t in await store.list_turns("a")] == [1, 2]


async def drop_lease(store: SQLiteStore, lock: WriteLock) -> None:
    assert await store.take_lease("a", "me:1") == (True, await store.get_session("a"))
    with lock:
        await store.drop_lease("a", "me:1")
        assert lock.ending.is_set()
    assert leases(store.path) == 0


async def delete(store: SQLiteStore, lock: WriteLock) -> None:
    with lock:
        assert await store.delete_session("a")
        assert lock.ending.is_set()
    assert await store.get_session("a") is None


async def purge(store: SQLiteStore, lock: WriteLock) -> None:
    await store.create_session(record("old", expires_at=time.time() - 1))
    with lock:
        assert await store.purge_expired() == 1
        assert lock.ending.is_set()
    assert await store.get_session("a") is not None


WRITES: dict[str, Callable[[SQLiteStore, WriteLock], Awaitable[None]]] = {
    "create_session": create,
    "take_lease": take_lease,
    "commit_turn": commit,
    "drop_lease": drop_lease,
    "delete_session": delete,
    "purge_expired": purge,
}


@pytest.mark.parametrize("write", list(WRITES))
def test_sqlite_write_waits_for_another_process_lock_while_the_loop_runs(
    tmp_path: Path, write: str
) -> None:
    """Each write issued while another process holds the write lock succeeds once it is
    given back; meanwhile the event loop kept running (the old store slept in SQLite's busy
    handler on the loop's thread: no other task ran for the whole hold)."""

    async def main() -> None:
        path = tmp_path / "sessions.db"
        async with opened(path) as store:
            # Held from where the write under test enters its ``with lock`` block.
            lock = WriteLock(path)
            async with Ticker(lock) as ticker:
                await asyncio.wait_for(WRITES[write](store, lock), CAP)
            assert ticker.during >= 5, ticker.during

    asyncio.run(main())


def test_sqlite_api_answers_health_and_other_sessions_while_a_turn_waits_for_the_lock(
    tmp_path: Path,
) -> None:
    """Through the ASGI app: while another process holds the write lock, a turn waits for it
    and then commits, and the same worker answers /healthz and reads other sessions
    meanwhile."""
    path = tmp_path / "sessions.db"

    async def main() -> None:
        async with api(f"sqlite:///{path}") as client:
            waiting, other = await new_session(client), await new_session(client)
            answered: list[tuple[int, int]] = []
            with WriteLock(path) as lock:
                turn = asyncio.create_task(
                    client.post(f"/v1/sessions/{waiting}/messages", json={"text": "hello"})
                )
                while not turn.done():
                    health = await client.get("/healthz")
                    read = await client.get(f"/v1/sessions/{other}")
                    if lock.holding():
                        answered.append((health.status_code, read.status_code))
                    await asyncio.sleep(0.02)
                sent = await asyncio.wait_for(turn, CAP)
                assert lock.ending.is_set()
            assert sent.status_code == 200, sent.text
            assert len(answered) >= 5 and set(answered) == {(200, 200)}, answered
            session = (await client.get(f"/v1/sessions/{waiting}")).json()
            assert session["turns"] == 1

    asyncio.run(main())


# ------------------------------------------------------------------ a lock held too long


def test_sqlite_lock_held_past_busy_wait_is_a_store_error_naming_it_and_then_clears(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every write fails with StoreError once the lock was held BUSY_WAIT seconds, naming
    the lock; reads are served meanwhile; once the lock is given back the store works as
    before, no lease left behind."""
    monkeypatch.setattr(sqlite_store, "BUSY_WAIT", 0.5)
    path = tmp_path / "sessions.db"

    async def main() -> None:
        async with opened(path) as store:
            await store.create_session(record("old", expires_at=time.time() - 1))
            with WriteLock(path, seconds=CAP) as lock:
                failing: list[Callable[[], Awaitable[Any]]] = [
                    lambda: store.create_session(record("b")),
                    lambda: take_and_commit(store, "a", 2),
                    lambda: store.delete_session("a"),
                    lambda: store.purge_expired(),
                    lambda: store.drop_lease("a", "someone:1"),
                ]
                for write in failing:
                    with pytest.raises(StoreError, match=r"held the write lock .* for 0.5 s"):
                        await asyncio.wait_for(write(), CAP)
                assert lock.holding()  # each failed on its own, not at the lock's end
                found = await store.get_session("a")  # a read waits for no writer
                assert found is not None and found.turns == 1
            assert leases(path) == 0
            await store.create_session(record("b"))
            await take_and_commit(store, "a", 2)
            assert await store.purge_expired() == 1
            assert await store.delete_session("b")

    asyncio.run(main())


async def take_and_commit(store: SQLiteStore, sid: str, turn: int) -> None:
    async with store.lock_session(sid, CAP) as lease:
        await lease.commit(outcome(sid, turn))


def test_sqlite_api_turn_create_and_delete_are_503_while_the_lock_stays_held(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Through the ASGI app: 503 ``store_unavailable``, its log line naming the lock (the
    answer names none of the store), the server still healthy; the same requests succeed
    once the lock is given back."""
    monkeypatch.setattr(sqlite_store, "BUSY_WAIT", 0.5)
    path = tmp_path / "sessions.db"

    async def main() -> None:
        async with api(f"sqlite:///{path}") as client:
            sid = await new_session(client)
            with WriteLock(path, seconds=CAP):
                refused = [
                    await client.post(f"/v1/sessions/{sid}/messages", json={"text": "hello"}),
                    await client.post("/v1/agents/Notes/sessions", json={"variables": {}}),
                    await client.delete(f"/v1/sessions/{sid}"),
                ]
                for response in refused:
                    error = response.json()["error"]
                    assert (response.status_code, error["code"]) == (503, "store_unavailable")
                    assert "lock" not in error["message"] and str(path) not in error["message"]
                said = [r.getMessage() for r in caplog.records if r.name == "agentscript.server"]
                assert len(said) == 3 and all("held the write lock" in line for line in said)
                assert (await client.get("/healthz")).status_code == 200
                assert (await client.get(f"/v1/sessions/{sid}")).status_code == 200
            sent = await client.post(f"/v1/sessions/{sid}/messages", json={"text": "hello"})
            assert sent.status_code == 200, sent.text
            await new_session(client)
            assert (await client.delete(f"/v1/sessions/{sid}")).status_code == 204

    asyncio.run(main())


# ------------------------------------------------------------------ a read or a lease step busy


def test_sqlite_reads_that_find_a_lock_taken_are_tried_again_not_failed(tmp_path: Path) -> None:
    """A reader gets SQLITE_BUSY in rare cases (another connection recovering the log): the
    read is tried again, not answered with a spurious 503."""

    async def main() -> None:
        async with opened(tmp_path / "sessions.db") as store:
            busy_reads = BusyFirst(
                store.db, lambda sql: sql.startswith("SELECT"), code=sqlite3.SQLITE_BUSY_RECOVERY
            )
            with connection(store, busy_reads):
                found = await store.get_session("a")
                assert found is not None and found.turns == 1
                listed = await store.list_sessions(owner="", agent=None, limit=10, after=None)
                assert [s.session_id for s in listed] == ["a"]
                turn = await store.get_turn("a", 1)
                assert turn is not None and turn.result == {"turn": 1}
                assert await store.find_turn("a", "key-1") is not None
                assert [t.turn for t in await store.list_turns("a")] == [1]
                await store.ping()
            assert len(busy_reads.tries) == 6 and set(busy_reads.tries.values()) == {4}

    asyncio.run(main())


def test_sqlite_lease_statement_busy_midway_is_tried_alone_leaving_one_lease(
    tmp_path: Path,
) -> None:
    """take_lease runs several statements, each committing on its own: the read after the
    lease was taken finding a lock taken is tried again alone, and the turn runs under the
    one lease taken."""
    path = tmp_path / "sessions.db"

    async def main() -> None:
        async with opened(path) as store:
            busy_read = BusyFirst(store.db, lambda sql: sql == schema.SELECT_SESSION_UNLESS_KEPT)
            with connection(store, busy_read):
                async with store.lock_session("a", CAP) as lease:
                    assert lease.session.turns == 1
                    assert leases(path) == 1
                    await lease.commit(outcome("a", 2))
            assert busy_read.tries == {schema.SELECT_SESSION_UNLESS_KEPT: 4}
            assert leases(path) == 0
            found = await store.get_session("a")
            assert found is not None and found.turns == 2

    asyncio.run(main())


def test_sqlite_lease_on_a_session_expiring_midway_is_dropped_though_the_drop_was_busy(
    tmp_path: Path,
) -> None:
    """The session expires between the lease taken and the session read: the lease is
    dropped, that drop finding a lock taken at first. Trying the whole take_lease again
    instead would leave the lease written (an expired session is not found by its first
    steps)."""
    path = tmp_path / "sessions.db"

    def expire(db: sqlite3.Connection, sql: str) -> None:
        if sql == schema.SELECT_SESSION_UNLESS_KEPT:  # the lease is taken by now
            db.execute("UPDATE agentscript_sessions SET expires_at = ?", (time.time() - 1,))

    async def main() -> None:
        async with opened(path) as store:
            busy_drop = BusyFirst(
                store.db, lambda sql: sql == sqlite_store.DROP_LEASE, before=expire
            )
            with connection(store, busy_drop):
                assert await store.take_lease("a", "me:1") == (True, None)
            assert busy_drop.tries == {sqlite_store.DROP_LEASE: 4}
            assert leases(path) == 0

    asyncio.run(main())


# ------------------------------------------------------------------ purge in batches


class CountsBegins:
    """The store's connection, noting at each BEGIN how many times a task on the loop has
    run by then."""

    def __init__(self, db: sqlite3.Connection, ticks: list[int]) -> None:
        self._db = db
        self.ticks = ticks
        self.begins: list[int] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)

    def execute(self, sql: str, params: Any = ()) -> sqlite3.Cursor:
        if sql.startswith("BEGIN"):
            self.begins.append(self.ticks[0])
        return self._db.execute(sql, params)


def expired_sessions(path: Path, count: int, turns: int = 2) -> None:
    """``count`` expired sessions with ``turns`` turns each, written directly."""
    past = time.time() - 60
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as db:
        db.execute("BEGIN")
        db.executemany(
            schema.INSERT_SESSION,
            [schema.session_params(record(f"x{n:05}", expires_at=past)) for n in range(count)],
        )
        db.executemany(
            schema.INSERT_TURN,
            [
                schema.turn_params(outcome(f"x{n:05}", turn).record, packed_trace=True)
                for n in range(count)
                for turn in range(1, turns + 1)
            ],
        )
        db.execute("COMMIT")


@pytest.mark.parametrize("batch", [None, 100])
def test_sqlite_purge_deletes_expired_sessions_in_batches_yielding_between_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batch: int | None
) -> None:
    """1,200 expired sessions and their turns go, in one transaction per batch, the loop
    running other tasks between two; live sessions (and ones expiring later) stay."""
    if batch is not None:
        monkeypatch.setattr(sqlite_store, "PURGE_BATCH", batch)
    size = sqlite_store.PURGE_BATCH
    path = tmp_path / "sessions.db"

    async def main() -> None:
        async with opened(path) as store:
            await store.create_session(record("later", expires_at=time.time() + 3600))
            expired_sessions(path, 1200)
            ticks = [0]

            async def tick() -> None:
                while True:
                    ticks[0] += 1
                    await asyncio.sleep(0)

            counting = CountsBegins(store.db, ticks)
            ticker = asyncio.create_task(tick())
            try:
                with connection(store, counting):
                    purged = await asyncio.wait_for(store.purge_expired(), CAP)
            finally:
                ticker.cancel()
            assert purged == 1200
            assert len(counting.begins) >= math.ceil(1200 / size) > 1
            # Another task ran between each two transactions.
            assert all(b > a for a, b in zip(counting.begins, counting.begins[1:], strict=False))
            with contextlib.closing(sqlite3.connect(path)) as db:
                sessions = db.execute("SELECT session_id FROM agentscript_sessions").fetchall()
                turns = db.execute("SELECT DISTINCT session_id FROM agentscript_turns").fetchall()
            assert sorted(sessions) == [("a",), ("later",)]
            assert turns == [("a",)]
            assert await store.purge_expired() == 0

    asyncio.run(main())
