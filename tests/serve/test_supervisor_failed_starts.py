"""A worker's death counts as a failed start when the worker never said its server started
(or was killed as a start that hung), however long after its start it died: FAILED_STARTS of
those in a row are a crash loop of starts that never serve, and stop the server. Workers that
served and were killed young (the out-of-memory killer taking busy workers soon after each
start) are started again, each ending the row; they used to stop the whole server after five
such kills within 10 s of their starts. Starts that died more than 10 s after they began,
before they served, used to loop forever without a word beyond one warning each."""

from __future__ import annotations

import logging
import multiprocessing
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from multiprocessing.connection import Connection

import pytest
import uvicorn

from agentscript.server import supervisor
from agentscript.server.pings import ANSWER, Pings
from agentscript.server.supervisor import FAILED, FAILED_STARTS, Supervisor

from .test_supervisor import FakeWorker


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    signals: list[tuple[int, int]] = []
    monkeypatch.setattr(supervisor.os, "kill", lambda pid, sig: signals.append((pid, sig)))
    return signals


@dataclass
class Places:
    """A supervisor of two places: place 1's worker serves throughout, place 0's is replaced
    by fresh workers, each with a pipe whose worker's end is in ``pipes``."""

    chief: Supervisor
    pipes: dict[int, Connection] = field(default_factory=dict)

    def start(self, sockets: object) -> FakeWorker:
        ours, theirs = multiprocessing.Pipe()
        worker = FakeWorker(100 + len(self.pipes))
        self.chief.pings[worker.pid] = Pings(ours)
        self.pipes[worker.pid] = theirs
        return worker

    def dies(self, *, served: bool, hung: bool = False, age: float = 0.0) -> None:
        """Place 0's worker dies by SIGKILL, after saying its server started if ``served``,
        ``age`` seconds after its start (an hour if killed as a start that ``hung``); the
        supervisor then has its look."""
        assert self.chief.stops == 0, "the server stopped"
        worker = self.chief.workers[0]
        assert worker.pid is not None
        if served:
            self.pipes[worker.pid].send_bytes(ANSWER)  # what a worker says once started
        self.pipes[worker.pid].close()  # the worker's end goes with it
        if hung:
            self.chief.hung.add(worker.pid)
            age = 3600
        self.chief.born[0] = time.monotonic() - age
        worker.exitcode = -signal.SIGKILL  # type: ignore[misc]
        self.chief._replace_the_dead([])


@pytest.fixture
def places(monkeypatch: pytest.MonkeyPatch) -> Iterator[Places]:
    chief = Supervisor(uvicorn.Config(lambda *_: None, timeout_graceful_shutdown=25), 2)
    places = Places(chief)
    monkeypatch.setattr(chief, "_start", places.start)
    chief.workers = [places.start([]), FakeWorker(12)]  # type: ignore[list-item]
    chief.born = [time.monotonic()] * 2
    yield places
    for pings in chief.pings.values():
        pings.close()
    for end in places.pipes.values():
        end.close()


def test_workers_that_served_and_were_killed_young_are_started_again_however_often(
    places: Places, sent: list[tuple[int, int]], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="agentscript.server"):
        for _ in range(FAILED_STARTS * 2):
            places.dies(served=True)
    chief = places.chief
    assert chief.stops == 0 and chief.status == 0 and chief.failed_starts == 0
    assert sent == []  # the other worker serves on
    assert chief.workers[0].pid == 100 + FAILED_STARTS * 2
    assert caplog.records[0].getMessage() == (
        "worker process [100] died (killed by SIGKILL); starting another"
    )


def test_a_worker_that_served_ends_the_row_of_failed_starts(
    places: Places, sent: list[tuple[int, int]]
) -> None:
    for _ in range(FAILED_STARTS - 1):
        places.dies(served=False)
    assert places.chief.failed_starts == FAILED_STARTS - 1
    places.dies(served=True)
    assert places.chief.failed_starts == 0
    for _ in range(FAILED_STARTS - 1):
        places.dies(served=False)
    assert places.chief.stops == 0 and sent == []


def test_starts_that_never_serve_stop_the_server_as_a_failed_start(
    places: Places, sent: list[tuple[int, int]], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="agentscript.server"):
        for _ in range(FAILED_STARTS):
            places.dies(served=False)
    assert places.chief.stops == 1 and places.chief.status == FAILED
    assert (12, signal.SIGTERM) in sent
    assert caplog.records[-1].getMessage() == (
        f"worker process [{100 + FAILED_STARTS - 1}] died (killed by SIGKILL) before it served, "
        f"the {FAILED_STARTS}th worker in a row that failed its start: the server stops"
    )


def test_starts_killed_as_hung_still_stop_the_server_whatever_their_age(
    places: Places, sent: list[tuple[int, int]]
) -> None:
    for _ in range(FAILED_STARTS):
        places.dies(served=False, hung=True)
    assert places.chief.stops == 1 and places.chief.status == FAILED


def test_starts_that_die_before_serving_stop_the_server_however_long_they_ran(
    places: Places, sent: list[tuple[int, int]], caplog: pytest.LogCaptureFixture
) -> None:
    """A start that takes 30 s and dies (a store slow to answer, then a crash in the app's
    start-up) is a loop like any other: it counted only within 10 s of the start before, so
    such a loop never stopped the server."""
    with caplog.at_level(logging.ERROR, logger="agentscript.server"):
        for _ in range(FAILED_STARTS):
            places.dies(served=False, age=30.0)
    assert places.chief.stops == 1 and places.chief.status == FAILED
    assert (12, signal.SIGTERM) in sent
    assert (
        caplog.records[-1]
        .getMessage()
        .endswith(
            f"before it served, the {FAILED_STARTS}th worker in a row that failed its start: "
            "the server stops"
        )
    )


def test_an_old_worker_that_served_is_no_failed_start(places: Places) -> None:
    for _ in range(FAILED_STARTS * 2):
        places.dies(served=True, age=30.0)
    assert places.chief.stops == 0 and places.chief.failed_starts == 0
