"""When this process began to shut down: what is left of ``--shutdown-grace`` for the app's
own shutdown (``SessionService.finish_turns``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

# How often a wait within the grace looks again (a stop at once ends it at the next look).
SHUTDOWN_SLICE = 0.1


class ShutdownClock:
    """When this process's uvicorn began to shut down, if it has (``time.monotonic()``).

    uvicorn waits up to ``--shutdown-grace`` for its connections, then runs the app's shutdown,
    which waits for the streamed turns whose client left (``SessionService.finish_turns``):
    given a full grace again, a stream whose client stayed connected held the process for
    twice the grace, past an orchestrator's wait before ``SIGKILL``. uvicorn tells each open
    connection first (``shutdown()``), which marks the clock here; the app's shutdown waits
    only for what is left. With no connection open, uvicorn's wait ends at once and the app's
    shutdown starts with it."""

    began: float | None = None

    @classmethod
    def mark(cls) -> None:
        if cls.began is None:
            cls.began = time.monotonic()

    @classmethod
    def end(cls) -> None:
        """Nothing is left of the grace: the server is stopped at once (a second Ctrl-C)."""
        cls.began = float("-inf")

    @classmethod
    def stopped_at_once(cls) -> bool:
        return cls.began == float("-inf")

    @classmethod
    def reset(cls) -> None:
        """Forget a shutdown: a server starting in this process (its app's start-up)."""
        cls.began = None

    @classmethod
    def left(cls, grace: float) -> float:
        """Seconds left of ``grace`` since the shutdown began (all of it when not marked)."""
        if cls.began is None:
            return grace
        return max(0.0, grace - (time.monotonic() - cls.began))


async def within_grace(busy: Callable[[], bool], grace: float) -> None:
    """Wait while ``busy()``, at most until ``grace`` seconds after the shutdown began
    (``ShutdownClock``: a stop at once ends the wait at the next look)."""
    while busy() and (left := ShutdownClock.left(grace)) > 0:
        await asyncio.sleep(min(left, SHUTDOWN_SLICE))
