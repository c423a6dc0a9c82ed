"""SIGTERM: a real server stops taking connections, lets the turns already running commit
(a streamed one whose client left included), and cuts those still running after
``--shutdown-grace``, uncommitted, their leases given back."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from pathlib import Path

import httpx2 as httpx
import pytest

from .harness import NOTES, lease_rows
from .process import ServerProcess

NOTE = {"text": '/note {"text": "pay 10"}'}
STREAM = {"Accept": "text/event-stream"}
WORKERS_2 = ("--workers", "2")


class BlockedTurn:
    """A server whose notes action blocks while ``block`` exists, and one turn inside it."""

    def __init__(self, store: str, tmp_path: Path, *extra: str) -> None:
        self.calls, self.block = tmp_path / "calls.jsonl", tmp_path / "block"
        self.env = {"NOTES_LOG": str(self.calls), "NOTES_BLOCK": str(self.block)}
        self.args = [NOTES, "--model", "standin", "--store", store, *extra]
        self.tmp_path = tmp_path
        self.store = store
        self.server = ServerProcess(self.args, self.env, tmp_path / "server.log")
        self.server.wait_ready()
        url = self.server.url
        self.session = httpx.post(f"{url}/v1/agents/Notes/sessions", json={}).json()["session_id"]
        self.messages = f"{url}/v1/sessions/{self.session}/messages"
        self.answer: httpx.Response | None = None

    def send(self) -> None:
        """Send the note in the background and return once the turn is inside the action."""

        def post() -> None:
            with contextlib.suppress(httpx.TransportError):
                self.answer = httpx.post(self.messages, json=NOTE, timeout=60)

        self.block.touch()
        self.sender = threading.Thread(target=post, daemon=True)
        self.sender.start()
        self.wait_for_action()

    def stream_and_leave(self) -> None:
        """Start the note as a stream, then close the connection while the turn runs."""
        self.block.touch()
        with httpx.stream("POST", self.messages, json=NOTE, headers=STREAM, timeout=60) as reply:
            assert reply.status_code == 200
            self.wait_for_action()

    def stream_and_stay(self) -> None:
        """Start the note as a stream read to its end in the background (``self.events``)."""
        self.events: list[str] = []

        def read() -> None:
            with (
                contextlib.suppress(httpx.TransportError),
                httpx.stream("POST", self.messages, json=NOTE, headers=STREAM, timeout=60) as reply,
            ):
                for line in reply.iter_lines():
                    self.events.append(line)

        self.block.touch()
        self.sender = threading.Thread(target=read, daemon=True)
        self.sender.start()
        self.wait_for_action()

    def wait_for_action(self) -> None:
        deadline = time.monotonic() + 30
        while not self.calls.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert self.calls.exists(), "the turn never reached the action"

    def terminate(self, *, group: bool = True) -> float:
        """SIGTERM to every process of the server, or (``group=False``) to the first alone,
        as an orchestrator signals a container's main process."""
        if group:
            os.killpg(self.server.proc.pid, signal.SIGTERM)
        else:
            os.kill(self.server.proc.pid, signal.SIGTERM)
        return time.monotonic()

    def exited_within(self, seconds: float) -> bool:
        try:
            self.server.proc.wait(timeout=seconds)
        except Exception:
            return False
        return True

    def check_after_restart(self, turns: int, last_note: str) -> None:
        """A new server on the same store reads the session with ``turns`` turns and
        ``last_note``, and no lease row is left."""
        again = ServerProcess(self.args, self.env, self.tmp_path / "server2.log")
        try:
            again.wait_ready()
            view = httpx.get(f"{again.url}/v1/sessions/{self.session}").json()
        finally:
            again.stop()
        assert view["turns"] == turns and view["variables"]["last_note"] == last_note
        assert lease_rows(self.store) == 0

    def close(self) -> None:
        self.block.unlink(missing_ok=True)
        self.server.kill()


def _refused(url: str) -> bool:
    try:
        httpx.get(f"{url}/healthz", timeout=2)
    except httpx.TransportError:
        return True
    return False


def _refused_at_once(url: str) -> bool:
    """The connection is refused: not accepted into a queue nobody serves (a timeout)."""
    try:
        httpx.get(f"{url}/healthz", timeout=2)
    except httpx.ConnectError:
        return True
    except httpx.TransportError:
        return False
    return False


@pytest.mark.parametrize("workers", [1, 2])
def test_sigterm_lets_the_turn_in_flight_finish_and_commit(
    api_store: str, tmp_path: Path, workers: int
) -> None:
    turn = BlockedTurn(api_store, tmp_path, "--workers", str(workers))
    try:
        turn.send()
        turn.terminate(group=False)  # to the server's pid, as an orchestrator does
        # No new connection while it drains: refused, not queued unanswered (the supervisor of
        # two workers held the listening socket open until they had all stopped). Waited for:
        # the signal takes a moment to be handled (the supervisor looks every 0.2 s).
        deadline = time.monotonic() + 10
        while not _refused_at_once(turn.server.url):
            assert time.monotonic() < deadline, "new connections are still taken while draining"
            time.sleep(0.1)
        assert turn.server.proc.poll() is None  # still waiting for the turn
        turn.block.unlink()
        turn.sender.join(timeout=30)
        assert turn.answer is not None and turn.answer.status_code == 200
        assert turn.answer.json()["turn"] == 1
        assert turn.exited_within(15)
    finally:
        turn.close()
    turn.check_after_restart(1, "pay 10")


# How a terminal signals a server: every process of its group (a supervisor's workers too),
# or a signal sent to the server's pid alone (kill PID, an orchestrator).
TERMINAL = {"one worker, its pid": ((), False), "two workers, the terminal": (WORKERS_2, True)}


def signal_server(turn: BlockedTurn, sig: signal.Signals, *, group: bool) -> None:
    if group:
        os.killpg(turn.server.proc.pid, sig)
    else:
        os.kill(turn.server.proc.pid, sig)


@pytest.mark.parametrize("where", TERMINAL)
def test_sighup_stops_the_server_as_sigterm_does(
    api_store: str, tmp_path: Path, where: str
) -> None:
    extra, group = TERMINAL[where]
    turn = BlockedTurn(api_store, tmp_path, *extra)
    try:
        turn.send()
        signal_server(turn, signal.SIGHUP, group=group)  # a closed terminal: a stop, no reload
        time.sleep(0.5)
        assert turn.server.proc.poll() is None  # draining, not ended at once
        turn.block.unlink()
        turn.sender.join(timeout=30)
        assert turn.answer is not None and turn.answer.status_code == 200
        assert turn.exited_within(15)
        assert turn.server.proc.returncode == 0
    finally:
        turn.close()
    turn.check_after_restart(1, "pay 10")


def test_sigterm_lets_a_streamed_turn_whose_client_left_commit(
    api_store: str, tmp_path: Path
) -> None:
    turn = BlockedTurn(api_store, tmp_path)
    try:
        turn.stream_and_leave()
        time.sleep(0.2)
        turn.terminate()
        time.sleep(0.5)
        assert turn.server.proc.poll() is None  # the turn has no client but is still waited for
        turn.block.unlink()
        assert turn.exited_within(15)
    finally:
        turn.close()
    turn.check_after_restart(1, "pay 10")


@pytest.mark.parametrize("how", ["request", "stream whose client left"])
def test_sigterm_cuts_a_turn_past_the_shutdown_grace_uncommitted(
    api_store: str, tmp_path: Path, how: str
) -> None:
    turn = BlockedTurn(api_store, tmp_path, "--shutdown-grace", "1")
    try:
        if how == "request":
            turn.send()
        else:
            turn.stream_and_leave()
        sent = turn.terminate()
        # The action still blocks: the process ends because the grace is over, not the turn.
        assert turn.exited_within(15)
        assert time.monotonic() - sent < 10
        assert turn.block.exists()
        log = (tmp_path / "server.log").read_text()
        assert "1 turn(s) cut after the grace, none committed" in log
        assert "Traceback" not in log and "Exception in ASGI application" not in log
        if how != "request":  # its request ended when its client left: none to cut
            assert "running task(s)" not in log
        if how == "request":  # its client is told to send it again, not a plain-text 500
            turn.sender.join(10)
            assert turn.answer is not None and turn.answer.status_code == 503
            assert turn.answer.json()["error"]["code"] == "shutting_down"
            assert turn.answer.headers["retry-after"] == "1"
    finally:
        turn.close()
    turn.check_after_restart(0, "")  # the cut turn gave its lease back
    calls = [json.loads(line) for line in turn.calls.read_text().splitlines()]
    assert len(calls) == 1  # it ran once and was not retried by anyone


def test_sigterm_ends_a_streamed_turn_cut_past_the_grace_with_an_error_event_within_the_grace(
    api_store: str, tmp_path: Path
) -> None:
    turn = BlockedTurn(api_store, tmp_path, "--shutdown-grace", "4")
    try:
        turn.stream_and_stay()
        sent = turn.terminate()
        assert turn.exited_within(15)
        # One grace in all: uvicorn's wait for the connection, then what is left of it for the
        # turn (it used to get a whole grace again: 8 s and more, past an orchestrator's wait).
        assert time.monotonic() - sent < 7.5
        turn.sender.join(10)
        log = (tmp_path / "server.log").read_text()
        assert "Traceback" not in log and "Exception in ASGI application" not in log
    finally:
        turn.close()
    assert "event: error" in turn.events
    error = json.loads(turn.events[turn.events.index("event: error") + 1].removeprefix("data: "))
    assert (error["status"], error["code"]) == (503, "shutting_down")
    assert "event: turn" not in turn.events
    turn.check_after_restart(0, "")


def test_sigterm_to_the_supervisor_of_two_workers_gives_each_the_grace(
    api_store: str, tmp_path: Path
) -> None:
    turn = BlockedTurn(api_store, tmp_path, "--workers", "2", "--shutdown-grace", "1")
    try:
        turn.send()
        sent = turn.terminate(group=False)
        assert turn.exited_within(20)
        assert time.monotonic() - sent < 15
        assert turn.block.exists()  # cut by the grace, not ended by the action
        assert (
            "1 turn(s) cut after the grace, none committed" in (tmp_path / "server.log").read_text()
        )
    finally:
        turn.close()
    turn.check_after_restart(0, "")


@pytest.mark.parametrize("where", TERMINAL)
@pytest.mark.parametrize("how", ["request", "stream whose client left"])
def test_a_second_ctrl_c_stops_at_once_cutting_the_turn_uncommitted_without_a_traceback(
    api_store: str, tmp_path: Path, how: str, where: str
) -> None:
    extra, group = TERMINAL[where]
    turn = BlockedTurn(api_store, tmp_path, *extra)  # the default grace: 25 s
    try:
        if how == "request":
            turn.send()
        else:
            turn.stream_and_leave()
        signal_server(turn, signal.SIGINT, group=group)
        time.sleep(0.5)
        assert turn.server.proc.poll() is None  # the first one waits for the turn
        sent = time.monotonic()
        signal_server(turn, signal.SIGINT, group=group)
        assert turn.exited_within(10)
        assert time.monotonic() - sent < 8  # not the grace
        assert turn.server.proc.returncode == 130
        assert turn.block.exists()  # the action never ended: the turn was cut
        log = (tmp_path / "server.log").read_text()
        assert "Traceback" not in log and "KeyboardInterrupt" not in log
        if how == "request":  # told to send it again, as after the grace
            assert "stopped at once: 1 request(s) cut" in log
            turn.sender.join(10)
            assert turn.answer is not None and turn.answer.status_code == 503
            assert turn.answer.json()["error"]["code"] == "shutting_down"
        else:
            assert "1 turn(s) cut by a stop at once, none committed" in log
    finally:
        turn.close()
    turn.check_after_restart(0, "")  # nothing committed, the lease given back


def test_a_third_ctrl_c_ends_a_shutdown_that_hangs_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import uvicorn

    from agentscript.server import runner

    ended: list[int] = []
    monkeypatch.setattr(runner.os, "_exit", ended.append)
    server = runner.SignalledServer(uvicorn.Config(lambda *_: None))
    server.handle_exit(signal.SIGINT, None)
    assert (server.should_exit, server.force_exit, ended) == (True, False, [])
    server.handle_exit(signal.SIGINT, None)
    assert server.force_exit and ended == []
    assert runner.ShutdownClock.left(25) == 0  # nothing left of the grace for the app's turns
    server.handle_exit(signal.SIGINT, None)
    assert ended == [130]
    runner.ShutdownClock.reset()


def test_sighup_counts_as_sigterm_and_never_stops_at_once() -> None:
    import uvicorn

    from agentscript.server import runner

    server = runner.SignalledServer(uvicorn.Config(lambda *_: None))
    for _ in range(3):
        server.handle_exit(signal.SIGHUP, None)
    assert server.should_exit and not server.force_exit


def _gone(pid: int) -> bool:
    """The process ended (a zombie nobody reaped counts: it serves nothing)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return True
    return state in ("Z", "X")


def test_workers_whose_supervisor_was_killed_outright_stop_letting_their_turn_commit(
    api_store: str, tmp_path: Path
) -> None:
    from .test_worker_restart import workers_of

    turn = BlockedTurn(api_store, tmp_path, "--workers", "2")
    workers: list[int] = []
    try:
        workers = workers_of(turn.server.proc.pid)
        assert len(workers) == 2
        turn.send()
        os.kill(turn.server.proc.pid, signal.SIGKILL)  # the supervisor alone
        turn.server.proc.wait(timeout=10)
        deadline = time.monotonic() + 20  # each worker looks every second
        while not _refused(turn.server.url) and time.monotonic() < deadline:
            time.sleep(0.2)
        alive = [pid for pid in workers if not _gone(pid)]
        log = (tmp_path / "server.log").read_text()
        assert _refused(turn.server.url), (alive, log)  # nobody takes new connections
        while sum(not _gone(pid) for pid in workers) > 1 and time.monotonic() < deadline:
            time.sleep(0.2)
        serving = [pid for pid in workers if not _gone(pid)]
        assert len(serving) == 1  # the idle worker stopped; the busy one drains
        server_log = tmp_path / "server.log"
        while "is gone" not in server_log.read_text() and time.monotonic() < deadline:
            time.sleep(0.2)  # the draining worker's watcher says why it stops
        turn.block.unlink()
        turn.sender.join(timeout=30)
        assert turn.answer is not None and turn.answer.status_code == 200
        deadline = time.monotonic() + 15
        while not _gone(serving[0]) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _gone(serving[0])
        log = (tmp_path / "server.log").read_text()
        assert "supervisor (pid" in log and "is gone" in log
        assert "Traceback" not in log
    finally:
        for pid in workers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        turn.close()
    turn.check_after_restart(1, "pay 10")
