"""The pause before a worker that could not reach its store is started again doubles with each
such failure in a row in its place; the row ends when a worker in that place has served (it
said on its pipe that its server started), and only then: a start killed or crashed in between
says nothing about the store (docs/serve.md)."""

from __future__ import annotations

import itertools
import multiprocessing
import signal
import time

import pytest
import uvicorn

from agentscript.server import supervisor
from agentscript.server.pings import ANSWER, Pings
from agentscript.server.supervisor import STORE_RETRY_MAX, STORE_UNAVAILABLE, Supervisor

from .test_supervisor import FakeWorker


@pytest.fixture(autouse=True)
def no_signals(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(supervisor.os, "kill", lambda pid, sig: None)


def _chief(monkeypatch: pytest.MonkeyPatch, worker_timeout: float = 30.0) -> Supervisor:
    """A supervisor of one place whose replacements each exit as unable to reach the store."""
    chief = Supervisor(uvicorn.Config(lambda *_: None), 1, worker_timeout)
    chief.workers = [FakeWorker(10)]  # type: ignore[list-item]
    chief.born = [time.monotonic()]
    pids = itertools.count(100)
    monkeypatch.setattr(
        chief, "_start", lambda sockets: FakeWorker(next(pids), exitcode=STORE_UNAVAILABLE)
    )
    return chief


def _ended(chief: Supervisor, exitcode: int, *, served: bool) -> None:
    """The worker in place 0 ended with ``exitcode``, after saying its server started if
    ``served``; nothing read its pipe before (as with the pings off)."""
    ours, theirs = multiprocessing.Pipe()
    if served:
        theirs.send_bytes(ANSWER)  # what a worker sends once its server has started
    theirs.close()
    pid = chief.workers[0].pid
    assert pid is not None
    chief.pings[pid] = Pings(ours)
    chief.workers[0].exitcode = exitcode  # type: ignore[misc]


def _next_pause(chief: Supervisor) -> float:
    """Let the worker in place 0 end as unable to reach its store: the pause before another."""
    chief._replace_the_dead([])
    chief.workers[0].exitcode = STORE_UNAVAILABLE  # type: ignore[misc]
    chief._replace_the_dead([])
    pause = round(chief.due[0] - time.monotonic())
    chief.due[0] = time.monotonic()  # over: the next look starts another
    chief._replace_the_dead([])
    return pause


def _fail_in_a_row(chief: Supervisor, times: int) -> list[float]:
    pauses = []
    chief.workers[0].exitcode = STORE_UNAVAILABLE  # type: ignore[misc]
    for _ in range(times):
        chief._replace_the_dead([])
        pauses.append(round(chief.due[0] - time.monotonic()))
        chief.due[0] = time.monotonic()
        chief._replace_the_dead([])  # another, which cannot reach the store either
    return pauses


@pytest.mark.parametrize("ended", [STORE_UNAVAILABLE, -signal.SIGKILL, 1])
@pytest.mark.parametrize("worker_timeout", [30.0, 0.0])
def test_a_worker_that_served_ends_the_row_however_it_ended(
    monkeypatch: pytest.MonkeyPatch, ended: int, worker_timeout: float
) -> None:
    """Six failures in a row reach the longest pause; a worker then serves, and whatever ends it
    (even an exit that says the store could not be reached), the next failure waits the first
    pause again, not the longest."""
    chief = _chief(monkeypatch, worker_timeout)
    assert _fail_in_a_row(chief, 6) == [1, 2, 4, 8, 16, STORE_RETRY_MAX]
    chief.workers[0].exitcode = None  # type: ignore[misc]
    chief.born[0] = time.monotonic() - 3600
    _ended(chief, ended, served=True)
    if ended == STORE_UNAVAILABLE:
        chief._replace_the_dead([])
        assert round(chief.due[0] - time.monotonic()) == 1
    else:
        assert _next_pause(chief) == 1
    assert chief.stops == 0 and chief.status == 0


@pytest.mark.parametrize("hung", [True, False])
def test_a_start_that_failed_otherwise_does_not_end_the_row(
    monkeypatch: pytest.MonkeyPatch, hung: bool
) -> None:
    """Between two failures to reach the store, a start killed for hanging (the database may
    not answer at all) or one killed before it served: the pauses go on doubling."""
    chief = _chief(monkeypatch)
    assert _fail_in_a_row(chief, 3) == [1, 2, 4]
    chief.workers[0].exitcode = None  # type: ignore[misc]
    pid = chief.workers[0].pid
    assert pid is not None
    if hung:
        chief.hung.add(pid)
    _ended(chief, -signal.SIGKILL, served=False)
    assert _next_pause(chief) == 8
    assert chief.stops == 0 and chief.failed_starts == 1
