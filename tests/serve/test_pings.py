"""The supervisor of ``--workers N`` pings each worker's event loop (server/pings.py): a worker
that leaves a ping unanswered ``--worker-timeout`` seconds is killed and started again, once;
a worker still starting, or any worker once the server stops, is not pinged
(test_worker_restart.py stops a real worker with ``SIGSTOP``)."""

from __future__ import annotations

import asyncio
import itertools
import logging
import multiprocessing
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection

import pytest
import uvicorn

from agentscript.server import supervisor
from agentscript.server.config import ServerConfig
from agentscript.server.pings import ANSWER, PING, PING_EVERY, Pings, answer_pings
from agentscript.server.supervisor import Supervisor


@dataclass
class FakeWorker:
    pid: int
    exitcode: int | None = None

    def join(self, timeout: float | None = None) -> None:
        pass


@pytest.fixture
def pipe() -> Iterator[tuple[Connection, Connection]]:
    """The supervisor's end and the worker's end of one worker's pipe."""
    ours, theirs = multiprocessing.get_context("spawn").Pipe()
    yield ours, theirs
    ours.close()
    theirs.close()


@pytest.fixture
def killed(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    signals: list[tuple[int, int]] = []
    monkeypatch.setattr(supervisor.os, "kill", lambda pid, sig: signals.append((pid, sig)))
    return signals


def pings_read(theirs: Connection) -> list[bytes]:
    found = []
    while theirs.poll():
        found.append(theirs.recv_bytes())
    return found


def test_a_worker_still_starting_is_not_pinged(pipe: tuple[Connection, Connection]) -> None:
    ours, theirs = pipe
    pings = Pings(ours)
    assert pings.check(100.0) == 0.0 and pings.check(200.0) == 0.0
    assert not pings.ready and pings_read(theirs) == []


def test_a_ready_worker_is_pinged_one_ping_at_a_time(pipe: tuple[Connection, Connection]) -> None:
    ours, theirs = pipe
    pings = Pings(ours)
    theirs.send_bytes(ANSWER)  # what a worker says once its server has started
    assert pings.check(100.0) == 0.0 and pings.ready
    assert pings_read(theirs) == [PING]
    # Unanswered: no second ping, and the wait grows.
    assert pings.check(100.0 + PING_EVERY / 2) == PING_EVERY / 2
    assert pings.check(100.0 + 3 * PING_EVERY) == 3 * PING_EVERY
    assert pings_read(theirs) == []
    theirs.send_bytes(ANSWER)
    assert pings.check(100.0 + 3 * PING_EVERY) == 0.0  # answered: pinged again at once
    assert pings_read(theirs) == [PING]
    theirs.send_bytes(ANSWER)
    assert pings.check(100.0 + 3.5 * PING_EVERY) == 0.0  # the next one waits PING_EVERY
    assert pings_read(theirs) == []
    assert pings.check(100.0 + 4 * PING_EVERY) == 0.0
    assert pings_read(theirs) == [PING]


def test_a_dead_workers_pipe_is_no_error(pipe: tuple[Connection, Connection]) -> None:
    ours, theirs = pipe
    pings = Pings(ours)
    theirs.send_bytes(ANSWER)
    pings.check(100.0)
    theirs.close()  # the worker died
    assert pings.check(100.0 + 2 * PING_EVERY) == 2 * PING_EVERY  # its exit code says the rest


def test_a_workers_event_loop_answers_each_ping_and_lets_go_of_a_closed_pipe(
    pipe: tuple[Connection, Connection],
) -> None:
    ours, theirs = pipe

    async def worker() -> bool:
        answer_pings(theirs)
        assert ours.recv_bytes() == ANSWER  # unasked: its server has started
        for _ in range(2):
            ours.send_bytes(PING)
            time.sleep(0.2)  # the loop is stuck: no answer (a thread would answer for it)
            assert not ours.poll()
            await asyncio.sleep(0.05)
            assert ours.poll(5) and ours.recv_bytes() == ANSWER
        ours.close()  # the supervisor is gone
        await asyncio.sleep(0.05)
        # The reader was removed: the end of the pipe does not wake the loop forever.
        return asyncio.get_running_loop().remove_reader(theirs.fileno())

    assert asyncio.run(worker()) is False


def test_a_worker_whose_supervisor_died_while_it_started_starts_without_an_error(
    pipe: tuple[Connection, Connection],
) -> None:
    ours, theirs = pipe
    ours.close()

    async def worker() -> bool:
        answer_pings(theirs)  # used to raise BrokenPipeError out of the server's start-up
        return asyncio.get_running_loop().remove_reader(theirs.fileno())

    assert asyncio.run(worker()) is False  # no reader to wake the loop


def supervisor_of(*pipes: Connection, timeout: float = 2.0) -> Supervisor:
    chief = Supervisor(uvicorn.Config(lambda *_: None), len(pipes), worker_timeout=timeout)
    chief.workers = [FakeWorker(11 + i) for i in range(len(pipes))]  # type: ignore[misc]
    chief.born = [time.monotonic() - 3600] * len(pipes)
    chief.pings = {11 + i: Pings(end) for i, end in enumerate(pipes)}
    return chief


def test_a_worker_that_leaves_a_ping_unanswered_is_killed_once_and_replaced(
    pipe: tuple[Connection, Connection],
    killed: list[tuple[int, int]],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    ours, theirs = pipe
    chief = supervisor_of(ours, timeout=2.0)
    theirs.send_bytes(ANSWER)
    chief._kill_the_silent(100.0)  # ready: pinged
    chief._kill_the_silent(101.9)
    assert killed == []
    with caplog.at_level(logging.WARNING, logger="agentscript.server"):
        chief._kill_the_silent(102.0)
        chief._kill_the_silent(110.0)  # killed already: not again
        assert killed == [(11, signal.SIGKILL)]
        monkeypatch.setattr(chief, "_start", lambda sockets: FakeWorker(20))
        chief.workers[0].exitcode = -signal.SIGKILL
        chief._replace_the_dead([])
    assert chief.workers[0].pid == 20 and chief.stops == 0 and chief.failed_starts == 0
    assert ours.closed and 11 not in chief.pings
    # One line for the worker, not a second one for its death.
    assert [r.getMessage() for r in caplog.records] == [
        "worker process [11] did not answer for 2 s: killed; starting another"
    ]


def test_a_worker_that_answers_is_left_alone(
    pipe: tuple[Connection, Connection], killed: list[tuple[int, int]]
) -> None:
    ours, theirs = pipe
    chief = supervisor_of(ours, timeout=2.0)
    theirs.send_bytes(ANSWER)
    for second in range(100, 110):
        chief._kill_the_silent(float(second))
        if pings_read(theirs):
            theirs.send_bytes(ANSWER)
    assert killed == []


@pytest.mark.parametrize("why", ["stopping", "timeout 0"])
def test_no_worker_is_pinged_while_the_server_stops_or_with_worker_timeout_0(
    pipe: tuple[Connection, Connection], killed: list[tuple[int, int]], why: str
) -> None:
    ours, theirs = pipe
    chief = supervisor_of(ours, timeout=0.0 if why == "timeout 0" else 2.0)
    chief.stops = 1 if why == "stopping" else 0
    theirs.send_bytes(ANSWER)
    for second in range(100, 110):
        chief._kill_the_silent(float(second))
    assert pings_read(theirs) == [] and killed == []


@pytest.mark.parametrize("timeout", [30.0, 1.0, 0.0])
def test_a_start_is_bounded_by_worker_start_timeout_whatever_worker_timeout(
    timeout: float,
) -> None:
    # A short --worker-timeout suits a running loop, not a start that imports the app and may
    # wait out the store's connect timeouts (10 s an address on PostgreSQL) before it exits
    # as a worker that could not reach the store; --worker-timeout 0 leaves starts bounded.
    assert ServerConfig.worker_start_timeout == 60.0
    chief = Supervisor(uvicorn.Config(lambda *_: None), 2, timeout)
    assert chief.start_timeout == 60.0
    assert Supervisor(uvicorn.Config(lambda *_: None), 2, timeout, 0.0).start_timeout == 0.0


def test_with_worker_timeout_0_a_start_is_still_bounded_and_nothing_is_pinged(
    pipe: tuple[Connection, Connection], killed: list[tuple[int, int]]
) -> None:
    ours, theirs = pipe
    chief = supervisor_of(ours, timeout=0.0)
    chief._kill_the_silent(chief.born[0] + chief.start_timeout - 0.1)
    assert killed == []
    chief._kill_the_silent(chief.born[0] + chief.start_timeout + 0.01)
    assert killed == [(11, signal.SIGKILL)] and pings_read(theirs) == []


def test_with_worker_timeout_0_a_started_worker_is_neither_pinged_nor_killed(
    pipe: tuple[Connection, Connection], killed: list[tuple[int, int]]
) -> None:
    ours, theirs = pipe
    chief = supervisor_of(ours, timeout=0.0)
    theirs.send_bytes(ANSWER)  # started
    for second in range(100):
        chief._kill_the_silent(chief.born[0] + chief.start_timeout + second)
    assert killed == [] and pings_read(theirs) == [] and chief.pings[11].ready


def test_a_worker_not_started_within_the_start_timeout_is_killed_once_as_a_failed_start(
    pipe: tuple[Connection, Connection],
    killed: list[tuple[int, int]],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    ours, theirs = pipe
    chief = supervisor_of(ours, timeout=2.0)
    born = chief.born[0]  # an hour ago
    chief._kill_the_silent(born + chief.start_timeout - 0.1)
    assert killed == [] and pings_read(theirs) == []  # still starting: not pinged
    with caplog.at_level(logging.WARNING, logger="agentscript.server"):
        # Just past it: born + timeout, a float sum, may fall a hair short of it.
        chief._kill_the_silent(born + chief.start_timeout + 0.01)
        chief._kill_the_silent(born + chief.start_timeout + 5)  # killed already: not again
        assert killed == [(11, signal.SIGKILL)]
        monkeypatch.setattr(chief, "_start", lambda sockets: FakeWorker(20))
        chief.workers[0].exitcode = -signal.SIGKILL
        chief._replace_the_dead([])
    assert chief.workers[0].pid == 20 and chief.stops == 0
    assert chief.failed_starts == 1  # counted as a start that failed, though it ran an hour
    assert ours.closed and 11 not in chief.pings and not chief.hung
    assert [r.getMessage() for r in caplog.records] == [
        "worker process [11] did not start within 60 s: killed; starting another"
    ]


def test_a_worker_that_became_ready_in_time_is_not_killed_for_its_start(
    pipe: tuple[Connection, Connection], killed: list[tuple[int, int]]
) -> None:
    ours, theirs = pipe
    chief = supervisor_of(ours, timeout=2.0)
    theirs.send_bytes(ANSWER)  # ready, an hour after its start: heard at the first look
    for second in range(10):
        chief._kill_the_silent(chief.born[0] + chief.start_timeout + second)
        if pings_read(theirs):
            theirs.send_bytes(ANSWER)
    assert killed == []


def test_a_worker_may_take_its_time_to_start_with_worker_start_timeout_0(
    pipe: tuple[Connection, Connection], killed: list[tuple[int, int]]
) -> None:
    ours, _theirs = pipe
    chief = supervisor_of(ours, timeout=2.0)
    chief.start_timeout = 0.0
    chief._kill_the_silent(chief.born[0] + 7 * 24 * 3600)
    assert killed == []


def test_starts_that_hang_each_time_stop_the_server_as_a_failed_start(
    killed: list[tuple[int, int]],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Each new worker hangs in its start, so is killed and replaced, FAILED_STARTS times in a
    # row: the server stops with exit 1 rather than start hanging workers forever.
    context = multiprocessing.get_context("spawn")
    ends: list[Connection] = []
    pids = itertools.count(11)

    def start(sockets: object) -> FakeWorker:
        ours, theirs = context.Pipe()
        ends.extend((ours, theirs))  # theirs kept open: a worker alive and silent
        worker = FakeWorker(next(pids))
        chief.pings[worker.pid] = Pings(ours)
        return worker

    chief = Supervisor(uvicorn.Config(lambda *_: None), 1, worker_timeout=1.0)
    monkeypatch.setattr(chief, "_start", start)
    chief.workers = [start([])]  # type: ignore[list-item]
    chief.born = [time.monotonic()]
    try:
        with caplog.at_level(logging.WARNING, logger="agentscript.server"):
            for _ in range(supervisor.FAILED_STARTS):
                assert chief.stops == 0
                chief._kill_the_silent(chief.born[0] + chief.start_timeout + 0.01)
                chief.workers[0].exitcode = -signal.SIGKILL
                chief._replace_the_dead([])
    finally:
        for end in ends:
            end.close()
    assert chief.stops == 1 and chief.status == supervisor.FAILED
    assert [sig for _pid, sig in killed] == [signal.SIGKILL] * supervisor.FAILED_STARTS
    assert caplog.records[-1].getMessage() == (
        f"worker process [{10 + supervisor.FAILED_STARTS}] did not start within 60 s, the "
        f"{supervisor.FAILED_STARTS}th worker in a row that failed its start: the server stops"
    )


@dataclass
class StuckWorker(FakeWorker):
    """A worker that ends only when killed: ``join`` returns at its timeout."""

    joins: list[float | None] | None = None

    def join(self, timeout: float | None = None) -> None:
        assert self.joins is not None
        self.joins.append(timeout)


def test_a_worker_that_does_not_stop_within_the_grace_and_margin_is_killed(
    killed: list[tuple[int, int]], caplog: pytest.LogCaptureFixture
) -> None:
    # A worker stuck in its start notes SIGTERM and goes on: the stop must not wait for good.
    joins: list[float | None] = []
    chief = Supervisor(uvicorn.Config(lambda *_: None, timeout_graceful_shutdown=2), 2)
    stopped = FakeWorker(7, exitcode=0)
    stuck = StuckWorker(8, joins=joins)
    chief.workers = [stopped, stuck]  # type: ignore[list-item]
    with caplog.at_level(logging.WARNING, logger="agentscript.server"):
        chief._join_all()
    bound = 2 + supervisor.STOP_MARGIN
    assert joins[0] is not None and 0 < joins[0] <= bound  # waited up to the bound
    assert killed == [(8, signal.SIGKILL)]  # the stopped one is left alone
    assert joins[-1] is None  # then reaped
    assert caplog.records[-1].getMessage() == (
        f"worker process [8] did not stop within {bound:g} s of the stop: killed"
    )


def test_without_a_grace_the_stop_waits_for_every_worker(killed: list[tuple[int, int]]) -> None:
    joins: list[float | None] = []
    chief = Supervisor(uvicorn.Config(lambda *_: None, timeout_graceful_shutdown=None), 1)
    chief.workers = [StuckWorker(9, exitcode=0, joins=joins)]  # type: ignore[list-item]
    chief._join_all()
    assert joins == [None] and killed == []
