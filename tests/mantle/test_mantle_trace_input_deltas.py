"""Mantle sessions keep ``LLM_STEP`` deltas across a save and a restore, and after the
history's oldest messages were trimmed (``llm_input`` of the saved state, ``messagesDropped``):
the same traces live or restored before every turn, rebuilding what the model was sent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import agentscript
from agentscript.limits import Limits
from agentscript.mantle.run.prompt import without_moment
from agentscript.models.base import Message, ToolCall
from agentscript.models.function import FunctionInfo, FunctionModel
from agentscript.trace_inputs import rebuild_messages

CARD_BANK = Path(__file__).parents[2] / "examples" / "card_bank"
TURNS = [
    "hi " + "words " * 50,
    'call activate_skill {"skill": "authenticate"}',
    "my name is Ada " + "words " * 50,
    "what is my balance " + "words " * 50,
]


def play(how: str, limits: Limits) -> tuple[list[Any], list[dict[str, Any]]]:
    """24 turns of card_bank, the session ``live`` or ``restored`` before each turn: what
    the model received and the traces."""
    received: list[Any] = []

    def answer(messages: list[Message], info: FunctionInfo) -> str | ToolCall:
        received.append([m.to_json() for m in messages])
        last = messages[-1]
        if last.role == "user" and last.content.startswith("call "):
            name, _, args = last.content[5:].partition(" ")
            if name in info.tool_names:
                return ToolCall(f"call_{len(messages)}", name, json.loads(args))
        return f"ok: {last.content[:40]}"

    agent = agentscript.load(CARD_BANK)
    model = FunctionModel(answer)
    session = agent.session(model=model, limits=limits, session_id="s1")
    traces = []
    for number in range(24):
        if how == "restored" and number:
            session = agent.restore(json.dumps(session.to_json()), model=model, limits=limits)
        reply = session.send(TURNS[number % len(TURNS)])
        assert reply.error is None, reply.error
        traces.append(reply.trace)
    return received, traces


def without_timings(trace: Any) -> Any:
    """``trace`` without timings, and without the minute its prompts were built in."""
    if isinstance(trace, dict):
        return {k: without_timings(v) for k, v in trace.items() if not k.endswith(("Ms", "_ms"))}
    if isinstance(trace, list):
        return [without_timings(item) for item in trace]
    if isinstance(trace, str):
        return without_moment(trace)
    return trace


@pytest.mark.parametrize("max_chars", [3000, 4_000_000], ids=["trimmed", "whole"])
def test_mantle_steps_are_deltas_live_or_restored_and_rebuild_what_was_sent(
    max_chars: int,
) -> None:
    limits = Limits(max_history_chars=max_chars)
    runs = {how: play(how, limits) for how in ("live", "restored")}
    for received, traces in runs.values():
        assert rebuild_messages(traces) == received
        for trace in traces[1:]:
            steps = trace["planTrace"]["steps"]
            first = next(s["input"] for s in steps if s["type"] == "LLM_STEP")
            assert first["messagesFrom"] > 0 and len(first["messages"]) <= 3, first
            if any(s.get("event") == "history_trimmed" for s in steps):
                assert first["messagesDropped"] > 0
    live, restored = ([without_timings(t) for t in runs[how][1]] for how in ("live", "restored"))
    assert live == restored
    trimmed = sum(
        any(s.get("event") == "history_trimmed" for s in t["planTrace"]["steps"])
        for t in runs["live"][1]
    )
    assert (trimmed >= 10) == (max_chars == 3000)
