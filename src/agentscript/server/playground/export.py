"""A playground session written out: as a conversation file that ``agentscript run`` replays,
and as a zip of its trace files.

In: the session's stored turns (the turn JSON and trace of each) and the variables it started
with. Out: YAML text, zip bytes. Each turn's model moves come from the answers recorded in its
``LLM_STEP`` steps (tool calls win over text, as in the engine); the outputs of actions that ran
become stubs in call order (as ``chat --record`` does), so the replay needs no backend. Nothing
here calls a model or an action.
"""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Sequence
from typing import Any

from agentscript.models.base import ModelResponse, ToolCall
from agentscript.models.recording import ConversationRecorder, move_of
from agentscript.models.scripted import Move
from agentscript.store import TurnRecord
from agentscript.trace import path_component


def moves_of(trace: dict[str, Any]) -> list[Move]:
    """The scripted moves that make the scripted model answer as the model did in ``trace``."""
    moves = []
    for step in trace.get("planTrace", {}).get("steps", []):
        if step.get("type") != "LLM_STEP" or not isinstance(step.get("output"), dict):
            continue
        output = step["output"]
        calls = [
            ToolCall(
                str(call.get("id", "")),
                str(call.get("name", "")),
                call.get("arguments") if isinstance(call.get("arguments"), dict) else None,
                raw_arguments=str(call.get("raw_arguments") or ""),
            )
            for call in output.get("tool_calls") or []
            if isinstance(call, dict)
        ]
        moves.append(move_of(ModelResponse(text=output.get("text"), tool_calls=calls)))
    return moves


def conversation_yaml(agent: str, variables: dict[str, Any], turns: Sequence[TurnRecord]) -> str:
    """The session as a conversation file (YAML) with a comment naming the agent."""
    recorder = ConversationRecorder(variables)
    for record in turns:
        recorder.add_turn(str(record.result.get("user", "")), moves_of(record.trace), record.trace)
    head = f"# Saved by the agentscript playground: agentscript run AGENT --conversation FILE ({agent})\n"
    return head + recorder.dump()


def traces_zip(agent: str, session_id: str, turns: Sequence[TurnRecord]) -> bytes:
    """The turns' trace files as ``--trace-dir`` lays them out, names made safe the same way:
    ``<agent>/sessions/<session id>/traces/<plan id>.json``."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for record in turns:
            plan = path_component(str(record.trace.get("planId") or f"turn-{record.turn}"))
            folder = f"{path_component(agent)}/sessions/{path_component(session_id)}/traces"
            archive.writestr(
                f"{folder}/{plan}.json", json.dumps(record.trace, indent=2, default=repr)
            )
    return buffer.getvalue()
