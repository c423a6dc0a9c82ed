"""With ``--workers N``, a worker started again after a crash loads the agent files anew; if
they changed on disk since the server started (new files copied before a planned restart, one
half written) or no longer load, it refuses to serve another version beside the others' and
exits with :data:`FILES_CHANGED`. The supervisor then keeps serving with the workers it has and
starts another later, after a pause doubling up to STORE_RETRY_MAX, however often: it used to
take the refusal for a failed start and stop the healthy workers too (docs/serve.md, "Several
workers")."""

from __future__ import annotations

import itertools
import json
import logging
import multiprocessing
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import asdict
from multiprocessing.connection import Connection
from pathlib import Path

import httpx2 as httpx
import pytest
import uvicorn

from agentscript.server import command, logs, orphan, supervisor
from agentscript.server.command import ENV, ServeOptions, worker_app
from agentscript.server.pings import ANSWER, Pings
from agentscript.server.supervisor import (
    FAILED_STARTS,
    FILES_CHANGED,
    STARTUP_FAILURE,
    STORE_RETRY_MAX,
    Supervisor,
)

from .harness import NOTES
from .process import ServerProcess
from .test_supervisor import FakeWorker
from .test_worker_restart import wait_until_each_answers, workers_of

REFUSED = (
    "could not start: the files it loads changed on disk since the server started, or no "
    "longer load (its line above says which)"
)


def worker_refuses_to_start(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, options: str
) -> str:
    """What a worker started with ``options`` (the server's, as its environment passes them)
    logged as it exited with FILES_CHANGED, which it must."""
    monkeypatch.setitem(os.environ, ENV, options)
    with (
        caplog.at_level(logging.ERROR, logger="agentscript.server"),
        pytest.raises(SystemExit) as exited,
    ):
        worker_app()
    assert exited.value.code == FILES_CHANGED
    return caplog.text


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    signals: list[tuple[int, int]] = []
    monkeypatch.setattr(supervisor.os, "kill", lambda pid, sig: signals.append((pid, sig)))
    return signals


@pytest.fixture
def ends() -> Iterator[list[Connection]]:
    """The ends of the fake workers' pipes, closed after the test."""
    found: list[Connection] = []
    yield found
    for end in found:
        end.close()


def _chief(
    monkeypatch: pytest.MonkeyPatch,
    ends: list[Connection],
    places: int,
    starting: tuple[int, ...] = (),
) -> tuple[Supervisor, list[FakeWorker]]:
    """A supervisor of ``places`` workers, serving but those in places ``starting``; each one
    it starts refuses the files."""
    chief = Supervisor(uvicorn.Config(lambda *_: None, timeout_graceful_shutdown=25), places)
    chief.workers = [FakeWorker(11 + i) for i in range(places)]  # type: ignore[misc]
    chief.born = [time.monotonic() - 3600] * places
    for place, worker in enumerate(chief.workers):
        ours, theirs = multiprocessing.Pipe()
        ends.extend((ours, theirs))
        if place not in starting:
            theirs.send_bytes(ANSWER)  # what a worker says once its server has started
        assert worker.pid is not None
        chief.pings[worker.pid] = Pings(ours)
    pids = itertools.count(100)
    started: list[FakeWorker] = []

    def start(sockets: object) -> FakeWorker:
        started.append(FakeWorker(next(pids), exitcode=FILES_CHANGED))
        return started[-1]

    monkeypatch.setattr(chief, "_start", start)
    return chief, started


def _pause(chief: Supervisor, place: int) -> int:
    """The pause before place ``place`` gets another worker; then over, at once."""
    pause = round(chief.due[place] - time.monotonic())
    chief.due[place] = time.monotonic()
    return pause


def test_a_worker_refusing_changed_files_is_started_again_later_while_the_other_serves(
    sent: list[tuple[int, int]],
    monkeypatch: pytest.MonkeyPatch,
    ends: list[Connection],
    caplog: pytest.LogCaptureFixture,
) -> None:
    chief, started = _chief(monkeypatch, ends, 2)
    chief.workers[0].exitcode = -signal.SIGKILL  # an out-of-memory kill; the files changed
    with caplog.at_level(logging.WARNING, logger="agentscript.server"):
        chief._replace_the_dead([])  # died: another at once, which finds the files changed
        pauses = []
        for round_ in range(FAILED_STARTS + 3):
            chief._replace_the_dead([])
            chief._replace_the_dead([])
            assert len(started) == round_ + 1  # none at once: it waits for its pause
            pauses.append(_pause(chief, 0))
            chief._replace_the_dead([])
    assert chief.stops == 0 and chief.status == 0 and chief.failed_starts == 0
    assert sent == []  # the other worker serves on
    assert pauses == [1, 2, 4, 8, 16, 30, 30, 30][: FAILED_STARTS + 3]
    assert max(pauses) == STORE_RETRY_MAX
    refusals = [r for r in caplog.records if "could not start" in r.getMessage()]
    assert {r.levelno for r in refusals} == {logging.WARNING}
    assert refusals[0].getMessage() == (
        f"worker process [100] {REFUSED}; the other 1 worker serves the version the server "
        "started with, and a restart serves the new files; starting another in 1 s"
    )


def test_with_no_worker_left_serving_each_refusal_is_an_error_and_the_starts_go_on(
    sent: list[tuple[int, int]],
    monkeypatch: pytest.MonkeyPatch,
    ends: list[Connection],
    caplog: pytest.LogCaptureFixture,
) -> None:
    chief, started = _chief(monkeypatch, ends, 3)
    with caplog.at_level(logging.WARNING, logger="agentscript.server"):
        for place in range(3):
            chief.workers[place].exitcode = -signal.SIGKILL
            chief._replace_the_dead([])
            chief._replace_the_dead([])  # its replacement refuses the files
            assert place in chief.due
        for _ in range(FAILED_STARTS + 1):
            for place in range(3):
                _pause(chief, place)
            chief._replace_the_dead([])  # another in each place, refusing too
            chief._replace_the_dead([])
    assert chief.stops == 0 and chief.status == 0 and sent == []
    assert len(started) == 3 * (FAILED_STARTS + 2)
    refusals = [r for r in caplog.records if "could not start" in r.getMessage()]
    messages = [r.getMessage() for r in refusals]
    assert "the other 2 workers serve the version" in messages[0]
    assert "the other 1 worker serves the version" in messages[1]
    # The third place's refusal leaves no worker serving: said as an error, each time.
    assert [r.levelno for r in refusals[2:]] == [logging.ERROR] * (len(refusals) - 2)
    assert messages[2] == (
        f"worker process [102] {REFUSED}; no worker serves, so the server answers nothing "
        "until the files are put back as they were, or it is restarted to serve them as they "
        "are; starting another in 1 s"
    )


def test_a_worker_still_starting_does_not_count_as_one_serving(
    sent: list[tuple[int, int]],
    monkeypatch: pytest.MonkeyPatch,
    ends: list[Connection],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Both workers died at once: the one still starting loads the same changed files, so the
    first refusal already leaves no worker serving."""
    chief, _started = _chief(monkeypatch, ends, 2, starting=(1,))
    chief.workers[0].exitcode = -signal.SIGKILL
    with caplog.at_level(logging.WARNING, logger="agentscript.server"):
        chief._replace_the_dead([])
        chief._replace_the_dead([])
    (refusal,) = [r for r in caplog.records if "could not start" in r.getMessage()]
    assert refusal.levelno == logging.ERROR and "no worker serves" in refusal.getMessage()
    assert chief.stops == 0 and sent == []


def test_a_worker_that_could_not_start_for_another_reason_still_stops_the_server(
    sent: list[tuple[int, int]], monkeypatch: pytest.MonkeyPatch, ends: list[Connection]
) -> None:
    chief, _started = _chief(monkeypatch, ends, 2)
    chief.workers[0].exitcode = STARTUP_FAILURE
    chief._replace_the_dead([])
    assert chief.stops == 1 and chief.status == supervisor.FAILED
    assert (12, signal.SIGTERM) in sent


def _worker_options(tmp_path: Path, agent: str, sources: dict[str, str]) -> str:
    options = ServeOptions(
        paths=[agent],
        model="standin",
        store=f"sqlite:///{tmp_path / 's.db'}",
        workers=2,
        sources=sources,
    )
    return json.dumps(asdict(options))


@pytest.fixture
def quiet_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """worker_app without its process-wide logging set-up and its watch of the supervisor."""
    monkeypatch.setattr(logs, "configure", lambda **_: None)
    monkeypatch.setattr(orphan, "stop_when_orphaned", lambda parent: None)


@pytest.mark.parametrize("how", ["edited", "half written"])
def test_a_worker_refusing_the_files_exits_as_such(
    how: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    quiet_worker: None,
) -> None:
    from agentscript.loader import load
    from agentscript.server.agents import source_digest

    agent = tmp_path / "notes.agent"
    shutil.copy(NOTES, agent)
    options = _worker_options(tmp_path, str(agent), {"Notes": source_digest(load(agent))})
    text = agent.read_text()
    if how == "edited":
        agent.write_text(text + "\n# edited while serving\n")
        said = "a worker could not start: Notes changed on disk since the server started"
    else:
        agent.write_text(text[: len(text) // 3])
        said = "cannot serve an agent with errors"
    assert said in worker_refuses_to_start(monkeypatch, caplog, options)


def test_a_worker_failing_its_start_otherwise_exits_as_a_failed_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, quiet_worker: None
) -> None:
    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("a bug")

    monkeypatch.setattr(command, "build_app", broken)
    monkeypatch.setitem(os.environ, ENV, _worker_options(tmp_path, NOTES, {}))
    with pytest.raises(SystemExit) as exited:
        worker_app()
    assert exited.value.code == STARTUP_FAILURE


def test_a_server_whose_agent_changed_serves_on_when_a_worker_dies(tmp_path: Path) -> None:
    """A real server of two workers: the agent file edited, one worker killed. The other
    serves on, the place is started again later, and the log says why in one line."""
    folder = tmp_path / "notes"
    shutil.copytree(Path(NOTES).parent, folder)
    agent = folder / Path(NOTES).name
    log = tmp_path / "server.log"
    args = [str(agent), "--model", "standin", "--store", f"sqlite:///{tmp_path / 's.db'}"]
    server = ServerProcess([*args, "--workers", "2"], {}, log)
    try:
        server.wait_ready()
        created = httpx.post(f"{server.url}/v1/agents/Notes/sessions", json={})
        assert created.status_code == 201
        session = created.json()["session_id"]
        workers = workers_of(server.proc.pid)
        assert len(workers) == 2
        wait_until_each_answers(server.port, workers)  # else one may load the edited file
        agent.write_text(agent.read_text() + "\n# edited while serving\n")
        subprocess.run(["kill", f"-{signal.SIGKILL.value}", str(workers[0])], check=True)
        deadline = time.monotonic() + 20
        while REFUSED not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(1.5)  # past the first pause: a second refusal, the server still up
        assert server.proc.poll() is None
        for _ in range(6):  # each connection may go to either place: all go to the live one
            assert httpx.get(f"{server.url}/healthz", timeout=10).status_code == 200
        said = httpx.post(
            f"{server.url}/v1/sessions/{session}/messages", json={"text": "hi"}, timeout=10
        )
        assert said.status_code == 200, said.text
        assert workers[1] in workers_of(server.proc.pid)
    finally:
        server.stop()
    text = log.read_text()
    assert server.proc.returncode == 0  # stopped by the test, not by the refusal
    assert "a worker could not start: Notes changed on disk since the server started" in text
    assert (
        f"{REFUSED}; the other 1 worker serves the version the server started with, and a "
        "restart serves the new files; starting another in 1 s"
    ) in text
    assert "the server stops" not in text and "Traceback" not in text
