"""The SQLite file replaced or removed under a running store, and a commit on a full disk
(store/sqlite.py, store/checkpoint.py).

A store whose path names another file (a backup restored with ``mv``) refuses every operation,
reads included, rather than serve the old file's sessions and write to a file nobody will read;
it empties its log into the file it opened and lets go of it, so the old file's log is never
replayed into the new file, whether the next process opens it while this one runs, after it
was killed, or after it closed. A file removed is refused until it comes back.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2 as httpx
import pytest

from agentscript.server.agents import load_agents, serve_agents
from agentscript.server.app import create_app
from agentscript.server.auth import ApiKeys
from agentscript.server.standin import StandInModel
from agentscript.store import SessionRecord, StoreError, TurnOutcome, TurnRecord
from agentscript.store.checkpoint import Checkpointer
from agentscript.store.sqlite import SQLiteStore

from .harness import NOTES, new_session

OLD = [f"old-{n}" for n in range(8)]  # the sessions of the file the store opened
NEW = [f"new-{n}" for n in range(3)]  # the sessions of the file put in its place


def record(sid: str, agent: str = "A") -> SessionRecord:
    return SessionRecord(sid, agent, "", "v1", {"format": "x", "n": 0})


def outcome(sid: str, turn: int) -> TurnOutcome:
    return TurnOutcome(
        state={"format": "x", "n": turn},
        record=TurnRecord(sid, turn, {"turn": turn}, {"steps": [turn] * 200}, f"key-{turn}"),
        ended=False,
        escalated=False,
        expires_at=None,
    )


async def opened(path: Path, sessions: list[str], *, interval: float | None = None) -> SQLiteStore:
    """A store at ``path`` holding ``sessions``, each with two turns."""
    store = SQLiteStore(path)
    if interval is not None:
        store.checkpointer.interval = interval
    await store.open()
    for sid in sessions:
        await store.create_session(record(sid))
        for turn in (1, 2):
            async with store.lock_session(sid, 1.0) as lock:
                await lock.commit(outcome(sid, turn))
    return store


async def other_file(path: Path, sessions: list[str]) -> Path:
    """A closed store file (no log beside it) holding ``sessions``."""
    store = await opened(path, sessions)
    await store.close()
    return path


def copy_as_found(path: Path, into: Path) -> Path:
    """``path`` with its ``-wal`` and ``-shm`` as they are now, copied to ``into``: what a
    process that starts now (or after a kill -9 of this one) opens."""
    into.mkdir()
    for suffix in ("", "-wal", "-shm"):
        source = Path(f"{path}{suffix}")
        if source.exists():
            shutil.copyfile(source, into / f"{path.name}{suffix}")
    return into / path.name


def contents(path: Path) -> tuple[str, set[str]]:
    """The integrity check of the store file at ``path`` and its session ids."""
    try:
        with contextlib.closing(sqlite3.connect(path)) as db:
            (check,) = db.execute("PRAGMA integrity_check").fetchone()
            rows = db.execute("SELECT session_id FROM agentscript_sessions").fetchall()
    except sqlite3.Error as exc:
        return f"unreadable: {exc}", set()
    return check, {row[0] for row in rows}


# Each operation of the store, run first once the file has changed (so that each one is the
# one that sees it).
OPERATIONS: dict[str, Callable[[SQLiteStore, SessionRecord], Awaitable[Any]]] = {
    "get_session": lambda store, old: store.get_session(old.session_id),
    "list_sessions": lambda store, old: store.list_sessions(
        owner="", agent=None, limit=100, after=None
    ),
    "find_turn": lambda store, old: store.find_turn(old.session_id, "key-1"),
    "get_turn": lambda store, old: store.get_turn(old.session_id, 1),
    "list_turns": lambda store, old: store.list_turns(old.session_id),
    "list_turns_with_traces": lambda store, old: store.list_turns_with_traces(old.session_id, 10),
    "delete_session": lambda store, old: store.delete_session(old.session_id),
    "take_lease": lambda store, old: store.take_lease(old.session_id, "someone:1"),
    "drop_lease": lambda store, old: store.drop_lease(old.session_id, "someone:1"),
    "commit_turn": lambda store, old: store.commit_turn(old, outcome(old.session_id, 3), "me:1"),
    "purge_expired": lambda store, old: store.purge_expired(),
}


async def lock_and_commit(store: SQLiteStore, old: SessionRecord) -> None:
    async with store.lock_session(old.session_id, 1.0) as lock:
        await lock.commit(outcome(old.session_id, 3))


EVERY_OPERATION = {
    **OPERATIONS,
    "ping": lambda store, old: store.ping(),
    "create_session": lambda store, old: store.create_session(record("another")),
    "lock_session": lock_and_commit,
}


async def refusals(store: SQLiteStore, old: SessionRecord) -> dict[str, str]:
    """What each operation of the store raises now: its StoreError's message, or what it
    did instead."""
    found: dict[str, str] = {}
    for name, operation in EVERY_OPERATION.items():
        try:
            await operation(store, old)
        except StoreError as exc:
            found[name] = str(exc)
        except Exception as exc:  # reported, not hidden
            found[name] = f"raised {type(exc).__name__}: {exc}"
        else:
            found[name] = "answered"
    return found


# ------------------------------------------------------------------ replaced


@pytest.mark.parametrize("first", list(OPERATIONS))
def test_every_operation_refuses_once_the_sqlite_file_is_replaced(
    tmp_path: Path, first: str
) -> None:
    path = tmp_path / "sessions.db"

    async def replace() -> None:
        os.replace(await other_file(tmp_path / "restored.db", NEW), path)

    asyncio.run(refused_from_the_first(path, replace, first, "replaced"))
    assert contents(path) == ("ok", set(NEW))


async def refused_from_the_first(
    path: Path, change: Callable[[], Awaitable[None]], first: str, word: str
) -> None:
    """After ``change`` to the file of a store, operation ``first`` is refused naming the file
    and saying ``word``, and from then on every operation gives the same answer (until the
    server restarts)."""
    store = await opened(path, OLD)
    old = await store.get_session(OLD[0])
    assert old is not None
    await change()
    try:
        with pytest.raises(StoreError) as refused:
            await OPERATIONS[first](store, old)
        assert str(path) in str(refused.value) and word in str(refused.value)
        assert await refusals(store, old) == dict.fromkeys(EVERY_OPERATION, str(refused.value))
    finally:
        await store.close()


@asynccontextmanager
async def serving(store: SQLiteStore) -> AsyncIterator[httpx.AsyncClient]:
    """The real ASGI app over ``store`` (opened and closed by the app)."""
    agents = load_agents([NOTES])
    served = serve_agents(agents, {a.name: StandInModel() for a in agents})
    app = create_app(served, store, keys=ApiKeys.of(), purge_every=None)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client,
    ):
        yield client


def error_of(response: httpx.Response) -> tuple[int, str, str]:
    error = response.json()["error"]
    return response.status_code, error["code"], error["message"]


def test_api_answers_503_never_stale_data_once_the_sqlite_file_is_replaced(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "sessions.db"

    async def main() -> None:
        async with serving(SQLiteStore(path)) as client:
            sid = await new_session(client)
            sent = await client.post(f"/v1/sessions/{sid}/messages", json={"text": "hello"})
            assert sent.status_code == 200, sent.text
            restored = await other_file(tmp_path / "restored.db", NEW)
            os.replace(restored, path)
            for method, url in (
                ("GET", f"/v1/sessions/{sid}"),
                ("GET", "/v1/sessions"),
                ("GET", f"/v1/sessions/{sid}/turns"),
                ("GET", f"/v1/sessions/{sid}/turns/1/trace"),
                ("DELETE", f"/v1/sessions/{sid}"),
                ("GET", f"/v1/sessions/{NEW[0]}"),
                ("POST", "/v1/agents/Notes/sessions"),
            ):
                status, code, message = error_of(await client.request(method, url))
                assert (status, code) == (503, "store_unavailable"), (method, url, message)
                # The file is named in the log line, not to the client.
                assert str(path) not in message
                assert str(path) in caplog.records[-1].getMessage()
            sent = await client.post(f"/v1/sessions/{sid}/messages", json={"text": "again"})
            assert error_of(sent)[:2] == (503, "store_unavailable")
            status, code, message = error_of(await client.get("/readyz"))
            # Anyone may ask /readyz: it names the kind of store, never the file (the log does).
            assert (status, code) == (503, "not_ready") and str(path) not in message
            assert message == "the sqlite store does not answer (the log says why)"

    asyncio.run(main())
    assert contents(path) == ("ok", set(NEW))


# ------------------------------------------------------------------ the new file is intact


def test_the_new_file_is_intact_after_a_store_let_go_of_the_file_it_replaced(
    tmp_path: Path,
) -> None:
    """The old file's log is never replayed into the new one: not by a process that starts
    once the store has seen the change (as after a kill -9 of the server), nor after it
    closed."""
    path = tmp_path / "sessions.db"

    async def main() -> None:
        store = await opened(path, OLD)
        await store.create_session(record("written-last"))  # its frames are in the log
        os.replace(await other_file(tmp_path / "restored.db", NEW), path)
        with pytest.raises(StoreError):
            await store.get_session(OLD[0])
        assert contents(copy_as_found(path, tmp_path / "killed")) == ("ok", set(NEW))
        await store.close()
        assert contents(copy_as_found(path, tmp_path / "closed")) == ("ok", set(NEW))

    asyncio.run(main())
    assert contents(path) == ("ok", set(NEW))


async def log_emptied(log: Path) -> None:
    for _ in range(500):  # the checkpointer's work is asynchronous
        if log.stat().st_size == 0:
            return
        await asyncio.sleep(0.01)


def test_the_new_file_is_intact_when_the_file_is_replaced_under_an_idle_store(
    tmp_path: Path,
) -> None:
    """No request comes: the checkpointer's thread sees the change and empties the log."""
    path = tmp_path / "sessions.db"
    log = Path(f"{path}-wal")

    async def main() -> None:
        store = await opened(path, OLD, interval=0.01)
        await store.create_session(record("written-last"))
        assert log.stat().st_size > 0
        os.replace(await other_file(tmp_path / "restored.db", NEW), path)
        await log_emptied(log)
        assert contents(copy_as_found(path, tmp_path / "killed")) == ("ok", set(NEW))
        with pytest.raises(StoreError, match="replaced"):
            await store.list_sessions(owner="", agent=None, limit=10, after=None)
        await store.close()
        assert contents(copy_as_found(path, tmp_path / "closed")) == ("ok", set(NEW))

    asyncio.run(main())


async def seen_by_the_thread(store: SQLiteStore, path: Path, tmp_path: Path) -> None:
    os.replace(await other_file(tmp_path / "restored.db", NEW), path)
    await log_emptied(Path(f"{path}-wal"))


async def seen_removed_first(store: SQLiteStore, path: Path, tmp_path: Path) -> None:
    os.rename(path, tmp_path / "moved.db")
    with pytest.raises(StoreError, match="removed"):
        await store.get_session(OLD[0])
    os.replace(await other_file(tmp_path / "restored.db", NEW), path)


@pytest.mark.parametrize(
    "change", [seen_by_the_thread, seen_removed_first], ids=["idle", "removed-then-replaced"]
)
def test_the_new_file_is_intact_when_another_process_opens_it_before_the_store_closes(
    tmp_path: Path, change: Callable[[SQLiteStore, Path, Path], Awaitable[None]]
) -> None:
    """A process that opens the new file while this store still runs (a new server started
    beside the old one) keeps what it commits: the old store emptied its log when it first saw
    the change, and never checkpoints that log again (it would move the other process's
    commits into the old file)."""
    path = tmp_path / "sessions.db"

    async def main() -> None:
        store = await opened(path, OLD, interval=0.01)
        await store.create_session(record("written-last"))
        await change(store, path, tmp_path)
        other = subprocess.Popen(
            [sys.executable, "-c", OTHER_PROCESS, str(path), NEW[0]],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert other.stdout is not None and other.stdout.readline() == "committed\n"
            await asyncio.sleep(0.1)  # rounds of the old store's checkpointer, if it runs
            for operation in OPERATIONS.values():
                with pytest.raises(StoreError, match="replaced"):
                    await operation(store, record(OLD[0]))
            await store.close()
            # As a process that starts now would find it, the other one still running.
            copied = copy_as_found(path, tmp_path / "copied")
            assert contents(copied) == ("ok", set(NEW))
            assert turns_of(copied) == 7
            answer, _ = other.communicate("\n", timeout=30)
        finally:
            if other.poll() is None:
                other.kill()
        assert answer == "7\n"  # what it committed is still there for it

    asyncio.run(main())
    assert contents(path) == ("ok", set(NEW))
    assert turns_of(path) == 7


# Opens the new file while the old store runs, commits (kept in the log), and reads it back
# once told to.
OTHER_PROCESS = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("PRAGMA wal_autocheckpoint=0")
query = "UPDATE agentscript_sessions SET turns = 7 WHERE session_id = ?"
db.execute(query, (sys.argv[2],))
print("committed", flush=True)
sys.stdin.readline()
query = "SELECT turns FROM agentscript_sessions WHERE session_id = ?"
print(db.execute(query, (sys.argv[2],)).fetchone()[0], flush=True)
db.close()
"""


def turns_of(path: Path) -> int:
    with contextlib.closing(sqlite3.connect(path)) as db:
        query = "SELECT turns FROM agentscript_sessions WHERE session_id = ?"
        return int(db.execute(query, (NEW[0],)).fetchone()[0])


def test_the_checkpointer_connects_with_the_store_and_never_creates_a_file(
    tmp_path: Path,
) -> None:
    """Its thread used to connect whenever it first ran: to a file put at the path meanwhile
    (then checkpointing the store's log into it), or creating an empty one there."""
    missing = tmp_path / "sessions.db"
    checkpointer = Checkpointer(missing, interval=0.01)
    try:
        with pytest.raises(sqlite3.OperationalError):
            checkpointer.start()
    finally:
        checkpointer.stop()
    assert not missing.exists()


# ------------------------------------------------------------------ removed


def remove_by_unlink(path: Path, tmp_path: Path) -> None:
    path.unlink()


def remove_by_rename(path: Path, tmp_path: Path) -> None:
    os.rename(path, tmp_path / "moved.db")


@pytest.mark.parametrize("remove", [remove_by_unlink, remove_by_rename], ids=["rm", "mv"])
@pytest.mark.parametrize("first", list(OPERATIONS))
def test_every_operation_refuses_while_the_sqlite_file_is_removed(
    tmp_path: Path, first: str, remove: Callable[[Path, Path], None]
) -> None:
    path = tmp_path / "sessions.db"

    async def gone() -> None:
        remove(path, tmp_path)

    asyncio.run(refused_from_the_first(path, gone, first, "removed"))


def test_a_file_renamed_away_takes_its_log_with_it_and_a_file_put_in_its_place_is_intact(
    tmp_path: Path,
) -> None:
    path = tmp_path / "sessions.db"
    moved = tmp_path / "moved.db"

    async def main() -> None:
        store = await opened(path, OLD)
        await store.create_session(record("written-last"))
        os.rename(path, moved)
        with pytest.raises(StoreError, match="removed"):
            await store.get_session(OLD[0])
        # The moved file holds every session on its own: the log went into it.
        alone = tmp_path / "alone"
        alone.mkdir()
        shutil.copyfile(moved, alone / "moved.db")
        assert contents(alone / "moved.db") == ("ok", {*OLD, "written-last"})
        # Another file put in its place is not replayed the old log either.
        os.replace(await other_file(tmp_path / "restored.db", NEW), path)
        with pytest.raises(StoreError, match="replaced"):
            await store.get_session(OLD[0])
        assert contents(copy_as_found(path, tmp_path / "killed")) == ("ok", set(NEW))
        await store.close()

    asyncio.run(main())
    assert contents(path) == ("ok", set(NEW))


# ------------------------------------------------------------------ a full disk


@contextlib.contextmanager
def no_room() -> Iterator[None]:
    """Writes past the first KiB of any file fail for this process meanwhile (RLIMIT_FSIZE): a
    real write failure inside SQLite, as on a full disk."""
    resource = pytest.importorskip("resource")
    import signal

    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    handler = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a kill
    resource.setrlimit(resource.RLIMIT_FSIZE, (1024, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, handler)


class FullAtCommit:
    """The store's connection, whose COMMITs find no room on the disk: SQLite fails the
    commit writing its log and ends the transaction itself."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db
        self.failed = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._db, name)

    def execute(self, sql: str, params: Any = ()) -> sqlite3.Cursor:
        if sql != "COMMIT":
            return self._db.execute(sql, params)
        self.failed += 1
        with no_room():
            return self._db.execute(sql)


def test_a_delete_whose_commit_finds_the_disk_full_is_a_store_error_and_keeps_the_session(
    tmp_path: Path,
) -> None:
    async def main() -> None:
        store = await opened(tmp_path / "sessions.db", OLD[:2])
        real = store.db
        full = FullAtCommit(real)
        store._db = full  # type: ignore[assignment]
        try:
            with pytest.raises(StoreError, match="SQLite store"):
                await store.delete_session(OLD[0])
            assert full.failed == 1 and not real.in_transaction
        finally:
            store._db = real
        # Still usable: the session is there, and goes on a disk with room.
        assert await store.get_session(OLD[0]) is not None
        assert [t.turn for t in await store.list_turns(OLD[0])] == [1, 2]
        assert await store.delete_session(OLD[0])
        assert await store.get_session(OLD[0]) is None
        await store.close()

    asyncio.run(main())


def test_api_delete_on_a_full_disk_is_503_and_the_session_stays(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "sessions.db")

    async def main() -> None:
        async with serving(store) as client:
            sid = await new_session(client)
            real = store.db
            store._db = FullAtCommit(real)  # type: ignore[assignment]
            try:
                deleted = await client.delete(f"/v1/sessions/{sid}")
            finally:
                store._db = real
            assert error_of(deleted)[:2] == (503, "store_unavailable")
            assert (await client.get(f"/v1/sessions/{sid}")).status_code == 200
            sent = await client.post(f"/v1/sessions/{sid}/messages", json={"text": "still"})
            assert sent.status_code == 200, sent.text
            assert (await client.delete(f"/v1/sessions/{sid}")).status_code == 204

    asyncio.run(main())


def log_with_a_reader(path: Path) -> tuple[sqlite3.Connection, sqlite3.Connection]:
    """A WAL database at ``path`` with commits still in its log, the store's own connection
    (busy_timeout a few ms, as the store keeps it) and a reader holding a snapshot of it from
    another thread's connection."""
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA wal_autocheckpoint=0")
    db.execute("CREATE TABLE t (x)")
    db.executemany("INSERT INTO t VALUES (?)", [(n,) for n in range(100)])
    db.execute("PRAGMA busy_timeout=5")
    reader = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    reader.execute("BEGIN")
    assert reader.execute("SELECT count(*) FROM t").fetchone() == (100,)
    return db, reader


@pytest.mark.parametrize("wait_ms", [5000, 1], ids=["waits", "no-wait"])
def test_the_one_checkpoint_of_a_replaced_file_waits_out_a_reader_for_up_to_5_s(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wait_ms: int
) -> None:
    # The store's statements wait 5 ms for another connection's lock; the one checkpoint that
    # empties the log of a replaced file waits up to EMPTY_WAIT_MS (5 s) for its own: a log left
    # partly copied would be replayed into the file now at the path.
    from agentscript.store import checkpoint

    monkeypatch.setattr(checkpoint, "EMPTY_WAIT_MS", wait_ms)
    path = tmp_path / "sessions.db"
    db, reader = log_with_a_reader(path)
    watch = checkpoint.FileWatch(path)
    watch.start()
    other = tmp_path / "other.db"
    sqlite3.connect(other).close()
    os.replace(other, path)
    log = Path(f"{path}-wal")
    assert log.stat().st_size > 0
    # Waiting, the reader lets go 0.3 s into the checkpoint; not waiting, only after it.
    releaser = threading.Timer(0.3 if wait_ms == 5000 else 0, lambda: reader.execute("COMMIT"))
    if wait_ms == 5000:
        releaser.start()
    try:
        assert watch.changed(db) == "replaced"
    finally:
        if wait_ms != 5000:
            releaser.start()
        releaser.join()
    emptied = log.stat().st_size == 0
    assert emptied is (wait_ms == 5000)
    assert db.execute("PRAGMA busy_timeout").fetchone() == (5,)  # the store's own, restored
    db.close()
    reader.close()
