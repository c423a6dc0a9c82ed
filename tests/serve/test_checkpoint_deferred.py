"""A checkpoint round with little new in the log waits (store/checkpoint.py): a passive
checkpoint copying a turn or two cost a server answering one turn at a time about a quarter of
a millisecond of CPU a turn. It runs once DEFERRED_CHANGES rows changed, once any did and
SETTLE_ROUNDS rounds passed, and whenever the log was found long."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

from agentscript.store import checkpoint
from agentscript.store.base import SessionRecord
from agentscript.store.checkpoint import Checkpointer
from agentscript.store.sqlite import SQLiteStore


class Counted:
    """A store's change count, set by the test."""

    def __init__(self) -> None:
        self.rows = 0

    def __call__(self) -> int:
        return self.rows


def test_a_round_with_few_changes_waits_then_checkpoints_after_settle_rounds() -> None:
    changes = Counted()
    checkpointer = Checkpointer(Path("unused.db"), changes=changes)
    assert not checkpointer.due()  # nothing changed: nothing to copy
    changes.rows = 3  # a turn
    waited = [checkpointer.due() for _ in range(checkpoint.SETTLE_ROUNDS)]
    assert waited == [False] * checkpoint.SETTLE_ROUNDS
    assert checkpointer.due()  # the commit is synced within SETTLE_ROUNDS rounds
    assert not checkpointer.due()  # and counted: nothing new since
    assert checkpointer.skipped == checkpoint.SETTLE_ROUNDS


def test_a_busy_store_checkpoints_every_round() -> None:
    changes = Counted()
    checkpointer = Checkpointer(Path("unused.db"), changes=changes)
    for _ in range(3):
        changes.rows += checkpoint.DEFERRED_CHANGES
        assert checkpointer.due()
    assert checkpointer.skipped == 0


def test_a_long_log_is_checkpointed_whatever_changed() -> None:
    changes = Counted()
    checkpointer = Checkpointer(Path("unused.db"), changes=changes)
    checkpointer._backfilled = checkpoint.CATCH_UP_BYTES // checkpointer.page_size
    assert checkpointer.due()


def test_without_a_change_count_every_round_checkpoints() -> None:
    assert Checkpointer(Path("unused.db")).due()


def test_a_closed_connection_counts_as_unknown() -> None:
    def closed() -> int:
        raise sqlite3.ProgrammingError("Cannot operate on a closed database.")

    assert Checkpointer(Path("unused.db"), changes=closed).due()


def test_a_store_write_reaches_the_database_file_within_the_settle_rounds(tmp_path: Path) -> None:
    """Through a real store: one new session (one row) is copied into the file by the
    checkpointer's rounds without any further write, and only after it waited."""

    async def body() -> tuple[int, int]:
        store = SQLiteStore(tmp_path / "s.db")
        await store.open()
        store.checkpointer.interval = 0.01
        try:
            await store.create_session(
                SessionRecord(session_id="s1", agent="a", owner="o", state={}, agent_version="v")
            )
            for _ in range(1000):
                if store.checkpointer.frames:
                    break
                await asyncio.sleep(0.01)
            return store.checkpointer.frames, store.checkpointer.skipped
        finally:
            await store.close()

    frames, skipped = asyncio.run(body())
    assert frames > 0 and skipped >= checkpoint.SETTLE_ROUNDS
