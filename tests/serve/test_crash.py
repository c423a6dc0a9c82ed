"""A real server killed with SIGKILL mid-turn loses nothing and runs the retried turn once."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from pathlib import Path

import httpx2 as httpx

from .harness import NOTES
from .process import ServerProcess


def _calls(log: Path) -> list[dict[str, str]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines()]


def test_crash_mid_turn_leaves_session_as_before_and_retry_runs_once(
    api_store: str, tmp_path: Path
) -> None:
    calls, block = tmp_path / "calls.jsonl", tmp_path / "block"
    env = {"NOTES_LOG": str(calls), "NOTES_BLOCK": str(block)}
    args = [NOTES, "--model", "standin", "--store", api_store]
    message = {"text": '/note {"text": "pay 10"}'}
    key = {"Idempotency-Key": "pay-10-once"}

    first = ServerProcess(args, env, tmp_path / "server1.log")
    try:
        first.wait_ready()
        sid = httpx.post(f"{first.url}/v1/agents/Notes/sessions", json={}).json()["session_id"]
        hello = httpx.post(f"{first.url}/v1/sessions/{sid}/messages", json={"text": "hi"})
        assert hello.json()["turn"] == 1
        before = httpx.get(f"{first.url}/v1/sessions/{sid}").json()
        block.touch()

        def send() -> None:
            with contextlib.suppress(httpx.TransportError):  # the server dies under it
                httpx.post(
                    f"{first.url}/v1/sessions/{sid}/messages", json=message, headers=key, timeout=60
                )

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        deadline = time.monotonic() + 30
        while not _calls(calls) and time.monotonic() < deadline:  # the turn is inside the action
            time.sleep(0.05)
        assert len(_calls(calls)) == 1
    finally:
        first.kill()
    sender.join(timeout=10)
    block.unlink()

    second = ServerProcess(args, env, tmp_path / "server2.log")
    try:
        second.wait_ready()
        after = httpx.get(f"{second.url}/v1/sessions/{sid}").json()
        assert after == before  # exactly as before the killed turn
        turns = httpx.get(f"{second.url}/v1/sessions/{sid}/turns").json()["turns"]
        assert [t["turn"] for t in turns] == [1]

        retried = httpx.post(
            f"{second.url}/v1/sessions/{sid}/messages", json=message, headers=key, timeout=30
        )
        assert retried.status_code == 200 and retried.json()["turn"] == 2
        assert [c["key"] for c in _calls(calls)] == ["pay-10-once", "pay-10-once"]

        again = httpx.post(
            f"{second.url}/v1/sessions/{sid}/messages", json=message, headers=key, timeout=30
        )
        assert again.json() == retried.json()  # the stored result; nothing ran
        assert len(_calls(calls)) == 2
        view = httpx.get(f"{second.url}/v1/sessions/{sid}").json()
        assert view["turns"] == 2 and view["variables"]["last_note"] == "pay 10"
    finally:
        second.stop()
