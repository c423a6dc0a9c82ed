"""One event loop per thread for the synchronous API (``Session.send``).

``asyncio.run`` creates and tears down a loop on every call (about 450 µs per turn, a third of
a turn's cost with real actions). :func:`run_sync` keeps one ``asyncio.Runner`` per thread
instead: any thread may call it, each thread gets its own loop, and the loop lives as long as
the thread (it is closed when the thread's locals are released).

Contract: ``run_sync(coro)`` runs ``coro`` to completion and returns its result or raises its
exception. Called from a thread whose loop is already running (inside ``async`` code) it raises
RuntimeError, like ``asyncio.run``: use the ``async`` API there.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class _ThreadLoop:
    """The runner of one thread; closes its loop when the thread's locals go away."""

    def __init__(self) -> None:
        self.runner = asyncio.Runner()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.runner.close()


_local = threading.local()


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on this thread's kept event loop."""
    holder: _ThreadLoop | None = getattr(_local, "loop", None)
    if holder is None:
        holder = _ThreadLoop()
        _local.loop = holder
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        pass
    else:
        coro.close()
        raise RuntimeError(
            "Session.send() cannot be called from a running event loop; "
            "use 'await session.send_async(...)'"
        )
    return holder.runner.run(coro)
