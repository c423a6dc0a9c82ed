"""A client that leaves a streamed turn (``Accept: text/event-stream``) mid-way cancels nothing:
the turn runs to its commit, its action once, and the session takes the next message. A real
server, since only a real connection can be closed under a running turn."""

from __future__ import annotations

import json
import time
from pathlib import Path

import httpx2 as httpx

from .harness import NOTES
from .process import serving

STREAM = {"Accept": "text/event-stream"}


def test_a_client_gone_mid_stream_leaves_the_turn_to_commit_once(
    api_store: str, tmp_path: Path
) -> None:
    calls, block = tmp_path / "calls.jsonl", tmp_path / "block"
    env = {"NOTES_LOG": str(calls), "NOTES_BLOCK": str(block)}
    args = [NOTES, "--model", "standin", "--store", api_store, "--access-log"]
    log = tmp_path / "server.log"
    with serving(args, env, log) as server:
        sid = httpx.post(f"{server.url}/v1/agents/Notes/sessions", json={}).json()["session_id"]
        messages = f"{server.url}/v1/sessions/{sid}/messages"
        block.touch()
        with httpx.stream(
            "POST", messages, json={"text": '/note {"text": "gone"}'}, headers=STREAM, timeout=30
        ) as response:
            assert response.status_code == 200
            first = next(response.iter_lines())  # the turn is running: its first step came
            assert first.startswith("event: ")
        deadline = time.monotonic() + 30
        while not calls.exists() and time.monotonic() < deadline:  # inside the action
            time.sleep(0.05)
        block.unlink()  # the action returns after the client left

        view: dict[str, object] = {}
        while time.monotonic() < deadline:
            view = httpx.get(f"{server.url}/v1/sessions/{sid}").json()
            if view["turns"] == 1:
                break
            time.sleep(0.05)
        assert view["turns"] == 1
        assert view["variables"]["last_note"] == "gone"  # type: ignore[index]
        assert len(calls.read_text().splitlines()) == 1

        nxt = httpx.post(messages, json={"text": "hi"}, headers=STREAM, timeout=30)
        last = nxt.text.rstrip("\n").rsplit("\n\n", 1)[-1]
        name, _, data = last.partition("\ndata:")
        assert (nxt.status_code, name) == (200, "event: turn")
        assert json.loads(data)["turn"] == 2
    assert "(client gone)" in log.read_text()
