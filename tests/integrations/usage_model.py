"""A scripted model that reports token usage, for budget and telemetry tests."""

from __future__ import annotations

from collections.abc import Sequence

from agentscript.models.base import ModelRequest, ModelResponse, TextSink, Usage
from agentscript.models.scripted import Move, ScriptedModel


class UsageModel:
    """Plays ``moves`` like :class:`ScriptedModel`; every answer reports the given usage."""

    def __init__(
        self,
        moves: Sequence[Move],
        *,
        input_tokens: int = 100,
        output_tokens: int = 10,
        name: str = "test:tiny",
    ) -> None:
        self.name = name
        self.inner = ScriptedModel(moves)
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        self.calls = 0

    async def complete(
        self, request: ModelRequest, *, stream: TextSink | None = None
    ) -> ModelResponse:
        self.calls += 1
        response = await self.inner.complete(request, stream=stream)
        response.usage = Usage(self.input_tokens, self.output_tokens)
        response.model = self.name
        return response
