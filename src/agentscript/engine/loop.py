"""One event loop per thread for the synchronous API (``Session.send``).

``asyncio.run`` creates and tears down a loop on every call (about 400 µs per turn, a third of
a turn's cost with real actions), and even a kept ``asyncio.Runner`` swaps the SIGINT handler
twice per call (about 100 µs in the main thread). :func:`run_sync` keeps one loop per thread
instead: any thread may call it, each thread gets its own loop, and the loop lives as long as
the thread (closed when the thread's locals are released).

Ctrl-C in the main thread cancels the running turn, as under ``asyncio.run``: the first call
from the main thread installs a SIGINT handler, but only where Python's default one is in place,
and that handler behaves exactly like the default (raises KeyboardInterrupt) whenever no turn
runs. So it is installed once and left in place, which keeps each call free of signal calls
but one: while a turn runs, the main thread's loop is the process's wakeup fd. The kernel may
hand SIGINT to any thread (an action pool's, say), and Python runs the handler on the main
thread only when that thread next runs Python code: without the wakeup fd, a loop asleep in a
30 s wait would not see Ctrl-C until the wait ended.

Contract: ``run_sync(coro)`` runs ``coro`` to completion and returns its result or raises its
exception (KeyboardInterrupt after a Ctrl-C cancelled it). Called from a thread whose loop is
already running (inside ``async`` code) it raises RuntimeError, like ``asyncio.run``: use the
``async`` API there.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import signal
import socket
import threading
from collections.abc import Coroutine
from types import FrameType
from typing import Any, TypeVar

T = TypeVar("T")


class _ThreadLoop:
    """The loop of one thread; closed when the thread's locals go away (the main thread's at
    exit). Closing first finishes async generators left suspended (an abandoned HTTP stream),
    as ``asyncio.run`` does after every call: otherwise they are finalised outside any loop
    and print tracebacks at exit."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._wakeup: tuple[socket.socket, socket.socket] | None = None

    def wakeup_fd(self) -> int:
        """A socket this loop watches, for ``signal.set_wakeup_fd``: a signal then wakes the
        loop's wait, and Python runs its handler at once."""
        if self._wakeup is None:
            reader, writer = socket.socketpair()
            reader.setblocking(False)
            writer.setblocking(False)
            self.loop.add_reader(reader.fileno(), _drain, reader)
            self._wakeup = (reader, writer)
        return self._wakeup[1].fileno()

    def close(self) -> None:
        loop = self.loop
        if loop.is_closed() or loop.is_running():
            return
        with contextlib.suppress(Exception):
            loop.run_until_complete(loop.shutdown_asyncgens())
        if self._wakeup is not None:
            reader, writer = self._wakeup
            loop.remove_reader(reader.fileno())
            reader.close()
            writer.close()
        loop.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


def _drain(reader: socket.socket) -> None:
    # The bytes are signal numbers; the handlers already ran. Only the waking matters.
    with contextlib.suppress(OSError):
        while reader.recv(4096):
            pass


def _close_main_loop() -> None:
    holder: _ThreadLoop | None = getattr(_local, "loop", None)
    if holder is not None:
        holder.close()


_local = threading.local()
_main_task: asyncio.Task[Any] | None = None  # the turn running in the main thread, if any
_interrupted = False


def _on_sigint(signum: int, frame: FrameType | None) -> None:
    global _interrupted
    task = _main_task
    if task is None or task.done() or _interrupted:  # no turn, or a second Ctrl-C
        raise KeyboardInterrupt
    _interrupted = True
    task.get_loop().call_soon_threadsafe(task.cancel)


def _install_sigint() -> None:
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_sigint)


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on this thread's kept event loop."""
    global _main_task, _interrupted
    holder: _ThreadLoop | None = getattr(_local, "loop", None)
    if holder is None:
        holder = _ThreadLoop()
        _local.loop = holder
        if threading.current_thread() is threading.main_thread():
            atexit.register(_close_main_loop)
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
    loop = holder.loop
    if threading.current_thread() is not threading.main_thread():
        return loop.run_until_complete(coro)
    if _main_task is None:
        _install_sigint()
    task = loop.create_task(coro)
    outer, _main_task, _interrupted = _main_task, task, False
    previous = signal.set_wakeup_fd(holder.wakeup_fd(), warn_on_full_buffer=False)
    try:
        return loop.run_until_complete(task)
    except asyncio.CancelledError:
        if _interrupted:
            raise KeyboardInterrupt from None
        raise
    finally:
        _main_task = outer
        signal.set_wakeup_fd(previous)
