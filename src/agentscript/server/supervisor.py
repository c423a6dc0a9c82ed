"""``--workers N``: N worker processes on one socket, stopped as one server.

uvicorn's own supervisor had three habits that did not suit a server stopped from a terminal:

- Its workers got the terminal's Ctrl-C themselves and ran uvicorn's plain server, so a second
  Ctrl-C cut their turns with no answer, skipped the app's shutdown (leases kept, store left
  open) and exited 0.
- ``SIGHUP`` started every worker again: a closed terminal left the server running headless,
  where one worker stops.
- Its exit status did not say whether a worker could not start.

Here the supervisor alone decides. Each worker runs :class:`WorkerServer` and lets the
terminal's ``SIGINT`` and ``SIGHUP`` pass (the whole foreground process group gets them). The
first ``SIGINT``, ``SIGTERM`` or ``SIGHUP`` the supervisor gets closes its copy of the listening
socket (new connections are refused once the workers have closed theirs, as with one worker)
and sends ``SIGTERM`` to each worker: a graceful stop within ``--shutdown-grace``. A second
``SIGINT`` sends :data:`STOP_AT_ONCE` to each: the one-worker server's stop at once (running
requests get ``503 shutting_down``, the app's shutdown gives the leases back and closes the
store), and the command exits 130. A third sends ``SIGKILL``. A worker that dies is started
again; one that could not start (exit 3: a failed start-up), or :data:`FAILED_STARTS` in a row
each dying before its server started (however long it took: the start timeout below bounds
that), stops the server, which exits 1. A worker that had served is no failed start however
young it died (an out-of-memory kill of a busy worker): it is started again and ends the row.

Two failures at a worker's start stop nothing, since what failed may come back while the server
would have stopped for good: a store it could not reach (exit :data:`STORE_UNAVAILABLE`: the
database down or failing over), and files that changed on disk since the server started or no
longer load (exit :data:`FILES_CHANGED`: new agent files copied before a planned restart, one
half written). Such a worker is started again after a pause that doubles each time in a row, up
to :data:`STORE_RETRY_MAX` seconds, while the other workers serve (answering ``503`` for what
needs the store; serving the agents as the server loaded them at its start, since one server
never serves two versions of an agent), and it does not count as a failed start. The row ends
once a worker in its place has served (its server started, the store open), not when one dies
otherwise before it served. With no worker left serving on changed files, the server answers
nothing: each start is then an error in the log, not a warning, and the starts go on (the files
may be put back as they were; a restart serves them as they are).

A worker whose event loop leaves a ping unanswered ``--worker-timeout`` seconds (:mod:`.pings`:
a deadlock, an action that never gives the loop back, a stopped process) is killed with
``SIGKILL`` and started again as one that died, with one line in the log. A worker still
starting is not pinged, nor is any once the server stops. One whose server has not started
within ``--worker-start-timeout`` (an import that blocks, a store that answers nothing for
longer than its own connect timeouts and deadlines, which end in an exit as above) serves
nothing, and the server would run a worker short, or answer nothing, without a word: it is
killed alike, and counts as a failed start, so that starts which always hang stop the server
as starts which always die do.

The workers share their metrics through a directory the supervisor creates and removes
(:mod:`.sharedmetrics`); a worker that ended has its counters folded into the departed total
before another is started.
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
from multiprocessing.connection import Connection
from types import FrameType

import uvicorn

from agentscript.server.config import ServerConfig
from agentscript.server.pings import Pings, answer_pings
from agentscript.server.runner import HANDLED, STOPPED_AT_ONCE, SignalledServer
from agentscript.server.sharedmetrics import METRICS_DIR_ENV, MetricsDir
from agentscript.store.base import StoreUnreachable

log = logging.getLogger("agentscript.server")

# The signal a worker takes as a second Ctrl-C (its terminal's SIGINT is ignored).
STOP_AT_ONCE = signal.SIGUSR1
# uvicorn's exit code for a server that failed before it served (uvicorn.config.STARTUP_FAILURE).
STARTUP_FAILURE = 3
# A worker's exit code when its store could not be reached at its start (sysexits' EX_TEMPFAIL:
# try again later): its app's start-up says so in ``app.state.store_failed`` (server/app.py).
STORE_UNAVAILABLE = 75
# A worker's exit code when it would not serve what the server's files hold now (sysexits'
# EX_CONFIG): a check the command passed at the start, with the same options, failed in the
# worker's start (server/command.py ``worker_app``), so a file it reads changed on disk since:
# an agent edited or half copied, or no longer loading.
FILES_CHANGED = 78
# Seconds before a worker that exited as either is started again; twice as long each time in a
# row, up to the most: a database down for an hour costs a spawn every half-minute, not a spawn
# a second.
STORE_RETRY_FIRST = 1.0
STORE_RETRY_MAX = 30.0
FAILED = 1
# Seconds between two looks at the workers (a dead one is started again).
CHECK_EVERY = 0.2
# Workers dying before their server started, this many times in a row, are a start-up that
# fails: started again, they would die again, forever. At any age: a start that dies after
# 10 s (a slow import, a store slow to answer) loops as surely as one that dies at once.
FAILED_STARTS = 5
# Seconds a stopping worker gets past the shutdown grace: its server then cuts the turns left
# and runs the app's shutdown (leases given back, store closed), well within this.
STOP_MARGIN = 5.0
# The signals a worker leaves to its supervisor: the terminal sends them to every process.
LEFT_TO_SUPERVISOR = (signal.SIGINT, signal.SIGHUP)

Handler = Callable[[int, FrameType | None], object] | int


def left_to_supervisor(sig: int, frame: FrameType | None) -> None:
    """A worker's handler of the terminal's signals: nothing; its supervisor acts on them. A
    handler rather than ``SIG_IGN``, which the processes a worker starts (an action's
    subprocess) would inherit across ``exec``."""


class WorkerServer(SignalledServer):
    """A worker's server: ``SIGTERM`` stops it gracefully, :data:`STOP_AT_ONCE` at once; the
    terminal's ``SIGINT`` and ``SIGHUP`` are its supervisor's to act on. Once started, its
    event loop answers the supervisor's pings on ``pings`` (:mod:`.pings`)."""

    def __init__(self, config: uvicorn.Config, pings: Connection | None = None) -> None:
        super().__init__(config)
        self.pings = pings

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        try:
            await super().startup(sockets)
        except SystemExit:
            # uvicorn's exit for any failed start-up (3): one whose store could not be reached
            # exits as such, for its supervisor to start it again later.
            if _unreachable(_store_failure(self.config.loaded_app)):
                raise SystemExit(STORE_UNAVAILABLE) from None
            raise
        if self.started and self.pings is not None:
            answer_pings(self.pings)

    def signal_handlers(self) -> dict[int, Handler]:
        return {
            signal.SIGTERM: self.handle_exit,
            STOP_AT_ONCE: self.stop_at_once,
            **{sig: left_to_supervisor for sig in LEFT_TO_SUPERVISOR},
        }

    def stop_at_once(self, sig: int, frame: FrameType | None) -> None:
        self.should_exit = True
        self.handle_exit(signal.SIGINT, frame)  # a SIGINT after a stop: at once


def run_worker(config: uvicorn.Config, sockets: list[socket.socket], pings: Connection) -> None:
    """A worker process's entry point (spawned: it imports this module afresh). It started
    with the terminal's signals blocked (:func:`_held`); a Ctrl-C meanwhile is dropped here,
    where the supervisor got it too."""
    for sig in LEFT_TO_SUPERVISOR:
        signal.signal(sig, signal.SIG_IGN)  # discards one pending since the start
        signal.signal(sig, left_to_supervisor)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, LEFT_TO_SUPERVISOR)
    config.configure_logging()
    WorkerServer(config, pings).run(sockets=sockets)


class Supervisor:
    """Start ``workers`` processes serving ``config`` on the given sockets; :meth:`run` until
    stopped. A worker that leaves a ping unanswered ``worker_timeout`` seconds is killed (0:
    never), as is one not started within :attr:`start_timeout` seconds."""

    def __init__(
        self,
        config: uvicorn.Config,
        workers: int,
        worker_timeout: float = ServerConfig.worker_timeout,
        start_timeout: float = ServerConfig.worker_start_timeout,
    ) -> None:
        self.config = config
        self.count = workers
        self.worker_timeout = worker_timeout
        self.workers: list[multiprocessing.process.BaseProcess] = []
        self.born: list[float] = []  # when each worker was started (time.monotonic())
        self.pings: dict[int, Pings] = {}  # each worker's end of its ping pipe, by pid
        self.silent: set[int] = set()  # the workers killed for leaving a ping unanswered
        self.hung: set[int] = set()  # the workers killed for not starting in time
        # Seconds a worker may take until its server has started (--worker-start-timeout; 0:
        # unbounded). Apart from worker_timeout, which bounds a silence of a running loop: a
        # start imports the app and opens the store, which on PostgreSQL may wait out a connect
        # timeout (10 s an address) and run migrations; one that waited for an unreachable
        # database must exit as such (started again later), not be killed as hung.
        self.start_timeout = start_timeout
        # Workers in a row that died, or were killed as hung, before they served.
        self.failed_starts = 0
        # The places whose worker could not reach the store or found the files changed, each
        # with when to start another (time.monotonic()); and how many times in a row each
        # could not start: the row ends only when a worker in the place has served (a start
        # killed or crashed meanwhile says nothing about the store, and one that hung may have
        # waited for it).
        self.due: dict[int, float] = {}
        self.retries: dict[int, int] = {}
        self.stops = 0  # stop signals received; the second SIGINT stops at once
        self.status = 0
        self.metrics: MetricsDir | None = None  # while run runs
        self._context = multiprocessing.get_context("spawn")

    def run(self, sockets: list[socket.socket]) -> int:
        """Serve on ``sockets`` (bound, and closed here); 0 after a graceful stop,
        :data:`STOPPED_AT_ONCE` after a stop at once, :data:`FAILED` when a worker could not
        start."""
        was = os.environ.get(METRICS_DIR_ENV)
        shared: MetricsDir | None = None
        before: dict[signal.Signals, Callable[[int, FrameType | None], object] | int | None] = {}
        # All inside the try: signal.signal raises outside the main thread, and the directory
        # and the variable must not outlive this call then either.
        try:
            shared = self.metrics = MetricsDir.create()
            # The workers are spawned with this process's environment.
            os.environ[METRICS_DIR_ENV] = str(shared.path)
            for sig in HANDLED:
                before[sig] = signal.signal(sig, self.on_signal)
            for _ in range(self.count):
                self.workers.append(self._start(sockets))
                self.born.append(time.monotonic())
            while not self.stops:
                time.sleep(CHECK_EVERY)
                self._replace_the_dead(sockets)
                self._kill_the_silent(time.monotonic())
            for sock in sockets:
                sock.close()  # refused once the workers close theirs, not queued unanswered
            # A worker started while the stop came gets it too.
            self._send(STOP_AT_ONCE if self.stops > 1 else signal.SIGTERM)
            self._join_all()
        finally:
            for sig, handler in before.items():
                signal.signal(sig, handler)
            for sock in sockets:
                sock.close()
            for pings in self.pings.values():
                pings.close()
            if shared is not None:
                shared.remove()
            if was is None:
                os.environ.pop(METRICS_DIR_ENV, None)
            else:
                os.environ[METRICS_DIR_ENV] = was
        return self.status

    def on_signal(self, sig: int, frame: FrameType | None) -> None:
        # In the main thread between two bytecodes: only flags and os.kill here.
        if self.stops and sig == signal.SIGINT:
            self.stops += 1
            if self.stops == 2:
                log.warning("a second Ctrl-C: the workers stop at once, cutting their requests")
                self.status = self.status or STOPPED_AT_ONCE  # a failed start stays a failure
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
        ours, theirs = self._context.Pipe()
        worker = self._context.Process(target=run_worker, args=(self.config, sockets, theirs))
        with _held():
            worker.start()
        theirs.close()  # the worker has its own copy
        if worker.pid is not None:
            self.pings[worker.pid] = Pings(ours)
        return worker

    def _replace_the_dead(self, sockets: list[socket.socket]) -> None:
        for index, worker in enumerate(self.workers):
            code = worker.exitcode
            if code is None or self.stops:
                continue
            if index in self.due:  # ended already: another starts once the pause is over
                if time.monotonic() >= self.due[index]:
                    del self.due[index]
                    self._start_at(index, sockets)
                continue
            worker.join()
            hung = worker.pid in self.hung
            served = self._had_started(worker.pid)
            if served:
                # The failed starts before it are no longer a row, whatever ended it.
                self.retries.pop(index, None)
            said = self._forget(worker.pid)
            if self.metrics is not None and worker.pid is not None:
                self.metrics.fold(worker.pid)
            if code == STORE_UNAVAILABLE:
                self._start_later(index, worker.pid, "could not reach the store")
                continue
            if code == FILES_CHANGED:
                self._start_later(index, worker.pid, *self._files_changed(index))
                continue
            # A start that hung failed as surely as one that died, however long it was let run;
            # a worker that served was no failed start, however soon it died (an OOM kill).
            failed = hung or not served
            self.failed_starts = self.failed_starts + 1 if failed else 0
            how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
            if code == STARTUP_FAILURE or self.failed_starts >= FAILED_STARTS:
                if code == STARTUP_FAILURE:
                    why = "could not start"
                elif hung:
                    why = (
                        f"did not start within {self.start_timeout:g} s, the "
                        f"{self.failed_starts}th worker in a row that failed its start"
                    )
                else:
                    why = (
                        f"died ({how}) before it served, the {self.failed_starts}th worker in "
                        f"a row that failed its start"
                    )
                log.error("worker process [%d] %s: the server stops", worker.pid, why)
                self.status = FAILED
                self.stops = 1
                self._send(signal.SIGTERM)
                return
            if not said:
                log.warning("worker process [%d] died (%s); starting another", worker.pid, how)
            self._start_at(index, sockets)

    def _start_at(self, index: int, sockets: list[socket.socket]) -> None:
        self.workers[index] = self._start(sockets)
        self.born[index] = time.monotonic()

    def _start_later(
        self, index: int, pid: int | None, why: str, level: int = logging.WARNING
    ) -> None:
        """Start another worker in place ``index`` after a pause: its last one could not start,
        for ``why`` (it said more in a line of its own), which may pass."""
        failures = self.retries[index] = self.retries.get(index, 0) + 1
        pause = min(STORE_RETRY_MAX, STORE_RETRY_FIRST * 2 ** (failures - 1))
        self.due[index] = time.monotonic() + pause
        log.log(level, "worker process [%s] %s; starting another in %g s", pid, why, pause)

    def _files_changed(self, index: int) -> tuple[str, int]:
        """Why the worker in place ``index`` exited with :data:`FILES_CHANGED`, and how loud to
        say it: an error once no worker serves, since the server then answers nothing. Only
        workers whose server started count: one still starting loads the same changed files."""
        serving = sum(
            1
            for other, worker in enumerate(self.workers)
            if other != index and worker.exitcode is None and self._ready(worker.pid)
        )
        why = (
            "could not start: the files it loads changed on disk since the server started, or "
            "no longer load (its line above says which)"
        )
        if not serving:
            return (
                f"{why}; no worker serves, so the server answers nothing until the files are "
                "put back as they were, or it is restarted to serve them as they are",
                logging.ERROR,
            )
        plural = "s serve" if serving > 1 else " serves"
        return (
            f"{why}; the other {serving} worker{plural} the version the server started with, "
            "and a restart serves the new files",
            logging.WARNING,
        )

    def _kill_the_silent(self, now: float) -> None:
        """Ping each ready worker; kill one whose ping has waited ``worker_timeout`` seconds,
        or one not ready :attr:`start_timeout` seconds after its start (:meth:`_replace_the_dead`
        then starts another)."""
        if self.stops or not (self.worker_timeout or self.start_timeout):
            return
        for index, worker in enumerate(self.workers):
            pid = worker.pid
            pings = self.pings.get(pid) if pid is not None else None
            if pid is None or pings is None or worker.exitcode is not None:
                continue
            if pid in self.silent or pid in self.hung:
                continue
            ready = pings.listen()
            # With --worker-timeout 0 nothing is pinged: the start is only listened for.
            waited = pings.check(now) if self.worker_timeout else 0.0
            starting = now - self.born[index]
            if not ready and self.start_timeout and starting >= self.start_timeout:
                log.warning(
                    "worker process [%d] did not start within %g s: killed; starting another",
                    pid,
                    self.start_timeout,
                )
                self.hung.add(pid)
            elif self.worker_timeout and waited >= self.worker_timeout:
                log.warning(
                    "worker process [%d] did not answer for %g s: killed; starting another",
                    pid,
                    self.worker_timeout,
                )
                self.silent.add(pid)
            else:
                continue
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def _join_all(self) -> None:
        """Wait for the workers to end: at most the shutdown grace and :data:`STOP_MARGIN`
        seconds more (unbounded without a grace). A worker stuck before its server started
        (an import, a store that never answers) only notes a ``SIGTERM``, and would hold the
        stop until a third Ctrl-C, or for good under a process manager that sends one
        ``SIGTERM``: it is killed, with a line."""
        grace = self.config.timeout_graceful_shutdown
        if grace is None:
            for worker in self.workers:
                worker.join()
            return
        bound = grace + STOP_MARGIN
        deadline = time.monotonic() + bound
        for worker in self.workers:
            worker.join(max(0.0, deadline - time.monotonic()))
        for worker in self.workers:
            if worker.exitcode is None and worker.pid is not None:
                log.warning(
                    "worker process [%d] did not stop within %g s of the stop: killed",
                    worker.pid,
                    bound,
                )
                with contextlib.suppress(ProcessLookupError):
                    os.kill(worker.pid, signal.SIGKILL)
                worker.join()

    def _had_started(self, pid: int | None) -> bool:
        """Whether the worker ``pid``, which ended, had said its server started: it listened
        with its store open. What it said stays in its pipe after it ended, so this holds with
        the pings off (``--worker-timeout 0``) and for a worker that ended between two looks."""
        pings = self.pings.get(pid) if pid is not None else None
        if pings is None:
            return False
        pings.check(time.monotonic())  # reads it (a ping due now goes nowhere, quietly)
        return pings.ready

    def _ready(self, pid: int | None) -> bool:
        """Whether the live worker ``pid`` has said its server started (its pipe read now)."""
        pings = self.pings.get(pid) if pid is not None else None
        return pings is not None and pings.listen()

    def _forget(self, pid: int | None) -> bool:
        """Close the pipe of a worker that ended; whether it was killed for leaving a ping
        unanswered or for not starting in time (a line said so then)."""
        if pid is None:
            return False
        pings = self.pings.pop(pid, None)
        if pings is not None:
            pings.close()
        killed = pid in self.silent or pid in self.hung
        self.silent.discard(pid)
        self.hung.discard(pid)
        return killed


def _store_failure(app: object) -> object:
    """The error of a start-up that could not open its store (``app.state.store_failed``,
    server/app.py), None if none; ``app`` is the app as uvicorn loaded it, under the middleware
    uvicorn may add (each keeps the app it wraps as ``app``)."""
    while app is not None and not hasattr(app, "state"):
        app = getattr(app, "app", None)
    return getattr(getattr(app, "state", None), "store_failed", None)


def _unreachable(failure: object) -> bool:
    """Whether a start-up's store failure is one of reaching the store."""
    return isinstance(failure, StoreUnreachable)


@contextlib.contextmanager
def _held() -> Iterator[None]:
    """Start a worker with the terminal's signals blocked: it inherits the mask, and sets its
    own handlers before it unblocks them (:func:`run_worker`), so a Ctrl-C during its start
    never reaches Python's default handler there (a ``KeyboardInterrupt`` traceback). Here they
    wait, blocked and not lost, until the worker has started."""
    signal.pthread_sigmask(signal.SIG_BLOCK, LEFT_TO_SUPERVISOR)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, LEFT_TO_SUPERVISOR)
