"""The supervisor of ``--workers N`` decides alone how its workers stop: the first signal is a
graceful stop for each, a second Ctrl-C a stop at once, a third ends them; a worker takes the
terminal's ``SIGINT`` and ``SIGHUP`` as its supervisor's business (test_shutdown.py runs
real servers through the same stops)."""

from __future__ import annotations

import itertools
import os
import signal
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import uvicorn

from agentscript.server import supervisor
from agentscript.server.runner import STOPPED_AT_ONCE, ShutdownClock
from agentscript.server.sharedmetrics import METRICS_DIR_ENV
from agentscript.server.supervisor import (
    FAILED_STARTS,
    STOP_AT_ONCE,
    Supervisor,
    WorkerServer,
    left_to_supervisor,
)


@dataclass
class FakeWorker:
    pid: int
    exitcode: int | None = None

    def join(self) -> None:
        pass


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    signals: list[tuple[int, int]] = []
    monkeypatch.setattr(supervisor.os, "kill", lambda pid, sig: signals.append((pid, sig)))
    return signals


def two_workers() -> Supervisor:
    chief = Supervisor(uvicorn.Config(lambda *_: None, timeout_graceful_shutdown=25), 2)
    chief.workers = [FakeWorker(11), FakeWorker(12), FakeWorker(13, exitcode=0)]  # type: ignore[list-item]
    chief.born = [time.monotonic()] * 3
    return chief


@pytest.mark.parametrize("first", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_the_first_signal_stops_each_live_worker_gracefully(
    sent: list[tuple[int, int]], first: signal.Signals
) -> None:
    chief = two_workers()
    chief.on_signal(first, None)
    assert sent == [(11, signal.SIGTERM), (12, signal.SIGTERM)]  # not the worker that ended
    chief.on_signal(signal.SIGTERM, None)
    chief.on_signal(signal.SIGHUP, None)
    assert len(sent) == 2 and chief.status == 0  # more of them change nothing


def test_a_second_ctrl_c_stops_the_workers_at_once_and_a_third_kills_them(
    sent: list[tuple[int, int]],
) -> None:
    chief = two_workers()
    chief.on_signal(signal.SIGTERM, None)
    chief.on_signal(signal.SIGINT, None)
    assert sent[2:] == [(11, STOP_AT_ONCE), (12, STOP_AT_ONCE)]
    assert chief.status == STOPPED_AT_ONCE
    chief.on_signal(signal.SIGINT, None)
    assert sent[4:] == [(11, signal.SIGKILL), (12, signal.SIGKILL)]


def test_a_worker_leaves_the_terminals_signals_to_its_supervisor() -> None:
    server = WorkerServer(uvicorn.Config(lambda *_: None))
    handlers = server.signal_handlers()
    # A handler that does nothing, not SIG_IGN: what a worker starts keeps the defaults.
    assert handlers[signal.SIGINT] is left_to_supervisor
    assert handlers[signal.SIGHUP] is left_to_supervisor
    assert handlers[signal.SIGTERM] == server.handle_exit
    assert handlers[STOP_AT_ONCE] == server.stop_at_once
    left_to_supervisor(signal.SIGINT, None)
    assert not server.should_exit


def test_a_worker_told_to_stop_at_once_stops_as_a_second_ctrl_c_does() -> None:
    server = WorkerServer(uvicorn.Config(lambda *_: None))
    server.stop_at_once(STOP_AT_ONCE, None)
    assert server.should_exit and server.force_exit
    assert ShutdownClock.left(25) == 0  # nothing left of the grace for the app's turns
    ShutdownClock.reset()


def test_a_worker_stopped_gracefully_is_not_stopped_at_once_by_more_sigterms() -> None:
    server = WorkerServer(uvicorn.Config(lambda *_: None))
    for _ in range(3):
        server.handle_exit(signal.SIGTERM, None)
    assert server.should_exit and not server.force_exit


def test_workers_dying_right_after_their_start_stop_the_server_as_a_failed_start(
    sent: list[tuple[int, int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    chief = two_workers()
    chief.workers = chief.workers[:2]
    pids = itertools.count(100)
    # Each new worker dies at once, before its server started (no pipe of its says it did),
    # with an exit code that is not uvicorn's start-up failure
    # (test_supervisor_failed_starts.py: workers that served are no failed starts).
    monkeypatch.setattr(chief, "_start", lambda sockets: FakeWorker(next(pids), exitcode=1))
    chief.workers[0].exitcode = 1
    for _ in range(FAILED_STARTS):
        chief._replace_the_dead([])
    assert chief.stops == 1 and chief.status == 1
    assert (12, signal.SIGTERM) in sent  # the live worker is stopped gracefully
    chief.on_signal(signal.SIGINT, None)  # a Ctrl-C then: at once, still a failed start
    assert chief.status == 1


WORKER_STARTING_LATE = """
import signal, sys, time
from agentscript.server.orphan import stop_when_orphaned, supervisor_pid
signal.signal(signal.SIGTERM, lambda *_: (print("stopping", flush=True), sys.exit(0)))
stop_when_orphaned(supervisor_pid(), every=0.05)
time.sleep(30)
print("still serving", flush=True)
"""


def test_a_worker_whose_supervisor_died_before_it_looked_stops() -> None:
    # Told its supervisor's pid, a worker that started after the supervisor died (reparented
    # already: its parent is no longer that pid) stops at its first look. It used to take its
    # new parent for the supervisor and serve on forever.
    import os
    import subprocess
    import sys

    dead_pid = 2**22 + 12345  # above pid_max's default: no such process
    env = {**os.environ, "AGENTSCRIPT_SUPERVISOR_PID": str(dead_pid)}
    done = subprocess.run(
        [sys.executable, "-c", WORKER_STARTING_LATE],
        env=env,
        capture_output=True,
        text=True,
        timeout=20,
        check=False,
    )
    assert done.returncode == 0 and done.stdout.strip() == "stopping", done
    assert f"supervisor (pid {dead_pid}) is gone" in done.stderr


@pytest.mark.parametrize("set_before", [None, "/elsewhere"])
def test_a_run_that_fails_to_start_leaves_no_metrics_directory_and_restores_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, set_before: str | None
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    if set_before is None:
        monkeypatch.delenv(METRICS_DIR_ENV, raising=False)
    else:
        monkeypatch.setenv(METRICS_DIR_ENV, set_before)
    chief = Supervisor(uvicorn.Config(lambda *_: None), 1)
    raised: list[BaseException] = []

    def run() -> None:
        try:
            chief.run([])
        except BaseException as exc:  # handed to the test's thread
            raised.append(exc)

    # signal.signal raises ValueError outside the main thread.
    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert [type(exc) for exc in raised] == [ValueError]
    assert list(tmp_path.glob("agentscript-metrics-*")) == []
    assert os.environ.get(METRICS_DIR_ENV) == set_before
    assert chief.workers == []
