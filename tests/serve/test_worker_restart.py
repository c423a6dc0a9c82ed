"""With ``--workers N``, a worker started again after a crash loads the agent files anew and
serves again; files beside the agents that are no sources of it do not count as changed ones
(test_supervisor_agents_changed.py: a worker that finds the agent files changed is started
again later while the others serve). A stuck worker is killed and replaced; the workers leave
the terminal's signals to the supervisor (docs/serve.md, "Several workers")."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx2 as httpx

from .harness import NOTES
from .process import ServerProcess


def workers_of(supervisor: int) -> list[int]:
    """The worker processes the supervisor started (multiprocessing's spawned children)."""
    found = subprocess.run(
        ["ps", "-ww", "-o", "pid=,args=", "--ppid", str(supervisor)],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    return [int(line.split()[0]) for line in found.splitlines() if "spawn_main" in line]


def test_a_worker_restarted_on_unchanged_files_serves_again(tmp_path: Path) -> None:
    args = [NOTES, "--model", "standin", "--store", f"sqlite:///{tmp_path / 's.db'}"]
    server = ServerProcess([*args, "--workers", "2"], {}, tmp_path / "server.log")
    try:
        server.wait_ready()
        workers = workers_of(server.proc.pid)
        subprocess.run(["kill", f"-{signal.SIGKILL.value}", str(workers[0])], check=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            again = workers_of(server.proc.pid)
            if len(again) == 2 and workers[0] not in again:
                break
            time.sleep(0.1)
        assert len(again) == 2 and workers[0] not in again
        assert server.proc.poll() is None
        for _ in range(6):  # both workers answer (each connection may go to either)
            response = httpx.post(f"{server.url}/v1/agents/Notes/sessions", json={})
            assert response.status_code == 201
    finally:
        server.stop()
    log = (tmp_path / "server.log").read_text()
    assert "Traceback" not in log
    # the operator sees the worker die, and nothing else of uvicorn's INFO chatter
    assert f"worker process [{workers[0]}] died (killed by SIGKILL); starting another" in log
    assert "Started server process" not in log and "Application startup" not in log


def test_a_store_and_data_inside_a_served_project_folder_do_not_count_as_changed_files(
    tmp_path: Path,
) -> None:
    project = tmp_path / "card_bank"
    shutil.copytree(Path(__file__).parents[2] / "examples" / "card_bank", project)
    store = f"sqlite:///{project / 'sessions.db'}"  # its -wal and -shm files appear beside it
    args = [str(project), "--model", "standin", "--store", store, "--workers", "2"]
    server = ServerProcess(args, {}, tmp_path / "server.log")
    try:
        server.wait_ready()
        (project / "calls.log").write_text("written by a tool while serving\n")
        workers = workers_of(server.proc.pid)
        subprocess.run(["kill", f"-{signal.SIGKILL.value}", str(workers[0])], check=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and workers[0] in workers_of(server.proc.pid):
            time.sleep(0.1)
        time.sleep(1.0)
        assert server.proc.poll() is None  # the new worker started and serves
        assert len(workers_of(server.proc.pid)) == 2
    finally:
        server.stop()
    assert "could not start" not in (tmp_path / "server.log").read_text()


def _signal_masks(pid: int) -> dict[str, int]:
    """The ignored (SigIgn), caught (SigCgt) and blocked (SigBlk) signals of ``pid``."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("SigIgn", "SigCgt", "SigBlk"):
            fields[name] = int(value.strip(), 16)
    return fields


def test_workers_catch_the_terminals_signals_without_ignoring_them_for_their_children(
    tmp_path: Path,
) -> None:
    args = [NOTES, "--model", "standin", "--store", f"sqlite:///{tmp_path / 's.db'}"]
    server = ServerProcess([*args, "--workers", "2"], {}, tmp_path / "server.log")
    try:
        server.wait_ready()
        for worker in workers_of(server.proc.pid):
            masks = _signal_masks(worker)
            for sig in (signal.SIGINT, signal.SIGHUP):
                bit = 1 << (sig - 1)
                # Caught by a handler that leaves them to the supervisor: a process the worker
                # starts (an action's subprocess) gets the default back at exec, which an
                # ignored signal would not.
                assert masks["SigCgt"] & bit and not masks["SigIgn"] & bit, (worker, masks)
                assert not masks["SigBlk"] & bit  # held only while the worker started
    finally:
        server.stop()


def _wait_for(line: str, log: Path, seconds: float = 20.0) -> str:
    deadline = time.monotonic() + seconds
    while line not in log.read_text() and time.monotonic() < deadline:
        time.sleep(0.1)
    return log.read_text()


def _server_end(client_port: int) -> str:
    """The socket inode of the server's end of the loopback connection from ``client_port``."""
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        # An earlier connection's end left in TIME_WAIT has no socket (inode 0).
        if int(fields[2].split(":")[1], 16) == client_port and fields[9] != "0":
            return fields[9]
    raise AssertionError(f"no server end for the connection from port {client_port}")


def _a_worker_that_answered(port: int, workers: list[int]) -> int:
    """A worker that has answered a request, so whose server has started (a worker still
    starting is not pinged): the one holding the server's end of a connection answered."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert conn.recv(1024).startswith(b"HTTP/1.1 200")
        held = f"socket:[{_server_end(conn.getsockname()[1])}]"
        for pid in workers:
            with contextlib.suppress(OSError):  # an fd closed while listed
                if held in {os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir()}:
                    return pid
    raise AssertionError(f"none of the workers {workers} holds the connection")


def wait_until_each_answers(port: int, workers: list[int], seconds: float = 20.0) -> None:
    """Until each worker has answered a request: the server is ready once one has, and a
    worker still starting when its files are edited refuses them as a new one would."""
    answered: set[int] = set()
    deadline = time.monotonic() + seconds
    while answered != set(workers) and time.monotonic() < deadline:
        # A connection whose end was not found (closed as it was listed) is asked again.
        with contextlib.suppress(AssertionError):
            answered.add(_a_worker_that_answered(port, workers))
    assert answered == set(workers), answered


def test_a_worker_whose_event_loop_is_stuck_is_killed_and_replaced(tmp_path: Path) -> None:
    # SIGSTOP stands for a deadlock or an action that never gives the loop back: the process
    # lives on and keeps its share of the connections, answering none.
    args = [NOTES, "--model", "standin", "--store", f"sqlite:///{tmp_path / 's.db'}"]
    log = tmp_path / "server.log"
    server = ServerProcess([*args, "--workers", "2", "--worker-timeout", "1"], {}, log)
    try:
        server.wait_ready()
        workers = workers_of(server.proc.pid)
        stuck = _a_worker_that_answered(server.port, workers)
        (other,) = set(workers) - {stuck}
        os.kill(stuck, signal.SIGSTOP)
        text = _wait_for(f"worker process [{stuck}] did not answer for 1 s: killed", log)
        assert f"worker process [{stuck}] did not answer for 1 s: killed; starting another" in text
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            again = workers_of(server.proc.pid)
            if len(again) == 2 and stuck not in again:
                break
            time.sleep(0.1)
        assert stuck not in again and other in again and len(again) == 2
        server.wait_ready()
        for _ in range(6):  # each connection may go to either worker: none goes unanswered
            assert httpx.get(f"{server.url}/healthz", timeout=10).status_code == 200
    finally:
        server.stop()
    text = log.read_text()
    assert f"worker process [{stuck}] died" not in text  # one line for it, said above
    assert "Traceback" not in text
