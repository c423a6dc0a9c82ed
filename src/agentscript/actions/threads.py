"""A long-lived, bounded pool of daemon threads for synchronous actions.

Why not ``concurrent.futures.ThreadPoolExecutor``: its threads are joined when the interpreter
exits, so one hung action would keep the process alive after its turn returned. These threads
are daemons, created on demand up to ``max_workers`` and kept for the next call (starting a
thread per call cost 135-185 µs per action).

Two ways to wait for a job:

* :meth:`ActionThreads.run` first waits for the job on the caller's thread, up to ``wait``
  seconds (the loop is blocked meanwhile, as for an inline call), then, if the job is still
  running, hands the wait to the event loop as a future so other tasks run. Most actions
  (a lookup, a computation) return within microseconds: they cost one hand-off to the worker
  and back (the OS waking each thread: about 44 µs across cores on the 2-core benchmark VM,
  6-12 µs on one core) instead of that plus a trip through the event loop's selector and a
  timer (``docs/performance.md``). A slow action blocks the loop for
  ``wait`` at most.
* :meth:`ActionThreads.submit` returns an asyncio future at once (process isolation's
  bookkeeping uses it).

Either way the result or exception (``SystemExit`` and ``KeyboardInterrupt`` included: they are
handed over, never raised in the worker) reaches the caller. When every worker is busy the job
waits in the queue; the caller's timeout covers that wait.

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

# How long the loop's thread waits for a pool action before it lets other tasks run: long
# enough for actions that compute or look something up, short enough that a slow one holds
# the loop no longer than a small inline call would.
DEFAULT_LOOP_WAIT = 0.001


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():  # the caller timed out and went on
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class _Job:
    """One call and its outcome. ``done`` is held until the outcome is set; ``mutex`` orders
    the worker's "finished" against the caller's switch to waiting on a future."""

    __slots__ = ("call", "done", "error", "finished", "future", "loop", "mutex", "result")

    def __init__(self, call: Callable[[], Any]) -> None:
        self.call: Callable[[], Any] | None = call
        self.done = threading.Lock()
        self.done.acquire()
        self.mutex = threading.Lock()
        self.finished = False
        self.result: Any = None
        self.error: BaseException | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.future: asyncio.Future[Any] | None = None

    def abandoned(self) -> bool:
        future = self.future
        return future is not None and future.done()

    def outcome(self) -> Any:
        error = self.error
        if error is not None:
            self.error = None  # no reference cycle through the traceback
            raise error
        return self.result


class ActionThreads:
    """Daemon worker threads fed from one queue."""

    def __init__(self, max_workers: int = DEFAULT_MAX_WORKERS) -> None:
        self.max_workers = max_workers
        self._jobs: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._workers = 0
        self._idle = 0

    async def run(
        self, call: Callable[[], Any], *, deadline: float, wait: float = DEFAULT_LOOP_WAIT
    ) -> Any:
        """``call()`` on a worker; TimeoutError once the loop's clock passes ``deadline``."""
        loop = asyncio.get_running_loop()
        job = _Job(call)
        self._enqueue(job)
        if wait > 0:
            blocking = min(wait, deadline - loop.time())
            if blocking > 0 and job.done.acquire(timeout=blocking):
                return job.outcome()
        with job.mutex:
            if job.finished:
                return job.outcome()
            job.loop = loop
            job.future = future = loop.create_future()
        async with asyncio.timeout_at(deadline):
            # On timeout or cancellation the task cancels ``future``: the worker then skips the
            # job if it has not started, or drops its result.
            return await future

    def submit(self, call: Callable[[], Any]) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        job = _Job(call)
        job.loop = loop
        job.future = future = loop.create_future()
        self._enqueue(job)
        return future

    def _enqueue(self, job: _Job) -> None:
        with self._lock:
            if self._idle == 0 and self._workers < self.max_workers:
                self._workers += 1
                threading.Thread(target=self._work, name="agentscript-action", daemon=True).start()
            else:
                # A worker is waiting (or the pool is full): the job waits its turn.
                self._idle = max(0, self._idle - 1)
        self._jobs.put(job)

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            call, job.call = job.call, None
            if call is None or job.abandoned():
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
            with job.mutex:
                job.result, job.error, job.finished = result, error, True
                loop, future = job.loop, job.future
            if future is not None and loop is not None:
                with contextlib.suppress(RuntimeError):  # the loop may be closed by now
                    loop.call_soon_threadsafe(_settle, future, result, error)
            with self._lock:
                self._idle += 1
            done = job.done
            del call, result, error, future, loop, job
            # Last before blocking on the queue again: the caller's thread, woken by this
            # release, then finds the GIL free instead of waking a second time for it.
            done.release()
            del done

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
