"""The SQLite checkpointer keeps the log from growing without bound under steady writes
(store/checkpoint.py): it catches up with the log so the next write restarts it, and makes
writes wait for one RESTART checkpoint when they never leave it a gap."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from pathlib import Path

import pytest

from agentscript.store import checkpoint
from agentscript.store.base import SessionRecord, TurnOutcome, TurnRecord
from agentscript.store.checkpoint import Checkpointer
from agentscript.store.sqlite import SQLiteStore

# The thresholds in frames of the pages of a store SQLite creates (a checkpointer's default).
CATCH_UP_FRAMES = checkpoint.CATCH_UP_BYTES // checkpoint.PAGE_SIZE
RESTART_FRAMES = checkpoint.RESTART_BYTES // checkpoint.PAGE_SIZE


class ScriptedLog:
    """A connection whose checkpoints report a log that grows by ``growth`` frames between
    passes (0: nothing new arrives), all of it copied by each pass; records the modes run."""

    def __init__(self, start: int, growth: int) -> None:
        self.log = start
        self.growth = growth
        self.modes: list[str] = []

    def execute(self, sql: str) -> ScriptedLog:
        self.modes.append(sql.removeprefix("PRAGMA wal_checkpoint(").removesuffix(")"))
        return self

    def fetchone(self) -> tuple[int, int, int]:
        seen = self.log
        self.log += self.growth
        return 0, seen, seen


def test_a_short_log_gets_one_pass_a_round() -> None:
    short = ScriptedLog(start=CATCH_UP_FRAMES - 10, growth=5)
    checkpointer = Checkpointer(Path("unused.db"))
    checkpointer.checkpoint(short)  # type: ignore[arg-type]
    assert short.modes == ["PASSIVE"]
    checkpointer.checkpoint(short)  # type: ignore[arg-type]
    assert short.modes == ["PASSIVE"] * 2
    assert checkpointer.frames == CATCH_UP_FRAMES - 5


def test_a_long_log_round_ends_once_a_pass_finds_nothing_new() -> None:
    quiet = ScriptedLog(start=CATCH_UP_FRAMES, growth=0)
    checkpointer = Checkpointer(Path("unused.db"))
    checkpointer.checkpoint(quiet)  # type: ignore[arg-type]  # learns how long the log is
    checkpointer.checkpoint(quiet)  # type: ignore[arg-type]
    assert quiet.modes == ["PASSIVE"] * 3
    assert checkpointer.caught_up == 1 and checkpointer.restarts == 0
    assert checkpointer.frames == CATCH_UP_FRAMES


def test_a_checkpoint_round_that_never_catches_up_restarts_a_long_log_only() -> None:
    below = ScriptedLog(start=CATCH_UP_FRAMES, growth=10)
    checkpointer = Checkpointer(Path("unused.db"))
    checkpointer.checkpoint(below)  # type: ignore[arg-type]
    checkpointer.checkpoint(below)  # type: ignore[arg-type]
    assert below.modes == ["PASSIVE"] * (1 + checkpoint.CATCH_UP_PASSES)
    assert checkpointer.restarts == 0 and checkpointer.caught_up == 0

    long = ScriptedLog(start=RESTART_FRAMES, growth=10)
    checkpointer = Checkpointer(Path("unused.db"))
    checkpointer.checkpoint(long)  # type: ignore[arg-type]
    assert long.modes == ["PASSIVE", "RESTART"]  # a log found that long: no passes to try
    checkpointer.checkpoint(long)  # type: ignore[arg-type]
    assert long.modes[2:] == ["PASSIVE"] * checkpoint.CATCH_UP_PASSES + ["RESTART"]
    assert checkpointer.restarts == 2


def _outcome(sid: str, turn: int) -> TurnOutcome:
    return TurnOutcome(
        state={"format": "x", "n": turn, "pad": "s" * 2000},
        record=TurnRecord(sid, turn, {"turn": turn}, {"steps": ["t" * 5000]}, None),
        ended=False,
        escalated=False,
        expires_at=None,
    )


async def _steady_turns(store: SQLiteStore, turns: int, pause: float) -> None:
    for n in range(turns // 5):
        sid = f"s{n}"
        await store.create_session(SessionRecord(sid, "A", "k1", "v1", {"format": "x"}))
        for turn in range(1, 6):
            async with store.lock_session(sid, 1.0) as lock:
                await lock.commit(_outcome(sid, turn))
            if pause:
                await asyncio.sleep(pause)


class WritesDuringFirstPass:
    """A checkpoint connection whose first pass runs while another connection writes, as a
    turn committing meanwhile would."""

    def __init__(self, db: sqlite3.Connection, writer: sqlite3.Connection) -> None:
        self.db = db
        self.writer = writer
        self.passes = 0

    def execute(self, sql: str) -> sqlite3.Cursor:
        first = self.passes == 0
        self.passes += 1
        if first:  # a turn's commit begins before the pass and ends after it
            self.writer.execute("BEGIN IMMEDIATE")
            self.writer.execute("INSERT INTO t (body) VALUES (?)", ("during" * 500,))
        cursor = self.db.execute(sql)
        if first:
            self.writer.execute("COMMIT")
        return cursor


def _log_length(path: Path) -> int:
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as db:
        busy, log, _copied = db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    assert busy == 0
    return int(log)


@pytest.mark.parametrize("passes", [checkpoint.CATCH_UP_PASSES, 1])
def test_sqlite_log_restarts_though_writes_arrived_during_a_pass(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, passes: int
) -> None:
    """A pass reports the log it began with as all copied, so one pass a round (``passes=1``,
    the old checkpointer) left the frames written meanwhile uncopied and the log never
    restarted under steady load. The round goes on until a pass finds nothing new."""
    monkeypatch.setattr(checkpoint, "CATCH_UP_BYTES", 0)  # whatever the log's length
    monkeypatch.setattr(checkpoint, "CATCH_UP_PASSES", passes)
    path = tmp_path / "s.db"
    with (
        contextlib.closing(sqlite3.connect(path, isolation_level=None)) as writer,
        contextlib.closing(sqlite3.connect(path, isolation_level=None)) as db,
    ):
        writer.execute("PRAGMA journal_mode=WAL")
        writer.execute("PRAGMA wal_autocheckpoint=0")
        writer.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT)")
        for n in range(100):
            writer.execute("INSERT INTO t (body) VALUES (?)", (f"turn {n}" * 500,))
        grown = _log_length(path)  # (this copies it all: write more that is not copied yet)
        for n in range(10):
            writer.execute("INSERT INTO t (body) VALUES (?)", (f"more {n}" * 500,))
        Checkpointer(path).checkpoint(WritesDuringFirstPass(db, writer))  # type: ignore[arg-type]
        writer.execute("INSERT INTO t (body) VALUES (?)", ("next",))  # the next turn's write
        after = _log_length(path)
    assert grown > 100
    if passes > 1:
        assert after < 5, after  # the next write started the log again
    else:
        # The old single pass: the log still holds the ten rows written before the round
        # (two or more frames each) and everything after them.
        assert after >= 20, after


def test_sqlite_restart_checkpoint_makes_the_next_write_start_the_log_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What a round falls back on when writes never leave a gap: its RESTART checkpoint, run
    here against real SQLite with the passes unable to tell they caught up (one a round)."""
    monkeypatch.setattr(checkpoint, "RESTART_BYTES", 50 * checkpoint.PAGE_SIZE)  # 50 frames
    monkeypatch.setattr(checkpoint, "CATCH_UP_PASSES", 1)
    path = tmp_path / "s.db"

    def log_length(db: sqlite3.Connection) -> int:
        busy, log, _copied = db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        assert busy == 0
        return int(log)

    async def body() -> tuple[int, int, int]:
        store = SQLiteStore(path)
        store.checkpointer.interval = 3600.0  # the test runs the rounds itself
        await store.open()
        try:
            await _steady_turns(store, 50, pause=0)
            with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as db:
                grown = log_length(db)
                store.checkpointer.checkpoint(db)
                await _steady_turns_of(store, "after", 1)
                return grown, store.checkpointer.restarts, log_length(db)
        finally:
            await store.close()

    grown, restarts, after = asyncio.run(body())
    assert grown >= 50 and restarts == 1
    assert after < 20, after  # one turn's frames, written from the start of the log


async def _steady_turns_of(store: SQLiteStore, sid: str, turns: int) -> None:
    await store.create_session(SessionRecord(sid, "A", "k1", "v1", {"format": "x"}))
    for turn in range(1, turns + 1):
        async with store.lock_session(sid, 1.0) as lock:
            await lock.commit(_outcome(sid, turn))


@pytest.mark.parametrize("made_with", [None, 4096], ids=["new", "made-with-4-KiB-pages"])
def test_sqlite_store_pages_are_8_kib_when_new_and_its_own_when_older(
    tmp_path: Path, made_with: int | None
) -> None:
    """A store SQLite creates gets 8 KiB pages (a 2-3 kB turn row no longer takes a 4 KiB page
    of its own); a store made before keeps its page size, turns go on in it, and its
    checkpointer counts the log in frames of that size."""
    path = tmp_path / "s.db"
    if made_with is not None:
        with contextlib.closing(sqlite3.connect(path)) as db:
            db.execute(f"PRAGMA page_size={made_with}")
            db.execute("CREATE TABLE made_before (id INTEGER)")

    expected = made_with or checkpoint.PAGE_SIZE

    async def body() -> int:
        store = SQLiteStore(path)
        await store.open()
        try:
            await _steady_turns_of(store, "s", 3)
            for _ in range(100):  # the checkpointer's thread reads the page size as it starts
                if store.checkpointer.page_size == expected:
                    break
                await asyncio.sleep(0.01)
            return store.checkpointer.frames_of(checkpoint.CATCH_UP_BYTES)
        finally:
            await store.close()

    assert asyncio.run(body()) == checkpoint.CATCH_UP_BYTES // expected
    with contextlib.closing(sqlite3.connect(path)) as db:
        assert db.execute("PRAGMA page_size").fetchone()[0] == expected
        assert db.execute("SELECT COUNT(*) FROM agentscript_turns").fetchone()[0] == 3


def test_checkpointer_that_cannot_read_the_page_size_still_checkpoints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page size is read as the thread connects; a failure there keeps the default instead
    of ending the thread, whose checkpoints keep the log bounded."""
    connect = sqlite3.connect

    class NoPageSize:
        def __init__(self, db: sqlite3.Connection) -> None:
            self.db = db

        def execute(self, sql: str) -> sqlite3.Cursor:
            if sql == "PRAGMA page_size":
                raise sqlite3.OperationalError("disk I/O error")
            return self.db.execute(sql)

        def close(self) -> None:
            self.db.close()

    monkeypatch.setattr(checkpoint.sqlite3, "connect", lambda *a, **k: NoPageSize(connect(*a, **k)))
    path = tmp_path / "s.db"
    with contextlib.closing(connect(path, isolation_level=None)) as writer:
        writer.execute("PRAGMA journal_mode=WAL")
        writer.execute("PRAGMA wal_autocheckpoint=0")
        writer.execute("CREATE TABLE t (body TEXT)")
        writer.execute("INSERT INTO t VALUES (?)", ("x" * 5000,))
        checkpointer = Checkpointer(path, interval=0.01)
        checkpointer.start()
        try:
            for _ in range(300):
                if checkpointer.frames:
                    break
                time.sleep(0.01)
        finally:
            checkpointer.stop()
    assert checkpointer.frames > 0 and checkpointer.page_size == checkpoint.PAGE_SIZE
