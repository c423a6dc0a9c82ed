"""The one small interface between the engine and any LLM.

The engine builds a :class:`ModelRequest` (system prompt, resolved instructions, conversation,
visible tools) and awaits :meth:`Model.complete`. Providers translate it to their wire format.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from agentscript.errors import RunFailure


@dataclass(slots=True)
class ToolSpec:
    """A tool as the model sees it: name, description and a JSON schema of its arguments."""

    name: str
    description: str
    parameters: dict[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {}, "required": []}
    )


@dataclass(slots=True)
class ToolCall:
    """One tool call requested by the model.

    ``arguments`` is None when the model sent arguments that are not a JSON object; then
    ``raw_arguments`` keeps what it sent so the engine can return a precise error to the model.
    """

    id: str
    name: str
    arguments: dict[str, Any] | None
    raw_arguments: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "arguments": self.arguments}


@dataclass(slots=True)
class Message:
    """A conversation message. ``role`` is "user", "assistant" or "tool"."""

    role: str
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_id: str | None = None  # for role "tool"
    name: str | None = None  # tool name, for role "tool"

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            data["tool_calls"] = [c.to_json() for c in self.tool_calls]
        if self.tool_call_id is not None:
            data["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            data["name"] = self.name
        return data

    @staticmethod
    def tool_result(call: ToolCall, result: Any) -> Message:
        """The tool message answering ``call`` (its result as JSON text)."""
        content = json.dumps(result, default=repr, ensure_ascii=False)
        return Message("tool", content, tool_call_id=call.id, name=call.name)

    @staticmethod
    def from_json(data: dict[str, Any]) -> Message:
        return Message(
            role=str(data["role"]),
            content=str(data.get("content") or ""),
            tool_calls=[
                ToolCall(str(c["id"]), str(c["name"]), c.get("arguments"))
                for c in data.get("tool_calls", [])
            ],
            tool_call_id=data.get("tool_call_id"),
            name=data.get("name"),
        )


@dataclass(slots=True)
class ModelRequest:
    """Everything the model is given for one reasoning iteration."""

    system: str  # the effective system prompt (subagent override or global)
    instructions: str  # the resolved reasoning instructions of this iteration
    messages: list[Message]  # conversation history, hidden outputs already removed
    tools: list[ToolSpec]  # only the tools that are currently available
    params: dict[str, Any] = field(default_factory=dict)  # temperature, max_tokens, ...
    model: str | None = None  # a model id from the agent's model_config, if any
    node: str = ""  # the subagent asking, for logs and scripted models

    def system_content(self) -> str:
        """System prompt and resolved instructions as one system text."""
        parts = [p for p in (self.system.strip(), self.instructions.strip()) if p]
        return "\n\n".join(parts)


@dataclass(slots=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0

    def to_json(self) -> dict[str, int]:
        return {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens}


@dataclass(slots=True)
class ModelResponse:
    """The model's answer: text, tool calls, or (rarely) both."""

    text: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage | None = None
    model: str | None = None  # the model that actually answered (as its provider names it)
    # The configured model (its spec, ``openai:gpt-4o-mini``) that answered when it is not the
    # one asked: a fallback. Budgets charge the call at this model's price.
    answered_by: str | None = None
    # Retries and fallbacks on the way to this answer, for the trace (LLM_STEP.modelEvents).
    events: list[dict[str, Any]] = field(default_factory=list)
    # Why the model stopped, as its provider says it ("stop", "length", "end_turn",
    # "max_tokens", "content_filter", ...): it explains an answer that says nothing.
    stop_reason: str | None = None

    def empty(self) -> bool:
        """Neither text nor a tool call: nothing the user or the engine could act on."""
        return not self.text and not self.tool_calls

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "text": self.text,
            "tool_calls": [c.to_json() for c in self.tool_calls],
        }
        if self.usage is not None:
            data["usage"] = self.usage.to_json()
        return data


class ModelError(RunFailure):
    """A model could not answer (bad key, unknown model, refused, network). Message is for users."""

    # Retries and fallbacks tried before giving up, for the trace; instances assign a tuple.
    events: tuple[dict[str, Any], ...] = ()


class ScriptExhausted(ModelError):
    """The scripted model was asked for a move and had none left."""


TextSink = Callable[[str], None]


@runtime_checkable
class Model(Protocol):
    """Implemented by every provider and by the scripted model."""

    name: str

    async def complete(
        self, request: ModelRequest, *, stream: TextSink | None = None
    ) -> ModelResponse:
        """Answer one reasoning iteration. When ``stream`` is given, text is also fed to it
        as it arrives (tool calls are never streamed)."""
        ...
