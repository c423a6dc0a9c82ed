"""Served turns store only the messages added since the session's previous model call.

Under ``agentscript serve`` every turn runs a restored or a resumed session; its first
``LLM_STEP`` used to hold the whole history, so a session's stored traces grew with the square
of its length. The saved state now says which of its messages the previous call was given
(``llm_input``), so each stored trace holds the turn's new messages only, the stored traces of
a session rebuild exactly what the model was sent (``trace_inputs.rebuild_messages``), and a
trimmed history (``Limits.max_history_chars``) still gives deltas (``messagesDropped``).
Kept, restored and alternating-worker runs are compared in ``test_live_sessions.py``.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path
from typing import Any

from agentscript.models.base import Message, ModelError, ToolCall
from agentscript.models.function import FunctionInfo
from agentscript.trace_inputs import rebuild_messages

from .harness import NOTES
from .test_live_sessions import answer, comparable, first_llm_input, server, sql


def failing_on_fail(received: list[Any]) -> Any:
    """``answer``, but a model failure for a user message ``fail`` (recorded all the same)."""

    def model(messages: list[Message], info: FunctionInfo) -> str | ToolCall:
        received.append([m.to_json() for m in messages])
        if messages and messages[-1].content == "fail":
            raise ModelError("the model is down")
        return answer(messages, info)

    return model


async def play(client: Any, turns: list[str]) -> tuple[str, list[dict[str, Any]], list[int]]:
    """A new Notes session given ``turns``: its id, its stored traces and their sizes."""
    sid = (await client.post("/v1/agents/Notes/sessions", json={})).json()["session_id"]
    traces, sizes = [], []
    for number, text in enumerate(turns, start=1):
        reply = await client.post(f"/v1/sessions/{sid}/messages", json={"text": text})
        assert reply.status_code == 200, reply.text
        stored = await client.get(f"/v1/sessions/{sid}/turns/{number}/trace")
        traces.append(stored.json())
        sizes.append(len(stored.content))
    return sid, traces, sizes


def long_turns(count: int, size: int = 300) -> list[str]:
    """``count`` user messages of ``size`` characters; every fifth saves a note, one fails."""
    turns = []
    for number in range(count):
        if number % 5 == 2:
            turns.append(f'call note {{"text": "note {number}"}}')
        elif number == 8:
            turns.append("fail")
        else:
            turns.append(f"{number} " + "words " * (size // 6))
    return turns


def test_a_served_conversation_stores_only_new_messages_and_rebuilds_what_was_sent(
    tmp_path: Path,
) -> None:
    received: list[Any] = []

    async def main() -> None:
        async with server(f"sqlite:///{tmp_path}/s.db", NOTES, live=1000) as client:
            served = client._transport.app.state.service.agents["Notes"]  # type: ignore[attr-defined]
            served.model.function = failing_on_fail(received)
            _, traces, sizes = await play(client, long_turns(40))
        assert traces[8]["response"] == "Sorry, something went wrong."  # the failed turn
        assert rebuild_messages(traces) == received
        for trace in traces[1:]:
            given = first_llm_input(trace)
            assert given is not None
            assert given["messagesFrom"] > 0 and len(given["messages"]) <= 4, given
        # Flat: the 40th turn's trace is no larger than the early ones (it held 40 turns).
        assert max(sizes[20:]) < 1.3 * max(sizes[1:6]), sizes

    asyncio.run(main())


def trimming_agent(tmp_path: Path, max_chars: int) -> str:
    folder = tmp_path / "notes"
    shutil.copytree(Path(NOTES).parent, folder)
    (folder / "agentscript.toml").write_text(f"[limits]\nmax_history_chars = {max_chars}\n")
    return str(folder / "notes.agent")


def test_served_steps_after_the_history_was_trimmed_are_deltas_kept_or_restored(
    tmp_path: Path,
) -> None:
    agent = trimming_agent(tmp_path, 3000)
    runs: dict[int, list[Any]] = {}
    for live in (1000, 0):
        received: list[Any] = []

        async def main(live: int = live, received: list[Any] = received) -> list[Any]:
            url = f"sqlite:///{tmp_path}/s{live}.db"
            async with server(url, agent, live, received) as client:
                sid, traces, _ = await play(client, long_turns(30))
            trimmed = [
                t
                for t in traces
                if any(s.get("event") == "history_trimmed" for s in t["planTrace"]["steps"])
            ]
            assert len(trimmed) >= 10
            for trace in trimmed:
                given = first_llm_input(trace)
                assert given is not None
                assert given["messagesDropped"] > 0 and given["messagesFrom"] > 0, given
                assert len(given["messages"]) <= 4
            assert rebuild_messages(traces) == received
            return [comparable(t, sid) for t in traces]

        runs[live] = asyncio.run(main())
    assert runs[1000] == runs[0]


def test_a_stored_state_with_a_forged_digest_runs_a_turn_with_a_complete_step(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path}/s.db"

    async def main() -> None:
        async with server(url, NOTES, live=1000) as client:
            sid, traces, _ = await play(client, ["hello", "again"])
            assert first_llm_input(traces[1])["messagesFrom"] > 0  # type: ignore[index]
            [(text,)] = sql(url, "SELECT state FROM agentscript_sessions", ())
            state = json.loads(text)
            state["llm_input"]["digest"] = "sha256:" + "f" * 64
            sql(url, "UPDATE agentscript_sessions SET state = ?", (json.dumps(state),))
            reply = await client.post(f"/v1/sessions/{sid}/messages", json={"text": "more"})
            assert reply.status_code == 200, reply.text
            third = (await client.get(f"/v1/sessions/{sid}/turns/3/trace")).json()
        given = first_llm_input(third)
        assert given is not None and given["messagesFrom"] == 0
        assert [m["content"] for m in given["messages"]] == [
            "hello",
            "ok: hello",
            "again",
            "ok: again",
            "more",
        ]
        assert rebuild_messages([*traces, third])[-1] == given["messages"]

    asyncio.run(main())


def test_a_restored_sessions_history_is_hashed_with_its_restore_not_on_the_event_loop(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """The digest check of a restored ``llm_input`` ran at the turn's first model call, on
    the event loop, even when the restore itself ran on a thread (16-51 ms at the history
    limit): the server settles it right after the restore."""
    import threading

    from agentscript import trace_inputs
    from agentscript.server import service

    loop_thread: list[threading.Thread] = []
    hashed_on: list[threading.Thread] = []
    digest = trace_inputs.message_digest

    def recorded(message: Message) -> bytes:
        hashed_on.append(threading.current_thread())
        return digest(message)

    monkeypatch.setattr(trace_inputs, "message_digest", recorded)
    monkeypatch.setattr(service, "RESTORE_IN_THREAD_CHARS", 0)  # every restore on a thread

    async def scenario() -> None:
        loop_thread.append(threading.current_thread())
        async with server(f"sqlite:///{tmp_path}/s.db", NOTES, live=0) as client:
            sid = (await client.post("/v1/agents/Notes/sessions", json={})).json()["session_id"]
            for text in ("one", "two"):
                reply = await client.post(f"/v1/sessions/{sid}/messages", json={"text": text})
                assert reply.status_code == 200, reply.text
            hashed_on.clear()
            reply = await client.post(f"/v1/sessions/{sid}/messages", json={"text": "three"})
            assert reply.status_code == 200, reply.text

    asyncio.run(scenario())
    restored = [t for t in hashed_on if t is not loop_thread[0]]
    # The restored history's messages were hashed, all of them off the loop; on the loop
    # only the turn's own new messages (its mark), never the restored ones again.
    assert len(restored) >= 3  # none before: all were hashed at the model call, on the loop
    assert len(hashed_on) - len(restored) <= 3
