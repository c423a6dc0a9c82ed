"""A SQLite log that every checkpoint round catches up with, yet that no write restarts, is
restarted by the checkpointer (store/checkpoint.py).

Only a write that begins with the whole log copied restarts it; one that began before the round
ended appends to it. Turns of one long session sent back to back were always mid-write when a
round ended: every round caught up, none restarted the log, and it grew by 2.2 GB in 200 turns
(``Checkpointer.restarts`` stayed 0 while ``caught_up`` rose)."""

from __future__ import annotations

import contextlib
import os
import sqlite3
from pathlib import Path

import pytest

from agentscript.store import checkpoint
from agentscript.store.checkpoint import Checkpointer

PAGE = 4096  # the page size of the files made here (SQLite's default)
RESTART_FRAMES = 50


class CaughtUpEachRound:
    """A checkpoint connection whose passes copy the whole log, which grows by ``growth``
    frames between rounds (writes after each round that do not restart it), or starts again
    with that many (``restarted``); records the modes run."""

    def __init__(self, start: int, growth: int, *, restarted: bool = False) -> None:
        self.log = start
        self.growth = growth
        self.restarted = restarted
        self.modes: list[str] = []

    def execute(self, sql: str) -> CaughtUpEachRound:
        self.modes.append(sql.removeprefix("PRAGMA wal_checkpoint(").removesuffix(")"))
        return self

    def fetchone(self) -> tuple[int, int, int]:
        return 0, self.log, self.log

    def next_round(self) -> None:
        self.log = self.growth if self.restarted else self.log + self.growth


@pytest.fixture
def small_thresholds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checkpoint, "CATCH_UP_BYTES", 0)  # every round repeats its pass
    monkeypatch.setattr(checkpoint, "RESTART_BYTES", RESTART_FRAMES * PAGE)


def rounds(log: CaughtUpEachRound, count: int) -> Checkpointer:
    checkpointer = Checkpointer(Path("unused.db"))
    checkpointer.page_size = PAGE
    for _ in range(count):
        checkpointer.checkpoint(log)  # type: ignore[arg-type]
        log.next_round()
    return checkpointer


@pytest.mark.usefixtures("small_thresholds")
def test_a_long_log_caught_up_but_never_restarted_gets_a_restart_checkpoint() -> None:
    """The first round that catches up with a long log leaves the restart to the next write;
    the next round, finding the log longer still, restarts it itself."""
    log = CaughtUpEachRound(start=RESTART_FRAMES, growth=10)
    checkpointer = rounds(log, 2)
    first, second = log.modes[:2], log.modes[2:]
    assert first == ["PASSIVE", "PASSIVE"] and second == ["PASSIVE", "PASSIVE", "RESTART"]
    assert checkpointer.caught_up == 2 and checkpointer.restarts == 1
    # Then it starts over: a round of grace for the writes, then a RESTART if still needed.
    rounds_after = len(log.modes)
    checkpointer.checkpoint(log)  # type: ignore[arg-type]
    assert log.modes[rounds_after:] == ["PASSIVE", "PASSIVE"]


@pytest.mark.usefixtures("small_thresholds")
@pytest.mark.parametrize(
    "log",
    [
        CaughtUpEachRound(start=RESTART_FRAMES + 20, growth=RESTART_FRAMES + 5, restarted=True),
        CaughtUpEachRound(start=1, growth=RESTART_FRAMES // 10),
    ],
    ids=["restarted-by-a-write", "short"],
)
def test_a_caught_up_log_restarted_by_a_write_or_short_gets_no_restart_checkpoint(
    log: CaughtUpEachRound,
) -> None:
    """The normal path costs what it did: the passes until one finds nothing new, no more."""
    checkpointer = rounds(log, 5)
    assert set(log.modes) == {"PASSIVE"} and checkpointer.restarts == 0


class WriteAcrossRounds:
    """A checkpoint connection to ``path`` while ``writer`` commits a turn across each round:
    it begins before the round's first pass (the log not yet copied, so it will append to
    it) and commits after the round, or when a RESTART checkpoint waits for it."""

    def __init__(self, db: sqlite3.Connection, writer: sqlite3.Connection) -> None:
        self.db = db
        self.writer = writer
        self.writing = False

    def execute(self, sql: str) -> sqlite3.Cursor:
        if "PASSIVE" in sql and not self.writing:
            self.writer.execute("BEGIN IMMEDIATE")
            self.writer.execute("INSERT INTO t (body) VALUES (?)", (os.urandom(40_000),))
            self.writing = True
        if "RESTART" in sql:
            self.commit()  # the RESTART waits for the writer's commit
        return self.db.execute(sql)

    def commit(self) -> None:
        if self.writing:
            self.writer.execute("COMMIT")
            self.writing = False


@pytest.mark.usefixtures("small_thresholds")
def test_sqlite_log_of_writes_that_span_each_round_stays_bounded(tmp_path: Path) -> None:
    """Real SQLite: each write begins before a round and commits after it, so none restarts
    the log. Before, the log file grew by a write's frames every round (2.9 MB after 60
    rounds here); now the checkpointer restarts it, and the writer cuts the file back
    (``journal_size_limit``, 0 here)."""
    path = tmp_path / "s.db"
    with (
        contextlib.closing(sqlite3.connect(path, isolation_level=None)) as writer,
        contextlib.closing(sqlite3.connect(path, isolation_level=None)) as db,
    ):
        writer.execute("PRAGMA journal_mode=WAL")
        writer.execute("PRAGMA wal_autocheckpoint=0")
        writer.execute("PRAGMA journal_size_limit=0")
        writer.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, body BLOB)")
        checkpointer = Checkpointer(path)
        checkpointer.page_size = PAGE
        connection = WriteAcrossRounds(db, writer)
        sizes = []
        for _ in range(60):
            checkpointer.checkpoint(connection)  # type: ignore[arg-type]
            connection.commit()
            sizes.append(os.path.getsize(f"{path}-wal"))
    # A round's write is a dozen frames; the log restarts within two rounds past RESTART_FRAMES.
    bound = 3 * RESTART_FRAMES * (PAGE + 24)
    assert max(sizes) <= bound, sizes
    assert checkpointer.restarts >= 5 and checkpointer.caught_up == 60
