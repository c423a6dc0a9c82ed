"""A model wrapper that records every answer as a scripted move (``agentscript chat --record``).

The moves use the conversation-file format that :class:`~agentscript.models.scripted.ScriptedModel`
plays back, so a recorded chat replays through ``agentscript run`` without the real model.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from agentscript.actions.registry import NO_MESSAGE
from agentscript.conversation import Conversation, Turn, dump_conversation
from agentscript.models.base import Model, ModelRequest, ModelResponse, TextSink, ToolCall
from agentscript.models.scripted import Move

# Where the text of arguments that were not a JSON object is kept in a recorded move. A
# scripted move needs a mapping, and an argument no tool declares makes the engine refuse the
# call on replay just as it refused the unparsable one, so nothing runs that did not run live.
RAW_ARGUMENTS_KEY = "__raw_arguments__"

ResponseHook = Callable[[ModelRequest, ModelResponse], None]


def move_of(response: ModelResponse) -> Move:
    """The scripted move that makes the scripted model give the same answer.

    Text sent along with tool calls is kept in the move (``say`` beside ``tool``): chat shows
    it, and the replayed trace then holds the same answer.
    """
    if response.tool_calls:
        calls = [(call.name, _arguments(call)) for call in response.tool_calls]
        return Move(text=response.text or None, calls=calls)
    return Move(text=response.text or "")


def _arguments(call: ToolCall) -> dict[str, Any]:
    if call.arguments is None:
        return {RAW_ARGUMENTS_KEY: call.raw_arguments}
    return _plain(call.arguments)


def _plain(value: dict[str, Any]) -> dict[str, Any]:
    # Through JSON, so a recording never holds values YAML cannot write back.
    plain: dict[str, Any] = json.loads(json.dumps(value, default=repr))
    return plain


class RecordingModel:
    """Delegates to ``inner`` and keeps the moves of the current turn.

    ``on_response`` is called after every answer (chat uses it to know where a streamed
    answer ends). A failed call records nothing: there is no move for "the model failed".
    """

    def __init__(self, inner: Model, *, on_response: ResponseHook | None = None) -> None:
        self.inner = inner
        self.name = inner.name
        self.on_response = on_response
        self.moves: list[Move] = []

    def __repr__(self) -> str:
        return f"RecordingModel({self.inner!r})"

    def begin_turn(self) -> None:
        self.moves = []

    async def complete(
        self, request: ModelRequest, *, stream: TextSink | None = None
    ) -> ModelResponse:
        response = await self.inner.complete(request, stream=stream)
        self.moves.append(move_of(response))
        if self.on_response is not None:
            self.on_response(request, response)
        return response


class ConversationRecorder:
    """Builds a conversation file from a live chat: its variables, each turn's moves, and
    the outputs real actions returned, as stubs in call order (so the replay needs no
    backend and every action gives the same answer again)."""

    def __init__(self, variables: dict[str, Any] | None = None) -> None:
        self.variables: dict[str, Any] = dict(variables or {})
        self.turns: list[Turn] = []
        self.stubs: dict[str, list[dict[str, Any]]] = {}

    def add_turn(self, user: str, moves: list[Move], trace: dict[str, Any]) -> None:
        self.turns.append(Turn(user, list(moves)))
        for step in trace.get("planTrace", {}).get("steps", []):
            stub = action_stub(step)
            if stub is not None:
                self.stubs.setdefault(str(step["action"]), []).append(stub)

    def conversation(self) -> Conversation:
        return Conversation(dict(self.variables), dict(self.stubs), list(self.turns))

    def dump(self) -> str:
        return dump_conversation(self.conversation())


def action_stub(step: dict[str, Any]) -> dict[str, Any] | None:
    """The stub that replays one ACTION_STEP of a trace, or None for steps that are not a
    call of a declared action (variable updates by the LLM carry no ``target``)."""
    if step.get("type") != "ACTION_STEP" or "target" not in step or not step.get("action"):
        return None
    if step.get("error") is not None:
        # A stub's error is non-empty text (conversation files refuse an empty one).
        return {"error": str(step["error"]) or NO_MESSAGE}
    return {"outputs": _plain(step.get("output") or {})}
