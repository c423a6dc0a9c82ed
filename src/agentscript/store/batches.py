"""Bulk work of the SQL stores (a purge, an expiry backfill) done as a run of short batches.

``in_batches`` calls a batch (one statement or one transaction of the backend's own SQL, over up
to ``size`` rows, returning how many rows it changed) until one changes fewer than ``size``:
nothing is left then. It returns the rows changed in all. It never runs two batches at once,
and lets other tasks on the event loop run between batches; a batch's error ends the run, the
batches before it staying done.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable


async def in_batches(batch: Callable[[], Awaitable[int]], size: int) -> int:
    done = 0
    while True:
        changed = await batch()
        done += changed
        if changed < size:
            return done
        # SQLite's statements run on the loop's thread: requests waiting on it go first.
        await asyncio.sleep(0)
