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

import json
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
    # Only a missing key or null means "none": `turns: 0` or `actions: ""` is a mistake.
    variables = _given(data, "variables", dict, where, "a mapping of names to values")
    stubs = _given(data, "actions", dict, where, "a mapping of action names to stubs")
    try:
        StubBook.from_data(stubs)
    except ValueError as exc:
        raise ConversationError(f"{where}: actions: {exc}") from None
    raw_turns = _given(data, "turns", list, where, "a list of turns")
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
        moves_data = _given(raw, "model", list, label, "a list of moves")
        try:
            moves = [parse_move(m, f"{label}, move {i}") for i, m in enumerate(moves_data, start=1)]
        except MoveError as exc:
            raise ConversationError(str(exc)) from None
        try:
            expect = Expectations.parse(raw.get("expect"), label)
        except ExpectationError as exc:
            raise ConversationError(str(exc)) from None
        user = raw["user"]
        if isinstance(user, bytes | bytearray):
            # YAML's !!binary: its str() would send the Python repr b'...' as the message.
            raise ConversationError(f"{label}: 'user' must be text, not a binary (!!binary) value")
        if user is None or isinstance(user, dict | list):
            # YAML reads `user:` with nothing after it as null, which is not the text "None".
            raise ConversationError(
                f"{label}: 'user' must be the user's message as text "
                f'(write user: "" for an empty message)'
            )
        turns.append(Turn(str(user), moves, expect))
    binary = _binary_at(data)
    if binary is not None:
        raise ConversationError(
            f"{where}: {binary}: a binary (!!binary) value is not allowed; values are text, "
            "numbers, true/false, lists and mappings"
        )
    return Conversation(dict(variables), dict(stubs), turns, path)


def _given(data: dict[str, Any], key: str, kind: type, where: str, what: str) -> Any:
    """``data[key]`` when it is a ``kind``; an empty one when the key is missing or null;
    anything else is an error naming the key (a falsy 0, false or "" is no empty value)."""
    value = data.get(key)
    if value is None:
        return kind()
    if not isinstance(value, kind):
        raise ConversationError(f"{where}: '{key}' must be {what}, got {_kind(value)}")
    return value


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, bytes | bytearray):
        return "a binary (!!binary) value"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "the text " + json.dumps(value[:40])
    return json.dumps(value) if isinstance(value, int | float) else type(value).__name__


def _binary_at(data: Any) -> str | None:
    """Where the file has a YAML ``!!binary`` value (the first one), else None. Bytes are no
    JSON value: as a variable, stub output, tool argument or expectation they would be
    refused, dropped or compared as the Python repr ``b'...'``."""
    pending: list[tuple[Any, tuple[Any, ...]]] = [(data, ())]
    while pending:
        value, at = pending.pop()
        if isinstance(value, bytes | bytearray):
            return _place(at)
        if isinstance(value, dict):
            for key in value:
                if isinstance(key, bytes | bytearray):
                    return _place((*at, "<binary key>"))
            pending.extend((v, (*at, k)) for k, v in reversed(list(value.items())))
        elif isinstance(value, list):
            pending.extend((v, (*at, i)) for i, v in reversed(list(enumerate(value))))
    return None


def _place(at: tuple[Any, ...]) -> str:
    """A place in the file as its messages name it: ``turn 2, move 1: args.order``,
    ``actions: lookup.outputs.status``, ``variables: customer``."""
    head: list[str] = []
    rest = list(at)
    if len(rest) >= 2 and rest[0] == "turns" and isinstance(rest[1], int):
        head.append(f"turn {rest[1] + 1}")
        rest = rest[2:]
        if len(rest) >= 2 and rest[0] == "model" and isinstance(rest[1], int):
            head.append(f"move {rest[1] + 1}")
            rest = rest[2:]
    elif rest:
        head.append(str(rest.pop(0)))
    path = ""
    for part in rest:
        path += f"[{part}]" if isinstance(part, int) else f".{part}" if path else str(part)
    return ", ".join(head) + (f": {path}" if path else "")


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
