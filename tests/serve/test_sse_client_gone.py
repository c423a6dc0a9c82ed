"""A client that leaves a streamed turn (``Accept: text/event-stream``) mid-way cancels nothing:
the turn runs to its commit, its action once, and the session takes the next message. A real
server, since only a real connection can be closed under a running turn."""

from __future__ import annotations

import asyncio
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


def cut_at_the_grace(turn_done: bool) -> tuple[list[bytes], bool, bool]:
    """A stream whose writing is stuck (a reader that stopped reading: uvicorn's send waits
    for the socket to drain) when uvicorn cancels its request at the end of the shutdown
    grace: what it tried to write after the cut, whether it ended on its own, and whether the
    turn was cut."""
    from agentscript.server.streaming import EventStream

    async def main() -> tuple[list[bytes], bool, bool]:
        events: asyncio.Queue[str | None] = asyncio.Queue()
        events.put_nowait("event: step\ndata: {}\n\n")
        turn = asyncio.get_running_loop().create_future()
        if turn_done:
            events.put_nowait('event: turn\ndata: {"turn":1}\n\n')
            events.put_nowait(None)
            turn.set_result(None)
        written: list[bytes] = []
        stuck = asyncio.Event()

        async def send(message: dict[str, object]) -> None:
            if message["type"] == "http.response.body":
                written.append(message["body"])  # type: ignore[arg-type]
                stuck.set()
                await asyncio.Event().wait()  # never drains

        async def receive() -> dict[str, str]:
            await asyncio.Event().wait()  # the client stays
            return {"type": "http.disconnect"}

        stream = EventStream(events, turn)  # type: ignore[arg-type]
        request = asyncio.create_task(stream({"type": "http"}, receive, send))
        await stuck.wait()
        request.cancel()  # uvicorn, at the end of the grace
        done, _ = await asyncio.wait({request}, timeout=5)
        if request in done:
            request.result()  # no exception escapes: uvicorn would log a traceback
        return [body for body in written[1:] if body], request in done, turn.cancelled()

    return asyncio.run(main())


def test_a_stream_stuck_behind_its_reader_at_the_grace_ends_without_claiming_its_turn_uncommitted() -> (
    None
):
    # The turn ended (committed or not): its own last event, queued, tells; nothing else.
    after_cut, ended, cut = cut_at_the_grace(turn_done=True)
    assert ended and after_cut == [] and not cut


def test_a_stream_cut_at_the_grace_with_its_turn_running_cuts_it_and_says_so_without_waiting() -> (
    None
):
    after_cut, ended, cut = cut_at_the_grace(turn_done=False)
    # Cut here, not at the service's shutdown a moment later, where it could still commit
    # after its client was told it did not.
    assert cut
    assert ended  # the write of the last event is bounded: a stuck reader holds no stop
    assert len(after_cut) == 1 and b"event: error" in after_cut[0]
    assert b'"code":"shutting_down"' in after_cut[0]
