"""A store that cannot be reached when the app starts, after ``serve`` checked it: with
``--workers N`` a worker started again while the database is down (a crash during a failover)
exits as one that could not reach its store, and its supervisor starts another after a pause
rather than stop the whole server for good; with one worker, the database lost between the
check and the app's start is one line and status 2, as the check's failure is. Neither is a
traceback (docs/serve.md)."""

from __future__ import annotations

import itertools
import logging
import multiprocessing
import re
import signal
import subprocess
import time
from pathlib import Path

import httpx2 as httpx
import pytest
import uvicorn
from fastapi import FastAPI

from agentscript.server import supervisor
from agentscript.server.app import create_app
from agentscript.server.command import StoreAtStart
from agentscript.server.pings import ANSWER, Pings
from agentscript.server.supervisor import (
    FAILED_STARTS,
    STORE_RETRY_MAX,
    STORE_UNAVAILABLE,
    Supervisor,
    WorkerServer,
)
from agentscript.store import MemoryStore, StoreError
from agentscript.store.base import StoreUnreachable

from .conftest import pg_reset
from .harness import NOTES
from .pg_relay import relay_thread
from .process import ServerProcess
from .test_supervisor import FakeWorker
from .test_worker_restart import workers_of


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    signals: list[tuple[int, int]] = []
    monkeypatch.setattr(supervisor.os, "kill", lambda pid, sig: signals.append((pid, sig)))
    return signals


def test_a_worker_that_could_not_reach_the_store_is_started_again_later_however_often(
    sent: list[tuple[int, int]], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """More such exits in a row than the failed starts that stop the server: each is started
    again after a pause doubling up to STORE_RETRY_MAX, the other worker is left alone, and a
    worker that then serves starts the pauses over."""
    chief = Supervisor(uvicorn.Config(lambda *_: None, timeout_graceful_shutdown=25), 2)
    chief.workers = [FakeWorker(11, exitcode=STORE_UNAVAILABLE), FakeWorker(12)]  # type: ignore[list-item]
    chief.born = [time.monotonic()] * 2
    pids = itertools.count(100)
    started: list[FakeWorker] = []

    def start(sockets: object) -> FakeWorker:
        started.append(FakeWorker(next(pids), exitcode=STORE_UNAVAILABLE))
        return started[-1]

    monkeypatch.setattr(chief, "_start", start)
    pauses = []
    with caplog.at_level(logging.WARNING, logger="agentscript.server"):
        for round_ in range(FAILED_STARTS + 3):
            chief._replace_the_dead([])
            chief._replace_the_dead([])
            assert len(started) == round_  # none at once: it waits for its pause
            pauses.append(round(chief.due[0] - time.monotonic()))
            chief.due[0] = time.monotonic()  # its pause is over
            chief._replace_the_dead([])
            assert len(started) == round_ + 1
    assert chief.stops == 0 and chief.status == 0 and chief.failed_starts == 0
    assert sent == []  # the other worker served on
    assert pauses == [1, 2, 4, 8, 16, 30, 30, 30][: FAILED_STARTS + 3]
    assert max(pauses) == STORE_RETRY_MAX
    lines = [r.getMessage() for r in caplog.records]
    assert lines[:2] == [
        "worker process [11] could not reach the store; starting another in 1 s",
        "worker process [100] could not reach the store; starting another in 2 s",
    ]
    # It started (it said so on its pipe), served an hour and was killed: the next that cannot
    # reach the store waits the first pause again.
    ours, theirs = multiprocessing.Pipe()
    theirs.send_bytes(ANSWER)
    theirs.close()
    chief.pings[started[-1].pid] = Pings(ours)
    chief.workers[0].exitcode = -signal.SIGKILL
    chief.born[0] = time.monotonic() - 3600
    chief._replace_the_dead([])
    started[-1].exitcode = STORE_UNAVAILABLE
    chief._replace_the_dead([])
    assert round(chief.due[0] - time.monotonic()) == 1


class Unopenable(MemoryStore):
    """A store whose opening fails as ``failure``."""

    def __init__(self, failure: Exception) -> None:
        super().__init__()
        self.failure = failure

    async def open(self) -> None:
        raise self.failure


def _failing(failure: Exception, said: list[str]) -> FastAPI:
    return create_app({}, Unopenable(failure), on_store_failure=StoreAtStart(said.append))


@pytest.mark.parametrize(
    ("failure", "status"),
    [
        (StoreUnreachable("cannot connect to postgresql://db/x: refused"), STORE_UNAVAILABLE),
        (StoreError("the store was migrated by a newer agentscript"), 3),
    ],
)
def test_a_workers_start_up_whose_store_fails_is_one_line_and_its_exit_says_which(
    failure: Exception, status: int, caplog: pytest.LogCaptureFixture
) -> None:
    """A store that cannot be reached exits with STORE_UNAVAILABLE (started again later); any
    other store failure as a worker that could not start (uvicorn's 3: the server stops). The
    app is under uvicorn's own middleware (proxy headers), as a worker's is."""
    said: list[str] = []
    server = WorkerServer(uvicorn.Config(_failing(failure, said), lifespan="on", log_config=None))
    with caplog.at_level(logging.INFO), pytest.raises(SystemExit) as exited:
        server.run()
    assert exited.value.code == status
    assert said == [str(failure)]
    assert "Traceback" not in caplog.text and "Application startup failed" not in caplog.text


def test_a_start_up_failing_otherwise_keeps_its_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Only a store's failure is said in one line: any other is a bug, reported in full."""
    said: list[str] = []
    app = _failing(RuntimeError("a bug"), said)
    server = WorkerServer(uvicorn.Config(app, lifespan="on", log_config=None))
    with caplog.at_level(logging.INFO), pytest.raises(SystemExit) as exited:
        server.run()
    assert exited.value.code == 3 and said == []
    assert "Traceback" in caplog.text and "RuntimeError: a bug" in caplog.text
    assert "Application startup failed" in caplog.text


def _wait_for(pattern: str, log: Path, seconds: float, count: int = 1) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if len(re.findall(pattern, log.read_text())) >= count:
            return True
        time.sleep(0.1)
    return False


def test_workers_restarted_while_postgresql_is_down_wait_for_it_and_serve_again(
    pg_dsn: str, tmp_path: Path
) -> None:
    """The audit's case: a worker killed while the database is unreachable. Its replacements
    cannot open the store, each says so in one line, and the server keeps running (it stopped
    for good with status 1); once the database is back a worker starts and both serve."""
    pg_reset(pg_dsn)
    log = tmp_path / "server.log"
    with relay_thread(pg_dsn) as relay:
        args = [NOTES, "--model", "standin", "--store", relay.relay.dsn, "--workers", "2"]
        server = ServerProcess(args, {}, log)
        try:
            server.wait_ready()
            first = workers_of(server.proc.pid)
            relay.call(relay.relay.stop())  # refused from now on
            subprocess.run(["kill", f"-{signal.SIGKILL.value}", str(first[0])], check=True)
            refused = r"could not reach the store; starting another in (\d+) s"
            # Two replacements in a row failed, and the server still runs.
            assert _wait_for(refused, log, 60, count=2), log.read_text()
            assert server.proc.poll() is None
            relay.call(relay.relay.start())
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                now = workers_of(server.proc.pid)
                if len(now) == 2 and first[0] not in now:
                    break
                time.sleep(0.2)
            server.wait_ready()
            for _ in range(6):  # each connection may go to either worker: both serve
                created = httpx.post(f"{server.url}/v1/agents/Notes/sessions", json={})
                assert created.status_code == 201, created.text
            assert server.proc.poll() is None
        finally:
            server.stop()
    text = log.read_text()
    assert "a worker could not open the store: cannot connect to postgresql://" in text
    assert "Traceback" not in text and "Application startup failed" not in text
    assert "the server stops" not in text


def test_one_worker_whose_database_is_lost_after_the_check_says_so_in_one_line(
    pg_dsn: str, tmp_path: Path
) -> None:
    """The check before listening opens the store (two connections: the pool's and the
    presence's); the relay then closes every new one, so the app's own start-up cannot."""
    pg_reset(pg_dsn)
    log = tmp_path / "server.log"
    with relay_thread(pg_dsn, accept_only=2) as relay:
        args = [NOTES, "--model", "standin", "--store", relay.relay.dsn]
        server = ServerProcess(args, {}, log)
        try:
            status = server.proc.wait(timeout=60)
        finally:
            server.kill()
    text = log.read_text()
    assert status == 2, text
    assert relay.relay.accepted == 3  # the check's two, then the app's
    lines = [line for line in text.splitlines() if "cannot connect to" in line]
    assert len(lines) == 1 and lines[0].startswith("agentscript serve: cannot connect to"), text
    assert "Traceback" not in text and "Application startup failed" not in text
