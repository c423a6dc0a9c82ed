"""A model that calls every tool it is offered, then answers with text: the test double for
"does every action of this agent run, with arguments of the declared types?".

For each LLM call, ``CallEveryToolModel`` calls the first offered tool it has not called yet
in the current turn (a turn starts at the last user message), with arguments from
``arguments[tool]`` when given, else a sample value of each declared parameter's JSON type
(``sample_arguments``). When every offered tool has been called this turn, it answers
``text``. One call per answer, so a transition tool changes what is offered next and that is
followed too. ``skip`` names tools it never calls (say, an escalation). It always ends: the
set of tool names is finite and a name is called at most once per turn.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from agentscript.models.base import (
    Message,
    ModelRequest,
    ModelResponse,
    TextSink,
    ToolCall,
)

_SAMPLES: dict[str, Any] = {
    "string": "sample",
    "integer": 1,
    "number": 1.5,
    "boolean": True,
    "array": [],
    "object": {},
    "null": None,
}


def sample_value(schema: Mapping[str, Any]) -> Any:
    """A value matching a JSON schema's ``enum``/``const``/``type`` (first type of a list)."""
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type", "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "array" and isinstance(schema.get("items"), Mapping):
        return [sample_value(schema["items"])]
    return _SAMPLES.get(str(kind), "sample")


def sample_arguments(parameters: Mapping[str, Any]) -> dict[str, Any]:
    """A sample value for every property of a tool's parameter schema."""
    properties = parameters.get("properties") or {}
    return {name: sample_value(spec) for name, spec in properties.items()}


def called_this_turn(messages: Iterable[Message]) -> set[str]:
    """Names of the tools the assistant called since the last user message."""
    called: set[str] = set()
    for message in messages:
        if message.role == "user":
            called.clear()
        for call in message.tool_calls:
            called.add(call.name)
    return called


class CallEveryToolModel:
    """Calls each offered tool once per turn, then says ``text``."""

    def __init__(
        self,
        text: str = "Done.",
        *,
        arguments: Mapping[str, Mapping[str, Any]] | None = None,
        skip: Iterable[str] = (),
        name: str = "call-every-tool",
    ) -> None:
        self.text = text
        self.arguments = {tool: dict(args) for tool, args in (arguments or {}).items()}
        self.skip = frozenset(skip)
        self.name = name
        self.requests: list[ModelRequest] = []
        self.called: list[str] = []  # every tool called, in order, across turns
        self._ids = 0

    async def complete(
        self, request: ModelRequest, *, stream: TextSink | None = None
    ) -> ModelResponse:
        self.requests.append(request)
        done = called_this_turn(request.messages) | self.skip
        for tool in request.tools:
            if tool.name in done:
                continue
            self._ids += 1
            self.called.append(tool.name)
            args = self.arguments.get(tool.name)
            if args is None:
                args = sample_arguments(tool.parameters)
            call = ToolCall(f"every_{self._ids}", tool.name, dict(args))
            return ModelResponse(tool_calls=[call], model=self.name)
        if stream is not None:
            stream(self.text)
        return ModelResponse(text=self.text, model=self.name)


__all__ = [
    "CallEveryToolModel",
    "called_this_turn",
    "sample_arguments",
    "sample_value",
]
