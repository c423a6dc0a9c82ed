"""The SQLite checkpointer keeps the log from growing without bound under steady writes
(store/checkpoint.py): it catches up with the log so the next write restarts it, and makes
writes wait for one RESTART checkpoint when they never leave it a gap."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from agentscript.store import checkpoint
from agentscript.store.base import SessionRecord, TurnOutcome, TurnRecord
from agentscript.store.checkpoint import Checkpointer
from agentscript.store.sqlite import SQLiteStore


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
    short = ScriptedLog(start=checkpoint.CATCH_UP_FRAMES - 10, growth=5)
    checkpointer = Checkpointer(Path("unused.db"))
    checkpointer.checkpoint(short)  # type: ignore[arg-type]
    assert short.modes == ["PASSIVE"]
    checkpointer.checkpoint(short)  # type: ignore[arg-type]
    assert short.modes == ["PASSIVE"] * 2
    assert checkpointer.frames == checkpoint.CATCH_UP_FRAMES - 5


def test_a_long_log_round_ends_once_a_pass_finds_nothing_new() -> None:
    quiet = ScriptedLog(start=checkpoint.CATCH_UP_FRAMES, growth=0)
    checkpointer = Checkpointer(Path("unused.db"))
    checkpointer.checkpoint(quiet)  # type: ignore[arg-type]  # learns how long the log is
    checkpointer.checkpoint(quiet)  # type: ignore[arg-type]
    assert quiet.modes == ["PASSIVE"] * 3
    assert checkpointer.caught_up == 1 and checkpointer.restarts == 0
    assert checkpointer.frames == checkpoint.CATCH_UP_FRAMES


def test_a_checkpoint_round_that_never_catches_up_restarts_a_long_log_only() -> None:
    below = ScriptedLog(start=checkpoint.CATCH_UP_FRAMES, growth=10)
    checkpointer = Checkpointer(Path("unused.db"))
    checkpointer.checkpoint(below)  # type: ignore[arg-type]
    checkpointer.checkpoint(below)  # type: ignore[arg-type]
    assert below.modes == ["PASSIVE"] * (1 + checkpoint.CATCH_UP_PASSES)
    assert checkpointer.restarts == 0 and checkpointer.caught_up == 0

    long = ScriptedLog(start=checkpoint.RESTART_FRAMES, growth=10)
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


def _run(tmp_path: Path, turns: int, pause: float, **settings: Any) -> tuple[int, int, Any]:
    path = tmp_path / "s.db"

    async def body() -> tuple[int, int, Any]:
        store = SQLiteStore(path)
        store.checkpointer.interval = 0.01
        await store.open()
        try:
            await _steady_turns(store, turns, pause)
            store.checkpointer.stop()  # a checkpoint running meanwhile would make ours busy
            # How long the log is now (a passive checkpoint reports it, copying what is left).
            with contextlib.closing(sqlite3.connect(path)) as db:
                (busy, log, _copied) = db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
            assert busy == 0 and log >= 0
            return log, store.checkpointer.frames, store.checkpointer
        finally:
            await store.close()

    return asyncio.run(body())


def test_sqlite_log_restarts_under_steady_turns_instead_of_growing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a round every 10 ms and a turn every millisecond or so, a single passive pass per
    round never had the whole log copied when the next write began: the log held every frame
    ever written. Now it holds a small part of them."""
    monkeypatch.setattr(checkpoint, "CATCH_UP_FRAMES", 100)  # a short log, for a short test
    log, frames, checkpointer = _run(tmp_path, turns=1500, pause=0.001)
    assert checkpointer.caught_up > 0 and checkpointer.failed == 0
    assert frames > 20 * log, (frames, log)


def test_sqlite_log_of_writes_that_never_pause_stays_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(checkpoint, "RESTART_FRAMES", 300)
    monkeypatch.setattr(checkpoint, "CATCH_UP_PASSES", 1)  # as if the passes never caught up
    log, frames, checkpointer = _run(tmp_path, turns=1500, pause=0)
    assert checkpointer.restarts > 0 and checkpointer.failed == 0
    assert frames > 5 * log, (frames, log)
