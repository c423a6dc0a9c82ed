"""Run one uvicorn server in this process, stopped by signals as ``docs/serve.md`` says.

uvicorn's ``Server`` stops gracefully on ``SIGINT`` or ``SIGTERM``, and at once on a second
``SIGINT``. Three of its habits do not suit a command:

- Once stopped, it raises the signals it caught again for whoever handles them next. After a
  stop at once that was asyncio's own handler: a ``KeyboardInterrupt`` inside the event loop,
  and the app's shutdown failed with a traceback in the log.
- A stop at once skips the app's shutdown. The turns running were dropped with the loop, their
  clients got nothing, their leases stayed taken, and the store was never closed.
- ``SIGHUP`` (a closed terminal) is not handled, so the process ended with no shutdown at all.

:class:`SignalledServer` keeps uvicorn's two stops without those habits. A stop at once
cancels the requests still running (their clients get ``503 shutting_down`` from the app's
``CountRequests``) and ends what is left of the grace (``ShutdownClock.end``). The app's
shutdown then cuts the turns left without waiting, gives their leases back and closes the
store. ``SIGHUP`` counts as ``SIGTERM``. A third ``SIGINT`` ends the process on the spot, for a
shutdown that hangs itself (a store that stopped answering).

With ``--workers N`` each worker runs a :class:`SignalledServer` too, whose signals come from
the server's supervisor (:mod:`.supervisor`).

uvicorn's main loop wakes ten times a second to see whether it should stop and, every tenth
time, to write the ``Date`` header anew. An idle server paid for those wake-ups, and a turn
answered one at a time was charged the ones that fell in it (docs/performance.md, sessions 28
and 29). Here it wakes once a second (the header's precision), and at once when ``should_exit``
is set, from a signal or anything else.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import threading
from collections.abc import Callable, Iterator
from types import FrameType

import uvicorn

from agentscript.server.shutdown import ShutdownClock

log = logging.getLogger("agentscript.server")

# The exit status of a server stopped at once by Ctrl-C: the shell's 128 + SIGINT.
STOPPED_AT_ONCE = 128 + signal.SIGINT
HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# Seconds the requests cancelled by a stop at once get to send their 503.
ANSWER_WAIT = 1.0
# Seconds between two looks of the main loop (uvicorn: 0.1), the Date header's precision.
TICK = 1.0
# uvicorn's on_tick writes the Date header when its counter is a multiple of this.
TICKS_PER_HEADER = 10


class SignalledServer(uvicorn.Server):
    """uvicorn's server with the stops and the main loop of the module's docstring."""

    _exit_wanted = False
    _loop: asyncio.AbstractEventLoop | None = None
    _stop_asked: asyncio.Event | None = None

    @property
    def should_exit(self) -> bool:
        return self._exit_wanted

    @should_exit.setter
    def should_exit(self, value: bool) -> None:
        self._exit_wanted = value
        loop, asked = self._loop, self._stop_asked
        if value and loop is not None and asked is not None and not loop.is_closed():
            # From a signal handler or another thread alike: the loop wakes for it.
            loop.call_soon_threadsafe(asked.set)

    async def main_loop(self) -> None:
        self._stop_asked = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        counter = 0
        try:
            while not await self.on_tick(counter):
                counter = (counter + TICKS_PER_HEADER) % 864000
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(TICK):
                        await self._stop_asked.wait()
        finally:
            self._loop = self._stop_asked = None

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        before = {
            sig: signal.signal(sig, handler) for sig, handler in self.signal_handlers().items()
        }
        try:
            yield
        finally:
            for sig, handler in before.items():
                signal.signal(sig, handler)

    def signal_handlers(self) -> dict[int, Callable[[int, FrameType | None], object] | int]:
        """What each signal does while the server runs (restored afterwards)."""
        return {sig: self.handle_exit for sig in HANDLED}

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if sig == signal.SIGHUP:
            sig = signal.SIGTERM
        if sig == signal.SIGINT and self.force_exit:
            os._exit(STOPPED_AT_ONCE)  # the third Ctrl-C: the shutdown itself is stuck
        super().handle_exit(sig, frame)
        if self.force_exit:
            ShutdownClock.end()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        await super().shutdown(sockets)
        if not self.force_exit or self._app_shut_down():
            return
        # uvicorn neither cancelled the requests nor ran the app's shutdown.
        requests = [task for task in self.server_state.tasks if not task.done()]
        for task in requests:
            task.cancel()
        if requests:
            log.error(
                "stopped at once: %d request(s) cut, none of their turns committed", len(requests)
            )
            await asyncio.wait(requests, timeout=ANSWER_WAIT)
        await self.lifespan.shutdown()

    def _app_shut_down(self) -> bool:
        # A stop at once that came while the app's shutdown ran (it then ends the wait for
        # turns early: service.finish_turns) leaves nothing to do here.
        done = getattr(self.lifespan, "shutdown_event", None)
        return done is not None and done.is_set()


def run(app: object, sockets: list[socket.socket] | None = None, **settings: object) -> int:
    """Serve ``app`` with uvicorn's ``settings`` until a signal stops it, on ``sockets`` when
    given (bound already), else on the host and port of ``settings``; 0 after a graceful stop,
    :data:`STOPPED_AT_ONCE` after a stop at once, 1 when it could not start (uvicorn logged
    why)."""
    server = SignalledServer(uvicorn.Config(app, lifespan="on", **settings))  # type: ignore[arg-type]
    try:
        server.run(sockets=sockets)
    except KeyboardInterrupt:  # a Ctrl-C before uvicorn took the signals
        return STOPPED_AT_ONCE
    if not server.started:
        return 1
    return STOPPED_AT_ONCE if server.force_exit else 0
