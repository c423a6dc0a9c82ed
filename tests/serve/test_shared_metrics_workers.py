"""``agentscript serve --workers 2``: ``/metrics`` reads the whole server's total whichever worker
answers, never less than an earlier scrape read, and keeps a worker killed outright counted
(server/sharedmetrics.py). One worker shares nothing: no directory."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import httpx2 as httpx

from .harness import NOTES
from .process import ServerProcess
from .test_worker_restart import workers_of

TURNS = 'agentscript_turns_total{agent="Notes",outcome="ok"}'


def turns_total(url: str) -> int:
    # A connection of its own each time: either worker may take it.
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        if line.startswith(TURNS):
            return int(line.rsplit(" ", 1)[1])
    return 0


def settles_at(url: str, total: int, seen: list[int]) -> list[int]:
    """Scrape until the total reads ``total`` (a worker's figures reach the others within
    about a second), then six times more; every reading, in order."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        seen.append(turns_total(url))
        if seen[-1] == total:
            break
        time.sleep(0.1)
    return seen + [turns_total(url) for _ in range(6)]


def send_turn(url: str) -> None:
    with httpx.Client(base_url=url, timeout=30) as client:
        made = client.post("/v1/agents/Notes/sessions", json={})
        sid = made.json()["session_id"]
        assert client.post(f"/v1/sessions/{sid}/messages", json={"text": "hi"}).status_code == 200


def test_every_scrape_reads_the_servers_total_and_a_killed_worker_stays_counted(
    tmp_path: Path,
) -> None:
    args = [NOTES, "--model", "standin", "--store", f"sqlite:///{tmp_path / 's.db'}"]
    env = {"TMPDIR": str(tmp_path)}
    server = ServerProcess([*args, "--workers", "2", "--rate-limit", "0"], env, tmp_path / "log")
    try:
        server.wait_ready()
        (shared,) = tmp_path.glob("agentscript-metrics-*")
        assert shared.stat().st_mode & 0o777 == 0o700
        for _ in range(8):
            send_turn(server.url)
        seen = settles_at(server.url, 8, [])
        assert seen[-7:] == [8] * 7
        workers = workers_of(server.proc.pid)
        os.kill(workers[0], signal.SIGKILL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            again = workers_of(server.proc.pid)
            if len(again) == 2 and workers[0] not in again:
                break
            time.sleep(0.1)
        server.wait_ready()
        # The killed worker's turns stay counted (a scrape that read the total found every
        # worker's snapshot up to date), and turns after it add to them.
        assert [turns_total(server.url) for _ in range(6)] == [8] * 6
        send_turn(server.url)
        seen = settles_at(server.url, 9, seen)
        assert seen[-7:] == [9] * 7
        assert seen == sorted(seen)  # never less than an earlier scrape: no counter reset
    finally:
        server.stop()
    assert list(tmp_path.glob("agentscript-metrics-*")) == []  # removed at exit
    assert "Traceback" not in (tmp_path / "log").read_text()


def test_one_worker_shares_nothing(tmp_path: Path) -> None:
    args = [NOTES, "--model", "standin", "--store", f"sqlite:///{tmp_path / 's.db'}"]
    server = ServerProcess(args, {"TMPDIR": str(tmp_path)}, tmp_path / "log")
    try:
        server.wait_ready()
        send_turn(server.url)
        assert turns_total(server.url) == 1
        time.sleep(1.5)  # past a write period of sharedmetrics
        assert list(tmp_path.glob("agentscript-metrics-*")) == []
    finally:
        server.stop()
