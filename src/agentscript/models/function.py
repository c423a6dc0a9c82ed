"""A model driven by a function of yours: the test double for "when asked this, answer that".

``FunctionModel(fn)`` calls ``fn(messages, info)`` for every LLM call, where ``messages`` is
the conversation the engine sends (hidden outputs already removed) and ``info`` is a
``FunctionInfo``: the whole ``ModelRequest``, the tools offered, the subagent asking, how many
calls came before, and ``info.call(name, args)`` to build a numbered ``ToolCall``. ``fn`` (sync
or ``async``) returns the answer: a text (``str``), one ``ToolCall``, a list of them, or a
whole ``ModelResponse`` (text *and* tool calls, usage); raising ``ModelError`` is a model
failure. Text answers are streamed in one piece when the caller streams, unless the function
streamed its own chunks with ``info.stream(text)`` (say, part of an answer before a failure,
as a cut connection does; a no-op when the caller does not stream). Nothing is checked
against the offered tools: a call of a hidden or unknown tool reaches the engine, like a
hallucinating model's, so refusals can be tested.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from agentscript.models.base import (
    Message,
    ModelRequest,
    ModelResponse,
    TextSink,
    ToolCall,
    ToolSpec,
)

Answer = str | ToolCall | Sequence[ToolCall] | ModelResponse
AnswerFunction = Callable[[list[Message], "FunctionInfo"], Answer | Awaitable[Answer]]


@dataclass
class FunctionInfo:
    """What the function may look at besides the messages."""

    request: ModelRequest
    calls_before: int  # LLM calls this model answered before this one
    _ids: list[int] = field(default_factory=lambda: [0], repr=False)
    _sink: TextSink | None = field(default=None, repr=False)
    streamed: bool = False  # the function streamed text itself

    def stream(self, text: str) -> None:
        """Stream ``text`` to the caller now (ignored when the caller does not stream)."""
        self.streamed = True
        if self._sink is not None:
            self._sink(text)

    @property
    def tools(self) -> list[ToolSpec]:
        """The tools offered to this call (only the visible ones)."""
        return self.request.tools

    @property
    def tool_names(self) -> list[str]:
        return [tool.name for tool in self.request.tools]

    @property
    def node(self) -> str:
        """The subagent (or Mantle skill) asking."""
        return self.request.node

    def call(self, name: str, arguments: dict[str, Any] | None = None) -> ToolCall:
        """A tool call with a fresh id (``fn_1``, ``fn_2``, ... across the model's life)."""
        self._ids[0] += 1
        return ToolCall(f"fn_{self._ids[0]}", name, dict(arguments or {}))


class FunctionModel:
    """Answers each LLM call with whatever ``function(messages, info)`` returns."""

    def __init__(self, function: AnswerFunction, *, name: str = "function") -> None:
        self.function = function
        self.name = name
        self.requests: list[ModelRequest] = []
        self._ids = [0]

    async def complete(
        self, request: ModelRequest, *, stream: TextSink | None = None
    ) -> ModelResponse:
        info = FunctionInfo(request, len(self.requests), self._ids, stream)
        self.requests.append(request)
        answer = self.function(list(request.messages), info)
        if inspect.isawaitable(answer):
            answer = await answer
        response = as_response(answer, self.name)
        if stream is not None and response.text and not response.tool_calls and not info.streamed:
            stream(response.text)
        return response


def as_response(answer: Any, name: str = "function") -> ModelResponse:
    """A function's answer as a ``ModelResponse``; TypeError for anything else."""
    if isinstance(answer, ModelResponse):
        if answer.model is None:
            answer.model = name
        return answer
    if isinstance(answer, str):
        return ModelResponse(text=answer, model=name)
    if isinstance(answer, ToolCall):
        return ModelResponse(tool_calls=[answer], model=name)
    if isinstance(answer, Sequence) and all(isinstance(c, ToolCall) for c in answer):
        return ModelResponse(tool_calls=list(answer), model=name)
    raise TypeError(
        f"a FunctionModel function returns a str, a ToolCall, a list of ToolCall or a "
        f"ModelResponse, not {type(answer).__name__}"
    )


__all__ = ["Answer", "AnswerFunction", "FunctionInfo", "FunctionModel", "as_response"]
