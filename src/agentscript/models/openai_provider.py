"""OpenAI Chat Completions provider (also any OpenAI-compatible server: vLLM, Ollama, ...).

Only the protocol lives here; credentials, retries and error wording are in
:mod:`agentscript.models.sdk_provider`.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass, field
from typing import Any

from agentscript.models.base import (
    Message,
    ModelError,
    ModelRequest,
    ModelResponse,
    ToolCall,
    ToolSpec,
    Usage,
)
from agentscript.models.retry import server_message
from agentscript.models.sdk_provider import (
    PLACEHOLDER_API_KEY,
    SdkModel,
    answered_call_id,
    nonempty,
    parse_tool_arguments,
    reason_text,
    unsupported_role,
)

# The shared helpers stay importable from here, where callers have always found them.
__all__ = [
    "PLACEHOLDER_API_KEY",
    "OpenAIModel",
    "build_messages",
    "build_tools",
    "parse_tool_arguments",
]


class OpenAIModel(SdkModel):
    """A chat model served through the OpenAI Chat Completions API.

    ``api_key`` and ``base_url`` default to ``OPENAI_API_KEY`` and ``OPENAI_BASE_URL``. With a
    base URL and no key (a local server), a placeholder key is sent. ``params`` (temperature,
    max_tokens, top_p, ...) are sent with every request; ``request.params`` override them.
    """

    provider = "OpenAI"
    prefix = "openai"
    sdk_module = "openai"
    client_class = "AsyncOpenAI"
    example_model = "gpt-4o-mini"
    key_env = "OPENAI_API_KEY"
    base_url_env = "OPENAI_BASE_URL"
    default_host = "api.openai.com"
    reserved_params = frozenset({"model", "messages", "tools", "stream", "stream_options"})
    _types: tuple[Any, Any] | None = None

    # -- request ---------------------------------------------------------------------------

    def _build_kwargs(self, request: ModelRequest, *, streaming: bool) -> dict[str, Any]:
        """The JSON body of the request: already in wire form, so it is sent as it is."""
        params = self._merged_params(request)
        body: dict[str, Any] = {"model": self.model, "messages": build_messages(request)}
        if request.tools:
            body["tools"] = build_tools(request.tools)
        if streaming:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        # Any server-specific parameter passes through untouched (none can clash: see
        # reserved_params).
        body.update(params)
        return body

    async def _send(self, client: Any, kwargs: dict[str, Any]) -> Any:
        # The client's own POST, not ``chat.completions.create``: the body built above is
        # already wire JSON, and ``create`` walks it against the SDK's TypedDicts before sending
        # (about 1.7 ms of CPU per call, more than the rest of the call, for an unchanged body).
        # Everything else is the SDK's: auth headers, timeouts, the connection pool, status
        # errors, parsing into ChatCompletion and the SSE stream of ChatCompletionChunk.
        completion, stream_class = self._answer_types()
        return await client.post(
            "/chat/completions",
            body=kwargs,
            cast_to=completion,
            stream=bool(kwargs.get("stream")),
            stream_cls=stream_class,
        )

    def _answer_types(self) -> tuple[Any, Any]:
        """(ChatCompletion, AsyncStream[ChatCompletionChunk]) from the SDK, looked up once."""
        if self._types is None:
            chat = importlib.import_module(f"{self.sdk_module}.types.chat")
            self._types = (chat.ChatCompletion, self._sdk.AsyncStream[chat.ChatCompletionChunk])
        return self._types

    # -- response --------------------------------------------------------------------------

    def _parse_response(self, completion: Any) -> ModelResponse:
        choices = getattr(completion, "choices", None) or []
        if not choices:
            # Some gateways answer 200 with the error body of a failed upstream call.
            reported = _error_text(getattr(completion, "error", None))
            if reported:
                raise ModelError(
                    f"{self.provider} model '{self.model}' answered with an error: {reported}"
                )
            raise ModelError(
                f"{self.provider} model '{self.model}' returned no answer (no choices)"
            )
        choice = choices[0]
        message = choice.message
        text = nonempty(getattr(message, "content", None)) or nonempty(
            getattr(message, "refusal", None)
        )
        calls: list[ToolCall] = []
        for index, call in enumerate(getattr(message, "tool_calls", None) or []):
            function = getattr(call, "function", None)
            if function is None:  # a non-function ("custom") tool call: never offered
                continue
            arguments, raw = parse_tool_arguments(getattr(function, "arguments", None))
            calls.append(
                ToolCall(
                    id=getattr(call, "id", None) or f"call_{index}",
                    name=str(getattr(function, "name", "") or ""),
                    arguments=arguments,
                    raw_arguments=raw,
                )
            )
        return ModelResponse(
            text=text,
            tool_calls=calls,
            usage=_usage(getattr(completion, "usage", None)),
            model=getattr(completion, "model", None) or self.model,
            stop_reason=reason_text(getattr(choice, "finish_reason", None)),
        )

    def _stream_assembler(self) -> _StreamAssembler:
        return _StreamAssembler()


def build_messages(request: ModelRequest) -> list[dict[str, Any]]:
    """The request's system text and history in Chat Completions form."""
    out: list[dict[str, Any]] = []
    system = request.system_content()
    if system:
        out.append({"role": "system", "content": system})
    for message in request.messages:
        out.append(_message(message))
    return out


def _message(message: Message) -> dict[str, Any]:
    if message.role == "user":
        return {"role": "user", "content": message.content}
    if message.role == "assistant":
        data: dict[str, Any] = {"role": "assistant", "content": message.content or None}
        if message.tool_calls:
            data["tool_calls"] = [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {"name": call.name, "arguments": _arguments_text(call)},
                }
                for call in message.tool_calls
            ]
        elif data["content"] is None:
            data["content"] = ""
        return data
    if message.role == "tool":
        call_id = answered_call_id(message, "OpenAI")
        return {"role": "tool", "tool_call_id": call_id, "content": message.content}
    raise unsupported_role(message)


def _arguments_text(call: ToolCall) -> str:
    if call.arguments is None:
        # Send back what the model wrote so its next turn sees its own mistake.
        return call.raw_arguments or "{}"
    return json.dumps(call.arguments)


def build_tools(tools: list[ToolSpec]) -> list[dict[str, Any]]:
    """Tool specs as Chat Completions function tools."""
    return [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": tool.parameters,
            },
        }
        for tool in tools
    ]


def _usage(usage: Any) -> Usage | None:
    if usage is None:
        return None
    return Usage(
        input_tokens=int(getattr(usage, "prompt_tokens", 0) or 0),
        output_tokens=int(getattr(usage, "completion_tokens", 0) or 0),
    )


@dataclass(slots=True)
class _PartialCall:
    id: str | None = None
    name: str = ""
    arguments: str = ""


@dataclass(slots=True)
class _StreamAssembler:
    """Builds one response from Chat Completions stream chunks.

    Tool-call fragments are keyed by their ``index``: the id and name come in the first
    fragment of a call, argument text is spread over the following ones, and fragments of
    parallel calls may interleave.
    """

    text: list[str] = field(default_factory=list)
    calls: dict[int, _PartialCall] = field(default_factory=dict)
    usage: Usage | None = None
    model: str | None = None
    stop_reason: str | None = None

    def add(self, chunk: Any) -> str:
        """Take one chunk; return its text delta ("" if none)."""
        self.model = getattr(chunk, "model", None) or self.model
        chunk_usage = _usage(getattr(chunk, "usage", None))
        if chunk_usage is not None:
            self.usage = chunk_usage
        piece = ""
        for choice in getattr(chunk, "choices", None) or []:
            if getattr(choice, "index", 0) not in (0, None):
                continue
            finished = reason_text(getattr(choice, "finish_reason", None))
            self.stop_reason = finished or self.stop_reason
            delta = getattr(choice, "delta", None)
            if delta is None:
                continue
            # A refusal is the model's answer to the user, streamed in its own field.
            content = getattr(delta, "content", None) or getattr(delta, "refusal", None)
            if content:
                piece += content
            for fragment in getattr(delta, "tool_calls", None) or []:
                self._add_fragment(fragment)
        if piece:
            self.text.append(piece)
        return piece

    def _add_fragment(self, fragment: Any) -> None:
        index = getattr(fragment, "index", None)
        fragment_id = getattr(fragment, "id", None)
        if not isinstance(index, int):
            # Some servers omit the index: a new id starts a new call.
            known = {c.id for c in self.calls.values()}
            if not self.calls or (fragment_id and fragment_id not in known):
                index = len(self.calls)
            else:
                index = max(self.calls)
        call = self.calls.setdefault(index, _PartialCall())
        if fragment_id:
            call.id = fragment_id
        function = getattr(fragment, "function", None)
        if function is None:
            return
        name = getattr(function, "name", None)
        if name and name != call.name:
            call.name += name
        arguments = getattr(function, "arguments", None)
        if arguments:
            call.arguments += arguments

    def response(self, model: str) -> ModelResponse:
        calls = []
        for position, index in enumerate(sorted(self.calls)):
            partial = self.calls[index]
            arguments, raw = parse_tool_arguments(partial.arguments)
            calls.append(
                ToolCall(
                    id=partial.id or f"call_{position}",
                    name=partial.name,
                    arguments=arguments,
                    raw_arguments=raw,
                )
            )
        return ModelResponse(
            text=nonempty("".join(self.text)),
            tool_calls=calls,
            usage=self.usage,
            model=self.model or model,
            stop_reason=self.stop_reason,
        )


def _error_text(error: Any) -> str:
    """The message of an ``error`` member of an answer (an object, a mapping or a string), or
    "" when there is none; at most 500 characters, as for an error status."""
    if error is None:
        return ""
    if isinstance(error, str):
        return server_message(error, "")
    message = error.get("message") if isinstance(error, dict) else getattr(error, "message", None)
    return server_message(str(message), "") if message else ""
