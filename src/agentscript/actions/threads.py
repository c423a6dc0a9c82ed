"""A long-lived, bounded pool of daemon threads for synchronous actions.

Why not ``concurrent.futures.ThreadPoolExecutor``: its threads are joined when the interpreter
exits, so one hung action would keep the process alive after its turn returned. These threads
are daemons, created on demand up to ``max_workers`` and kept for the next call (starting a
thread per call cost 135-185 µs per action; handing a job to a waiting worker costs a few µs).

Contract: :meth:`ActionThreads.submit` runs ``call`` on a worker and settles the returned
asyncio future on the caller's loop with its result or exception (``SystemExit`` and
``KeyboardInterrupt`` included: they are handed over, never raised in the worker). When every
worker is busy the job waits in the queue; the caller's timeout covers that wait.

What a timed-out action still does: Python cannot stop a thread, so the call goes on running
on its worker until it returns by itself; its result is then dropped. That worker is busy
meanwhile, so the pool starts another one for the next job (while under ``max_workers``). A job
whose caller timed out while it waited in the queue is skipped, never started late.
Only the process-isolation mode (``actions/process.py``) stops a timed-out action for real.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import threading
from collections.abc import Callable
from typing import Any

# Enough for actions that wait on I/O concurrently across sessions, bounded so a flood of hung
# calls cannot start unbounded threads.
DEFAULT_MAX_WORKERS = min(32, (os.cpu_count() or 1) + 4)

Job = tuple[Callable[[], Any], asyncio.AbstractEventLoop, "asyncio.Future[Any]"]


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():  # the caller timed out and went on
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class ActionThreads:
    """Daemon worker threads fed from one queue."""

    def __init__(self, max_workers: int = DEFAULT_MAX_WORKERS) -> None:
        self.max_workers = max_workers
        self._jobs: queue.SimpleQueue[Job] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._workers = 0
        self._idle = 0

    def submit(self, call: Callable[[], Any]) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        with self._lock:
            if self._idle == 0 and self._workers < self.max_workers:
                self._workers += 1
                threading.Thread(target=self._work, name="agentscript-action", daemon=True).start()
            else:
                # A worker is waiting (or the pool is full): the job waits its turn.
                self._idle = max(0, self._idle - 1)
        self._jobs.put((call, loop, future))
        return future

    def _work(self) -> None:
        while True:
            call, loop, future = self._jobs.get()
            if future.done():
                # Its caller timed out while the job waited for a free worker: never start an
                # action whose failure was already reported. (Reading the state from this
                # thread is a benign race: at worst the call runs and its result is dropped.)
                with self._lock:
                    self._idle += 1
                continue
            try:
                result, error = call(), None
            except BaseException as exc:  # handed to the awaiting turn, which reports it
                result, error = None, exc
            with contextlib.suppress(RuntimeError):  # the loop may be closed by now
                loop.call_soon_threadsafe(_settle, future, result, error)
            del call, result, error, future, loop
            with self._lock:
                self._idle += 1

    @property
    def size(self) -> int:
        """Worker threads started so far."""
        return self._workers


_shared: dict[int, ActionThreads] = {}
_shared_lock = threading.Lock()


def shared_threads(max_workers: int | None = None) -> ActionThreads:
    """The process's pool of that size (default: DEFAULT_MAX_WORKERS), started on first use."""
    size = max_workers or DEFAULT_MAX_WORKERS
    pool = _shared.get(size)
    if pool is None:
        with _shared_lock:
            pool = _shared.setdefault(size, ActionThreads(size))
    return pool
