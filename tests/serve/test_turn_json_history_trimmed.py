"""A turn's JSON says when the history's oldest exchanges were dropped before it ran
(``Limits.max_history_chars``): ``history_trimmed``, the number of messages the model no longer
sees, as the trace's ``EVENT_STEP`` ``history_trimmed`` records it; absent when none were. A
client learns from the answer itself, not only from the stored trace, that the model has
forgotten the start of the conversation. Both formats, in process, through ``run --json``'s
report and through ``serve`` (a replayed turn says it too); ``chat`` and ``run``'s transcript
say it in a line on the turn."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from agentscript.engine.session import Reply
from agentscript.limits import Limits
from agentscript.models.function import FunctionModel
from agentscript.playback import TurnReport

from .test_live_sessions import answer, server
from .test_trace_deltas import long_turns, trimming_agent

CARD_BANK = Path(__file__).parents[2] / "examples" / "card_bank"


def trimmed_in_trace(trace: dict[str, Any]) -> int:
    """Messages the trace's ``history_trimmed`` event dropped (0 without one)."""
    steps = trace["planTrace"]["steps"]
    events = [s for s in steps if s.get("event") == "history_trimmed"]
    assert len(events) <= 1, events
    return int(events[0]["dropped"]) if events else 0


def check_reply(reply: Reply) -> int:
    """The reply and its ``run --json`` report agree with the trace; the messages dropped."""
    dropped = trimmed_in_trace(reply.trace)
    assert reply.history_trimmed == dropped
    report = TurnReport("text", reply, [], {}).to_json()
    assert report.get("history_trimmed") == (dropped or None)
    assert ("history_trimmed" in report) == (dropped > 0)
    return dropped


def test_reply_history_trimmed_says_what_the_trace_dropped_agent_script(tmp_path: Path) -> None:
    import agentscript

    agent = agentscript.load(trimming_agent(tmp_path, 3000))
    session = agent.session(model=FunctionModel(answer))
    dropped = [check_reply(session.send(text)) for text in long_turns(20)]
    assert dropped[0] == 0 and sum(d > 0 for d in dropped) >= 8, dropped
    # The same agent with room for the whole conversation never says so.
    whole = agentscript.load(trimming_agent(tmp_path / "whole", 4_000_000))
    session = whole.session(model=FunctionModel(answer))
    assert [check_reply(session.send(text)) for text in long_turns(20)] == [0] * 20


def test_reply_history_trimmed_says_what_the_trace_dropped_mantle() -> None:
    import agentscript

    agent = agentscript.load(CARD_BANK)
    session = agent.session(model=FunctionModel(answer), limits=Limits(max_history_chars=3000))
    dropped = [check_reply(session.send(f"{n} " + "words " * 60)) for n in range(16)]
    assert dropped[0] == 0 and sum(d > 0 for d in dropped) >= 8, dropped


def test_served_turn_json_says_the_history_was_trimmed_and_its_replay_too(
    tmp_path: Path,
) -> None:
    agent = trimming_agent(tmp_path, 3000)

    async def main() -> None:
        async with server(f"sqlite:///{tmp_path}/s.db", agent, live=1000) as client:
            created = await client.post("/v1/agents/Notes/sessions", json={})
            sid = created.json()["session_id"]
            said: list[int] = []
            for number, text in enumerate(long_turns(20), start=1):
                key = {"Idempotency-Key": f"k{number}"}
                sent = await client.post(
                    f"/v1/sessions/{sid}/messages", json={"text": text}, headers=key
                )
                assert sent.status_code == 200, sent.text
                turn = sent.json()
                trace = await client.get(f"/v1/sessions/{sid}/turns/{number}/trace")
                dropped = trimmed_in_trace(trace.json())
                assert turn.get("history_trimmed", 0) == dropped
                assert ("history_trimmed" in turn) == (dropped > 0)
                said.append(dropped)
                again = await client.post(
                    f"/v1/sessions/{sid}/messages", json={"text": text}, headers=key
                )
                assert json.loads(again.content) == turn  # the stored result, as answered
            assert said[0] == 0 and sum(d > 0 for d in said) >= 8, said

    asyncio.run(main())


def test_chat_and_the_run_transcript_say_when_the_history_was_trimmed(
    tmp_path: Path, capsys: Any
) -> None:
    """People reading a chat or a ``run`` transcript are told, on the turn it happened."""
    import agentscript
    from agentscript.chat import run_chat
    from agentscript.cli.run import print_transcript
    from agentscript.conversation import parse_conversation
    from agentscript.playback import history_trimmed_note, play

    assert history_trimmed_note(1).startswith("the oldest 1 message was dropped")
    agent = agentscript.load(trimming_agent(tmp_path, 3000))
    turns = long_turns(12)
    assert run_chat(agent, model=FunctionModel(answer), interactive=False, lines=turns) == 0
    err = capsys.readouterr().err
    session = agent.session(model=FunctionModel(answer))
    expected = [
        f"({history_trimmed_note(n)})" for n in map(check_reply, map(session.send, turns)) if n
    ]
    assert expected and [line for line in err.splitlines() if "dropped" in line] == expected

    script = "turns:\n" + "".join(
        f"  - user: {json.dumps(text)}\n    model: [{{say: ok}}]\n" for text in turns
    )
    playback = play(agent, parse_conversation(script))
    print_transcript(playback)
    out = capsys.readouterr().out.splitlines()
    said = [line.strip() for line in out if line.strip().startswith("history:")]
    counts = [t.reply.history_trimmed for t in playback.turns if t.reply.history_trimmed]
    assert counts and said == [f"history:   {history_trimmed_note(n)}" for n in counts]
