"""The scripted model: plays the ``model:`` moves of a conversation file, one per LLM call.

A move is ``{say: text}``, ``{tool: name, args: {...}}`` or ``{tools: [{tool, args}, ...]}``;
``say`` next to ``tool``/``tools`` is text the model sent along with its calls (a "let me
check" preamble), kept so a recorded chat replays the answer it got.
The model does not check that a tool is offered: a move naming a hidden or unknown tool
reaches the engine like any hallucinated call, so refusals can be tested.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentscript.errors import UsageError
from agentscript.models.base import (
    ModelRequest,
    ModelResponse,
    ScriptExhausted,
    TextSink,
    ToolCall,
)


class MoveError(UsageError, ValueError):
    """A move in a conversation file is malformed."""


@dataclass(slots=True)
class Move:
    text: str | None = None
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {} if self.text is None else {"say": self.text}
        if not self.calls:
            return data
        if len(self.calls) == 1:
            name, args = self.calls[0]
            data.update({"tool": name, "args": args} if args else {"tool": name})
            return data
        data["tools"] = [{"tool": n, "args": a} for n, a in self.calls]
        return data


def parse_move(data: Any, where: str = "move") -> Move:
    """One move of a conversation file; MoveError (naming ``where``) when malformed."""
    if not isinstance(data, Mapping):
        raise MoveError(f"{where}: a move is a mapping with 'say', 'tool' or 'tools'")
    keys = set(data)
    text = None if "say" not in keys else _text(data["say"], where)
    keys.discard("say")
    if "tool" in keys:
        if keys - {"tool", "args"}:
            raise MoveError(f"{where}: unknown key(s) {sorted(keys - {'tool', 'args'})}")
        return Move(text=text, calls=[_call(data, where)])
    if "tools" in keys:
        calls = data["tools"]
        if keys - {"tools"} or not isinstance(calls, list) or not calls:
            raise MoveError(f"{where}: 'tools' is a non-empty list of {{tool, args}}")
        return Move(text=text, calls=[_call(c, f"{where}.tools[{i}]") for i, c in enumerate(calls)])
    if text is not None:
        if keys:
            raise MoveError(f"{where}: 'say' cannot be combined with {sorted(keys)}")
        return Move(text=text)
    raise MoveError(f"{where}: expected 'say', 'tool' or 'tools', got {sorted(keys)}")


def _text(value: Any, where: str) -> str:
    if isinstance(value, bytes | bytearray):
        # YAML's !!binary: its str() would be the Python repr b'...', never the text.
        raise MoveError(f"{where}: 'say' must be text, not a binary (!!binary) value")
    if value is None or isinstance(value, Mapping | list):
        raise MoveError(f"{where}: 'say' needs a text (use say: \"\" for an empty answer)")
    return str(value)


def _call(data: Any, where: str) -> tuple[str, dict[str, Any]]:
    if not isinstance(data, Mapping) or not isinstance(data.get("tool"), str):
        raise MoveError(f"{where}: a tool call needs 'tool: <name>'")
    # Only a missing or null 'args' means no arguments: `args: 0` or `args: ""` is a mistake.
    args = data.get("args")
    if args is None:
        args = {}
    if not isinstance(args, Mapping):
        raise MoveError(f"{where}: 'args' must be a mapping")
    return str(data["tool"]), dict(args)


class ScriptedModel:
    """Answers each LLM call with the next move of the current turn."""

    name = "scripted"

    def __init__(self, moves: Sequence[Move] = (), *, keep_requests: bool = True) -> None:
        self._moves: list[Move] = list(moves)
        self._next = 0
        self._calls = 0
        # Every request asked, for tests to inspect. Each one holds the history so far, so a
        # long conversation's would grow with the square of its turns: a player that never
        # reads them (``agentscript run``) passes keep_requests=False and none is kept.
        self.keep_requests = keep_requests
        self.requests: list[ModelRequest] = []

    def begin_turn(self, moves: Sequence[Move]) -> None:
        self._moves = list(moves)
        self._next = 0

    def unused_moves(self) -> list[Move]:
        return self._moves[self._next :]

    async def complete(
        self, request: ModelRequest, *, stream: TextSink | None = None
    ) -> ModelResponse:
        if self.keep_requests:
            self.requests.append(request)
        if self._next >= len(self._moves):
            raise ScriptExhausted(
                f"the conversation script has no model move left for this turn "
                f"(subagent '{request.node}' asked the model; add a move under 'model:')"
            )
        move = self._moves[self._next]
        self._next += 1
        if move.text and stream is not None:
            stream(move.text)
        calls = []
        for name, args in move.calls:
            self._calls += 1
            calls.append(ToolCall(f"call_{self._calls}", name, dict(args)))
        if not calls:
            return ModelResponse(text=move.text or "", model=self.name)
        return ModelResponse(text=move.text, tool_calls=calls, model=self.name)
