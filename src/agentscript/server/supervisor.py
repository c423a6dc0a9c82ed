"""``--workers N``: N worker processes on one socket, stopped as one server.

uvicorn's own supervisor had three habits that did not suit a server stopped from a terminal:

- Its workers got the terminal's Ctrl-C themselves and ran uvicorn's plain server, so a second
  Ctrl-C cut their turns with no answer, skipped the app's shutdown (leases kept, store left
  open) and exited 0.
- ``SIGHUP`` started every worker again: a closed terminal left the server running headless,
  where one worker stops.
- Its exit status did not say whether a worker could not start.

Here the supervisor alone decides. Each worker runs :class:`WorkerServer` and ignores the
terminal's ``SIGINT`` and ``SIGHUP`` (the whole foreground process group gets them). The first
``SIGINT``, ``SIGTERM`` or ``SIGHUP`` the supervisor gets sends ``SIGTERM`` to each worker: a
graceful stop within ``--shutdown-grace``, as with one worker. A second ``SIGINT`` sends
:data:`STOP_AT_ONCE` to each: the one-worker server's stop at once (running requests get
``503 shutting_down``, the app's shutdown gives the leases back and closes the store), and the
command exits 130. A third sends ``SIGKILL``. A worker that dies is started again; one that
could not start (exit 3: its agent files changed since the server started, a failed start-up)
stops the server, which exits 1.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import signal
import socket
import time
from collections.abc import Callable, Iterator
from types import FrameType

import uvicorn

from agentscript.server.runner import HANDLED, STOPPED_AT_ONCE, SignalledServer

log = logging.getLogger("agentscript.server")

# The signal a worker takes as a second Ctrl-C (its terminal's SIGINT is ignored).
STOP_AT_ONCE = signal.SIGUSR1
# uvicorn's exit code for a server that failed before it served (uvicorn.config.STARTUP_FAILURE).
STARTUP_FAILURE = 3
FAILED = 1
# Seconds between two looks at the workers (a dead one is started again).
CHECK_EVERY = 0.2
# The signals a worker leaves to its supervisor: the terminal sends them to every process.
LEFT_TO_SUPERVISOR = (signal.SIGINT, signal.SIGHUP)

Handler = Callable[[int, FrameType | None], object] | int


class WorkerServer(SignalledServer):
    """A worker's server: ``SIGTERM`` stops it gracefully, :data:`STOP_AT_ONCE` at once; the
    terminal's ``SIGINT`` and ``SIGHUP`` are its supervisor's to act on."""

    def signal_handlers(self) -> dict[int, Handler]:
        return {
            signal.SIGTERM: self.handle_exit,
            STOP_AT_ONCE: self.stop_at_once,
            **{sig: signal.SIG_IGN for sig in LEFT_TO_SUPERVISOR},
        }

    def stop_at_once(self, sig: int, frame: FrameType | None) -> None:
        self.should_exit = True
        self.handle_exit(signal.SIGINT, frame)  # a SIGINT after a stop: at once


def run_worker(config: uvicorn.Config, sockets: list[socket.socket]) -> None:
    """A worker process's entry point (spawned: it imports this module afresh)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, LEFT_TO_SUPERVISOR)  # held while it was started
    config.configure_logging()
    WorkerServer(config).run(sockets=sockets)


class Supervisor:
    """Start ``workers`` processes serving ``config`` on one socket; :meth:`run` until stopped."""

    def __init__(self, config: uvicorn.Config, workers: int) -> None:
        self.config = config
        self.count = workers
        self.workers: list[multiprocessing.process.BaseProcess] = []
        self.stops = 0  # stop signals received; the second SIGINT stops at once
        self.status = 0
        self._context = multiprocessing.get_context("spawn")

    def run(self) -> int:
        """0 after a graceful stop, :data:`STOPPED_AT_ONCE` after a stop at once,
        :data:`FAILED` when a worker could not start."""
        sockets = [self.config.bind_socket()]
        before = {sig: signal.signal(sig, self.on_signal) for sig in HANDLED}
        try:
            self.workers = [self._start(sockets) for _ in range(self.count)]
            while not self.stops:
                time.sleep(CHECK_EVERY)
                self._replace_the_dead(sockets)
            self._send(signal.SIGTERM)  # a worker started while the stop came gets it too
            for worker in self.workers:
                worker.join()
        finally:
            for sig, handler in before.items():
                signal.signal(sig, handler)
            for sock in sockets:
                sock.close()
        return self.status

    def on_signal(self, sig: int, frame: FrameType | None) -> None:
        # In the main thread between two bytecodes: only flags and os.kill here.
        if self.stops and sig == signal.SIGINT:
            self.stops += 1
            if self.stops == 2:
                log.warning("a second Ctrl-C: the workers stop at once, cutting their requests")
                self.status = STOPPED_AT_ONCE
                self._send(STOP_AT_ONCE)
            else:
                self._send(signal.SIGKILL)
            return
        if not self.stops:
            self.stops = 1
            log.warning(
                "%s: the %d workers stop, each letting its turns finish (up to %s s)",
                signal.Signals(sig).name,
                len(self.workers),
                self.config.timeout_graceful_shutdown,
            )
            self._send(signal.SIGTERM)

    def _send(self, sig: int) -> None:
        for worker in self.workers:
            if worker.pid is not None and worker.exitcode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(worker.pid, sig)

    def _start(self, sockets: list[socket.socket]) -> multiprocessing.process.BaseProcess:
        worker = self._context.Process(target=run_worker, args=(self.config, sockets))
        with _left_to_supervisor():
            worker.start()
        return worker

    def _replace_the_dead(self, sockets: list[socket.socket]) -> None:
        for index, worker in enumerate(self.workers):
            code = worker.exitcode
            if code is None or self.stops:
                continue
            worker.join()
            if code == STARTUP_FAILURE:
                log.error("worker process [%d] could not start: the server stops", worker.pid)
                self.status = FAILED
                self.stops = 1
                self._send(signal.SIGTERM)
                return
            how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
            log.warning("worker process [%d] died (%s); starting another", worker.pid, how)
            self.workers[index] = self._start(sockets)


@contextlib.contextmanager
def _left_to_supervisor() -> Iterator[None]:
    """Start a worker ignoring the terminal's signals from its first instruction: an ignored
    signal stays ignored across ``exec`` (a handler does not). Held meanwhile, not lost: a
    Ctrl-C in between reaches the supervisor once the worker has started."""
    signal.pthread_sigmask(signal.SIG_BLOCK, LEFT_TO_SUPERVISOR)
    before = {sig: signal.signal(sig, signal.SIG_IGN) for sig in LEFT_TO_SUPERVISOR}
    try:
        yield
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, LEFT_TO_SUPERVISOR)
