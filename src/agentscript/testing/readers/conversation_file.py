"""Our own conversation files (``turns:`` with scripted ``model:`` moves and ``expect:``),
read by :mod:`agentscript.conversation` and run as one multi-turn case."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentscript.conversation import ConversationError, parse_conversation
from agentscript.testing.errors import SpecError
from agentscript.testing.spec import Case, Check, CheckKind, SpecFormat, Suite, TurnSpec


def is_conversation(data: Any) -> bool:
    return isinstance(data, dict) and "turns" in data


def read_conversation(text: str, path: Path) -> Suite:
    try:
        conversation = parse_conversation(text, path)
    except ConversationError as exc:
        raise SpecError(None, None, str(exc)) from None
    turns = [
        TurnSpec(
            turn.user,
            [Check(CheckKind.EXPECT, "expect", dict(turn.expect.spec))] if turn.expect.spec else [],
            moves=list(turn.moves),
            expect=turn.expect,
        )
        for turn in conversation.turns
    ]
    case = Case(
        name=path.stem,
        turns=turns,
        context_variables=dict(conversation.variables),
        stubs=dict(conversation.stubs),
    )
    return Suite(path=path, format=SpecFormat.CONVERSATION, name=path.stem, cases=[case])
