"""Conversation files (YAML): initial variables, action stubs, and turns with scripted moves.

```yaml
variables: {order_ID: "1234"}
actions:
  get_delivery_date: {outputs: {delivery_date: "February 10, 2026"}}
turns:
  - user: "Where is my order?"
    model:
      - tool: go_to_orders
      - say: "It arrives February 10."
```
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from agentscript.actions.registry import StubBook
from agentscript.errors import UsageError
from agentscript.expectations import ExpectationError, Expectations
from agentscript.expr.values import nested_deeper_than
from agentscript.limits import MAX_GIVEN_DEPTH
from agentscript.models.scripted import Move, MoveError, parse_move
from agentscript.reading import load_yaml, read_file_text

_TOP_KEYS = {"variables", "actions", "turns", "description", "name"}
_TURN_KEYS = {"user", "model", "expect"}


class ConversationError(UsageError, ValueError):
    """The conversation file is malformed; the message says where and how to fix it."""


@dataclass
class Turn:
    user: str
    moves: list[Move]
    expect: Expectations = field(default_factory=lambda: Expectations({}))


@dataclass
class Conversation:
    variables: dict[str, Any]
    stubs: dict[str, Any]
    turns: list[Turn]
    path: Path | None = None

    def stub_book(self) -> StubBook:
        return StubBook.from_data(self.stubs)


def load_conversation(path: str | Path) -> Conversation:
    file = Path(path)
    try:
        text = read_file_text(file)
    except (OSError, UnicodeDecodeError) as exc:
        raise ConversationError(f"{file}: cannot read the conversation file: {exc}") from None
    return parse_conversation(text, file)


# The file's own levels (turns, a turn, its moves, a move, its arguments) above the values.
MAX_CONVERSATION_DEPTH = MAX_GIVEN_DEPTH + 5


def parse_conversation(text: str, path: Path | None = None) -> Conversation:
    where = str(path) if path else "conversation"
    try:
        data = load_yaml(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""
        raise ConversationError(
            f"{where}{at}: invalid YAML: {getattr(exc, 'problem', exc)}"
        ) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConversationError(f"{where}: the file must be a mapping with 'turns:'")
    # Its values become variables, stub outputs and tool arguments, which a session keeps to
    # this depth: deeper, they could be neither saved nor answered as JSON.
    if nested_deeper_than(data, MAX_CONVERSATION_DEPTH):
        raise ConversationError(f"{where}: nested more than {MAX_CONVERSATION_DEPTH} levels deep")
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise ConversationError(
            f"{where}: unknown key(s) {sorted(unknown)}; expected {sorted(_TOP_KEYS)}"
        )
    variables = data.get("variables") or {}
    if not isinstance(variables, dict):
        raise ConversationError(f"{where}: 'variables' must be a mapping of names to values")
    stubs = data.get("actions") or {}
    if not isinstance(stubs, dict):
        raise ConversationError(f"{where}: 'actions' must be a mapping of action names to stubs")
    try:
        StubBook.from_data(stubs)
    except ValueError as exc:
        raise ConversationError(f"{where}: actions: {exc}") from None
    raw_turns = data.get("turns") or []
    if not isinstance(raw_turns, list):
        raise ConversationError(f"{where}: 'turns' must be a list")
    turns: list[Turn] = []
    for index, raw in enumerate(raw_turns, start=1):
        label = f"{where}: turn {index}"
        if not isinstance(raw, dict) or "user" not in raw:
            raise ConversationError(f"{label}: each turn needs 'user: <message>'")
        extra = set(raw) - _TURN_KEYS
        if extra:
            raise ConversationError(
                f"{label}: unknown key(s) {sorted(extra)}; expected {sorted(_TURN_KEYS)}"
            )
        moves_data = raw.get("model") or []
        if not isinstance(moves_data, list):
            raise ConversationError(f"{label}: 'model' must be a list of moves")
        try:
            moves = [parse_move(m, f"{label}, move {i}") for i, m in enumerate(moves_data, start=1)]
        except MoveError as exc:
            raise ConversationError(str(exc)) from None
        try:
            expect = Expectations.parse(raw.get("expect"), label)
        except ExpectationError as exc:
            raise ConversationError(str(exc)) from None
        user = raw["user"]
        if user is None or isinstance(user, dict | list):
            # YAML reads `user:` with nothing after it as null, which is not the text "None".
            raise ConversationError(
                f"{label}: 'user' must be the user's message as text "
                f'(write user: "" for an empty message)'
            )
        turns.append(Turn(str(user), moves, expect))
    return Conversation(dict(variables), dict(stubs), turns, path)


def dump_conversation(conversation: Conversation) -> str:
    """Write a conversation back as YAML (used by ``chat --record``)."""
    data: dict[str, Any] = {}
    if conversation.variables:
        data["variables"] = conversation.variables
    if conversation.stubs:
        data["actions"] = conversation.stubs
    data["turns"] = [
        {"user": turn.user, "model": [m.to_json() for m in turn.moves]}
        for turn in conversation.turns
    ]
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100)
