"""Plays a conversation file through a session with the scripted model (``agentscript run``)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentscript.conversation import Conversation
from agentscript.engine.session import AgentBase, Reply
from agentscript.models.scripted import ScriptedModel
from agentscript.printable import printable_text
from agentscript.trace_steps import Source


@dataclass
class TurnReport:
    user: str
    reply: Reply
    unused_moves: list[dict[str, Any]]
    before: dict[str, Any]
    # Unmet `expect:` entries of the conversation file (empty when all hold).
    failed_expectations: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        reply = self.reply
        report: dict[str, Any] = {
            "user": self.user,
            "response": reply.text,
            "node": reply.node,
            "path": reply.path,
            "actions": reply.actions,
            "variables": reply.variables,
            "trace_file": reply.trace_file,
            "unused_moves": self.unused_moves,
            "escalated": reply.escalated,
            "ended": reply.ended,
            "error": reply.error,
            "displayable": reply.displayable,
            "failed_expectations": self.failed_expectations,
            "usage": reply.usage,
        }
        refused = refused_calls(reply.trace)
        if refused:
            report["refused"] = refused
        if reply.delegated:
            report["delegated"] = reply.delegated
        if reply.buttons:  # Mantle response buttons; absent otherwise (the pinned shape)
            report["buttons"] = reply.buttons
        if reply.history_trimmed:  # the model no longer sees the oldest exchanges
            report["history_trimmed"] = reply.history_trimmed
        return report


@dataclass
class Playback:
    session_id: str
    welcome: str
    turns: list[TurnReport] = field(default_factory=list)
    variables: dict[str, Any] = field(default_factory=dict)

    @property
    def failed(self) -> bool:
        """The script and the engine disagreed, a turn was refused, an expectation failed,
        or a turn ended in an error that its ``expect: error:`` does not expect."""
        return any(
            t.reply.exhausted or t.reply.refused or t.failed_expectations for t in self.turns
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "welcome": self.welcome,
            "turns": [t.to_json() for t in self.turns],
            "variables": self.variables,
        }


async def play_async(
    agent: AgentBase, conversation: Conversation, *, trace_dir: Path | None = None
) -> Playback:
    # The requests are never read here, and each holds the history so far: kept, a file of
    # N turns would take memory in N².
    model = ScriptedModel(keep_requests=False)
    session = agent.session(
        model=model,
        variables=conversation.variables,
        stubs=conversation.stub_book(),
        trace_dir=trace_dir,
    )
    playback = Playback(session.id, session.welcome)
    for turn in conversation.turns:
        model.begin_turn(turn.moves)
        before = session.variables
        reply = await session.send_async(turn.user)
        unused = [] if reply.refused else [m.to_json() for m in model.unused_moves()]
        failures = turn.expect.check(reply)
        if reply.error is not None and not reply.exhausted and "error" not in turn.expect.spec:
            # A failed turn fails the run unless the file says it should fail.
            failures.append(
                "the turn failed with an error no 'expect:' expected "
                "(add 'error: true', or the text it contains, under the turn's 'expect:')"
            )
        playback.turns.append(TurnReport(turn.user, reply, unused, before, failures))
    playback.variables = session.variables
    return playback


def play(
    agent: AgentBase, conversation: Conversation, *, trace_dir: Path | None = None
) -> Playback:
    return asyncio.run(play_async(agent, conversation, trace_dir=trace_dir))


def describe_changes(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[str]:
    """``name: old -> new`` (JSON values) for every variable whose value changed. Text is
    shown as written (``21 °C``, not ``21 \\u00b0C``); what could act on a terminal (bidi
    controls, lone surrogates) is escaped, as JSON escapes the control characters."""
    return [
        printable_text(f"{name}: {_shown(before.get(name))} -> {_shown(value)}")
        for name, value in after.items()
        if before.get(name) != value
    ]


def _shown(value: Any) -> str:
    return json.dumps(value, default=repr, ensure_ascii=False)


def history_trimmed_note(dropped: int) -> str:
    """What a transcript says of a turn whose history was trimmed before it ran."""
    plural = "message was" if dropped == 1 else "messages were"
    return (
        f"the oldest {dropped} {plural} dropped to fit Limits.max_history_chars; "
        "the model no longer sees them"
    )


def refused_calls(trace: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool calls of a turn that were refused (rule S5 gates, bad arguments, limits), as
    ``{"name", "reason"}``: what ``run --json`` reports beside the actions that ran. A Mantle
    memory scope refusal (``source: memory``) is a refused read or write of a memory entry,
    not a tool call: it stays in the trace only."""
    steps = trace.get("planTrace", {}).get("steps", []) if isinstance(trace, dict) else []
    return [
        {"name": step.get("name"), "reason": step.get("reason")}
        for step in steps
        if isinstance(step, dict)
        and step.get("type") == "REFUSED_STEP"
        and step.get("source") != Source.MEMORY
    ]
