"""Bulk work of the SQL stores (a purge, an expiry backfill, the turns of deleted sessions) done
as a run of short transactions.

``in_batches`` calls a batch (one statement or one transaction of the backend's own SQL, over up
to ``size`` rows, returning how many rows it changed) until one changes fewer than ``size``:
nothing is left then. It returns the rows changed in all. It never runs two batches at once,
and lets other tasks on the event loop run between batches; a batch's error ends the run, the
batches before it staying done.

The turns of deleted sessions (``schema.DELETE_SESSION_ROW``: the session rows are gone, each
left a note in ``agentscript_meta``) go in chunks: :func:`delete_turns_chunk` is one
transaction's worth, at most ``TURN_CHUNK_ROWS`` rows and about ``TURN_CHUNK_BYTES`` of them,
and :func:`finish_deletions` runs chunks until none is left. A count of sessions says nothing of
how long deleting them takes: one at the history limit holds about 180 MB of turns, and a purge
batch of 25 such sessions held SQLite's write lock, and the event loop that ran it, for 19 s.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from agentscript.store import schema

# Turn rows deleted per transaction at most, and about how many bytes of them (a row's result
# and trace as stored; one row at least, however large). SQLite deleted 4 MiB of turn rows in
# about 9 ms here (it reads every overflow page of a row to free it, and zeroes the pages where
# it was built with SECURE_DELETE, as Debian's is); 256 rows of a few kB each take about as long.
TURN_CHUNK_ROWS = 256
TURN_CHUNK_BYTES = 4 * 1024 * 1024


async def in_batches(batch: Callable[[], Awaitable[int]], size: int) -> int:
    done = 0
    while True:
        changed = await batch()
        done += changed
        if changed < size:
            return done
        # SQLite's statements run on the loop's thread: requests waiting on it go first.
        await asyncio.sleep(0)


class Transaction(Protocol):
    """The statements of one transaction under way (``?`` placeholders)."""

    async def rows(self, sql: str, params: tuple[Any, ...]) -> list[Any]:
        """The rows of a statement."""

    async def run(self, sql: str, params: tuple[Any, ...]) -> None:
        """A statement that writes."""


async def finish_deletions(chunk: Callable[[], Awaitable[bool]]) -> None:
    """Run ``chunk`` (one transaction of :func:`delete_turns_chunk`; whether deletions are left)
    until nothing is left, letting other tasks on the loop run before each."""
    while True:
        await asyncio.sleep(0)
        if not await chunk():
            return


async def delete_turns_chunk(db: Transaction, turn_sizes: str) -> bool:
    """Delete one chunk of the turns of deleted sessions, oldest notes first, in the
    transaction ``db`` has under way, dropping the note of each session with none left;
    whether any may be left. ``turn_sizes``: the backend's ``schema.TURN_SIZES_*``."""
    rows, room = TURN_CHUNK_ROWS, TURN_CHUNK_BYTES
    pending = await db.rows(schema.PENDING_DELETIONS, (TURN_CHUNK_ROWS,))
    for (session_id,) in pending:
        if await db.rows(schema.SESSION_EXISTS, (session_id,)):
            # Only a caller choosing its own ids makes a session of the same id again: those
            # turns are its own now, and the note goes.
            await db.run(schema.UNMARK_DELETING, (schema.DELETING + session_id,))
            continue
        sizes = await db.rows(turn_sizes, (session_id, rows + 1))
        count, size = fitting(sizes[:rows], room, first=rows == TURN_CHUNK_ROWS)
        if count:
            await db.run(schema.DELETE_TURNS_THROUGH, (session_id, sizes[count - 1][0]))
            rows, room = rows - count, room - size
        if count < len(sizes):
            return True  # the chunk is full, this session's turns not all deleted
        await db.run(schema.UNMARK_DELETING, (schema.DELETING + session_id,))
        if rows <= 0 or room <= 0:
            return True
    # A full page of notes may have more after it.
    return len(pending) == TURN_CHUNK_ROWS


def fitting(sizes: Sequence[Sequence[int]], room: int, *, first: bool) -> tuple[int, int]:
    """How many of ``sizes`` (``(turn, bytes)`` in order) fit in ``room`` bytes, and their
    bytes; the first one whatever its size if ``first``."""
    count = used = 0
    for _turn, size in sizes:
        size = int(size or 0)
        if used + size > room and (count or not first):
            break
        count, used = count + 1, used + size
    return count, used
