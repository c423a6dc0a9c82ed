"""Our own conversation files (``turns:`` with scripted ``model:`` moves and ``expect:``),
read by :mod:`agentscript.conversation` and run as one multi-turn case."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from agentscript.conversation import ConversationError, parse_conversation
from agentscript.testing.errors import SpecError
from agentscript.testing.faults import parse_faults
from agentscript.testing.spec import Case, Check, CheckKind, SpecFormat, Suite, TurnSpec
from agentscript.testing.whitebox import parse_assertions
from agentscript.testing.yamlmarks import line_of


def is_conversation(data: Any) -> bool:
    return isinstance(data, dict) and "turns" in data


def read_conversation(data: dict[str, Any], path: Path) -> Suite:
    """``data`` is the file read with line marks; our test keys (``faults:`` at the top,
    ``assert:`` on a turn) are taken out before the conversation reader sees the rest."""
    data = dict(data)
    faults = parse_faults(data.pop("faults", None), path, line_of(data, "faults"))
    raw_turns = data.get("turns")
    asserts: list[list[Check]] = []
    if isinstance(raw_turns, list):
        plain_turns = []
        for index, raw in enumerate(raw_turns):
            turn = dict(raw) if isinstance(raw, dict) else raw
            at = line_of(raw_turns, index)
            checks = parse_assertions(
                turn.pop("assert", None) if isinstance(turn, dict) else None, path, at
            )
            asserts.append(checks)
            plain_turns.append(turn)
        data["turns"] = plain_turns
    try:
        conversation = parse_conversation(yaml.safe_dump(_plain(data), sort_keys=False), path)
    except ConversationError as exc:
        raise SpecError(None, None, str(exc)) from None
    turns = []
    for index, turn in enumerate(conversation.turns):
        checks = (
            [Check(CheckKind.EXPECT, "expect", dict(turn.expect.spec))] if turn.expect.spec else []
        )
        checks += asserts[index] if index < len(asserts) else []
        turns.append(TurnSpec(turn.user, checks, moves=list(turn.moves), expect=turn.expect))
    case = Case(
        name=path.stem,
        turns=turns,
        context_variables=dict(conversation.variables),
        stubs=dict(conversation.stubs),
        faults=faults,
    )
    return Suite(path=path, format=SpecFormat.CONVERSATION, name=path.stem, cases=[case])


def _plain(value: Any) -> Any:
    # Marked dicts/lists back to plain ones, so the safe dumper can write them.
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value
