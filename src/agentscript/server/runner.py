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


class SignalledServer(uvicorn.Server):
    """uvicorn's server with the stops of the module's docstring."""

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
