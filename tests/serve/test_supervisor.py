"""The supervisor of ``--workers N`` decides alone how its workers stop: the first signal is a
graceful stop for each, a second Ctrl-C a stop at once, a third ends them; a worker takes the
terminal's ``SIGINT`` and ``SIGHUP`` as its supervisor's business (test_shutdown.py runs
real servers through the same stops)."""

from __future__ import annotations

import signal
from dataclasses import dataclass

import pytest
import uvicorn

from agentscript.server import supervisor
from agentscript.server.runner import STOPPED_AT_ONCE, ShutdownClock
from agentscript.server.supervisor import STOP_AT_ONCE, Supervisor, WorkerServer


@dataclass
class FakeWorker:
    pid: int
    exitcode: int | None = None


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    signals: list[tuple[int, int]] = []
    monkeypatch.setattr(supervisor.os, "kill", lambda pid, sig: signals.append((pid, sig)))
    return signals


def two_workers() -> Supervisor:
    chief = Supervisor(uvicorn.Config(lambda *_: None, timeout_graceful_shutdown=25), 2)
    chief.workers = [FakeWorker(11), FakeWorker(12), FakeWorker(13, exitcode=0)]  # type: ignore[list-item]
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
    assert handlers[signal.SIGINT] == signal.SIG_IGN
    assert handlers[signal.SIGHUP] == signal.SIG_IGN
    assert handlers[signal.SIGTERM] == server.handle_exit
    assert handlers[STOP_AT_ONCE] == server.stop_at_once


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
