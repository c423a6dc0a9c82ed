"""A checkpoint round with little new in the log waits (store/checkpoint.py): a passive
checkpoint copying a turn or two cost a server answering one turn at a time about a quarter of
a millisecond of CPU a turn. What is new is read from SQLite's wal-index (the ``-shm`` file):
a round checkpoints once DEFERRED_FRAMES are pending, once any are and SETTLE_ROUNDS rounds
passed, while the log is long, and whenever the wal-index cannot be read."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentscript.store import checkpoint
from agentscript.store.base import SessionRecord
from agentscript.store.checkpoint import Checkpointer, frames_pending
from agentscript.store.sqlite import SQLiteStore


@contextlib.contextmanager
def wal_file(path: Path) -> Iterator[sqlite3.Connection]:
    """A WAL database at ``path`` whose log only the test checkpoints, as the store's is."""
    with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as db:
        db.execute(f"PRAGMA page_size={checkpoint.PAGE_SIZE}")
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA wal_autocheckpoint=0")
        db.execute("CREATE TABLE t (body TEXT)")
        yield db


def test_the_wal_index_says_how_many_frames_wait_for_a_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    with wal_file(path) as db:
        before = frames_pending(f"{path}-shm")
        assert before is not None and before > 0  # the table's creation
        db.execute("PRAGMA wal_checkpoint(PASSIVE)")
        assert frames_pending(f"{path}-shm") == 0
        db.execute("INSERT INTO t VALUES (?)", ("x" * 3 * checkpoint.PAGE_SIZE,))
        pending = frames_pending(f"{path}-shm")
        assert pending is not None and 3 <= pending < checkpoint.DEFERRED_FRAMES
        # Another connection's writes count as well: the log is the file's, not the store's.
        with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as other:
            other.execute("INSERT INTO t VALUES ('y')")
        again = frames_pending(f"{path}-shm")
        assert again is not None and again > pending


def test_a_round_with_few_frames_waits_then_checkpoints_after_settle_rounds(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.db"
    with wal_file(path) as db:
        db.execute("PRAGMA wal_checkpoint(PASSIVE)")
        checkpointer = Checkpointer(path)
        assert not checkpointer.due()  # nothing pending: nothing to copy
        db.execute("INSERT INTO t VALUES ('a turn')")
        waited = [checkpointer.due() for _ in range(checkpoint.SETTLE_ROUNDS)]
        assert waited == [False] * checkpoint.SETTLE_ROUNDS
        assert checkpointer.due()  # synced within SETTLE_ROUNDS + 1 rounds
        assert checkpointer.skipped == checkpoint.SETTLE_ROUNDS


def test_a_large_write_is_checkpointed_at_the_next_round(tmp_path: Path) -> None:
    """Frames, not rows: one state of several megabytes does not wait its rounds."""
    path = tmp_path / "s.db"
    with wal_file(path) as db:
        db.execute("PRAGMA wal_checkpoint(PASSIVE)")
        checkpointer = Checkpointer(path)
        db.execute("INSERT INTO t VALUES (?)", ("x" * 2 * 1024 * 1024,))
        assert checkpointer.due() and checkpointer.skipped == 0


def test_a_long_log_is_checkpointed_every_round(tmp_path: Path) -> None:
    checkpointer = Checkpointer(tmp_path / "s.db")
    checkpointer._backfilled = checkpoint.CATCH_UP_BYTES // checkpointer.page_size
    assert checkpointer.due()


@pytest.mark.parametrize(
    "damage",
    [
        "missing",
        "short",
        "another version",
        "torn header",  # the two copies of the header disagree: a write in progress
    ],
)
def test_a_wal_index_that_cannot_be_read_checkpoints_every_round(
    tmp_path: Path, damage: str
) -> None:
    path = tmp_path / "s.db"
    shm = tmp_path / "s.db-shm"
    header = checkpoint._WAL_INDEX.pack(checkpoint.WAL_INDEX_VERSION, 5)
    good = bytearray(checkpoint._WAL_INDEX_SIZE)
    good[0 : len(header)] = header
    good[48 : 48 + len(header)] = header
    if damage == "short":
        shm.write_bytes(bytes(good[:40]))
    elif damage == "another version":
        other = checkpoint._WAL_INDEX.pack(3007001, 5)
        good[0 : len(other)] = other
        good[48 : 48 + len(other)] = other
        shm.write_bytes(bytes(good))
    elif damage == "torn header":
        good[64:68] = (6).to_bytes(4, "little")
        shm.write_bytes(bytes(good))
    assert frames_pending(str(shm)) is None
    assert Checkpointer(path).due()


def test_a_store_write_reaches_the_database_file_within_the_settle_rounds(tmp_path: Path) -> None:
    """Through a real store: one new session is copied into the file by the checkpointer's
    rounds without any further write, after it waited."""

    async def body() -> tuple[int, int]:
        store = SQLiteStore(tmp_path / "s.db")
        await store.open()
        store.checkpointer.interval = 0.01
        try:
            for _ in range(1000):  # the start-up's own writes copied first
                if frames_pending(store.checkpointer.shm) == 0:
                    break
                await asyncio.sleep(0.01)
            copied = store.checkpointer.frames
            await store.create_session(
                SessionRecord(session_id="s1", agent="a", owner="o", state={}, agent_version="v")
            )
            for _ in range(1000):
                if store.checkpointer.frames > copied:
                    break
                await asyncio.sleep(0.01)
            return store.checkpointer.frames - copied, store.checkpointer.skipped
        finally:
            await store.close()

    frames, skipped = asyncio.run(body())
    assert frames > 0 and skipped >= checkpoint.SETTLE_ROUNDS
