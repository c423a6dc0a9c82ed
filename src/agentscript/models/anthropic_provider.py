"""Anthropic Messages API provider.

Only the protocol lives here; credentials, retries and error wording are in
:mod:`agentscript.models.sdk_provider`.
"""

from __future__ import annotations

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
from agentscript.models.sdk_provider import (
    SdkModel,
    answered_call_id,
    nonempty,
    parse_tool_arguments,
    reason_text,
    unsupported_role,
)

DEFAULT_MAX_TOKENS = 1024

# The Messages API wants the history to open with a user turn; an agent's history can open
# with its welcome message, so a neutral user turn is put in front of it.
CONVERSATION_START = "(The conversation starts.)"


class AnthropicModel(SdkModel):
    """A Claude model served through the Anthropic Messages API.

    ``api_key`` and ``base_url`` default to ``ANTHROPIC_API_KEY`` (or ``ANTHROPIC_AUTH_TOKEN``)
    and ``ANTHROPIC_BASE_URL``. ``max_tokens`` defaults to 1024 because the API requires it;
    set it in ``params`` or ``request.params``.
    """

    provider = "Anthropic"
    prefix = "anthropic"
    sdk_module = "anthropic"
    client_class = "AsyncAnthropic"
    example_model = "claude-sonnet-4-5"
    key_env = "ANTHROPIC_API_KEY"
    base_url_env = "ANTHROPIC_BASE_URL"
    auth_token_env = "ANTHROPIC_AUTH_TOKEN"
    default_host = "api.anthropic.com"
    reserved_params = frozenset({"model", "messages", "tools", "system", "stream"})
    # The API also reports these inside a 200 stream; worth another attempt.
    transient_error_types = frozenset({"overloaded_error", "api_error", "rate_limit_error"})

    # -- request ---------------------------------------------------------------------------

    def _build_kwargs(self, request: ModelRequest, *, streaming: bool) -> dict[str, Any]:
        params = self._merged_params(request)
        max_tokens = params.pop("max_tokens", DEFAULT_MAX_TOKENS)
        if "stop" in params:  # the OpenAI spelling, accepted for portable agent params
            stop = params.pop("stop")
            params.setdefault("stop_sequences", [stop] if isinstance(stop, str) else stop)
        kwargs: dict[str, Any] = {
            "model": self.model,
            "max_tokens": max_tokens,
            "messages": build_messages(request.messages),
        }
        system = request.system_content()
        if system:
            kwargs["system"] = system
        if request.tools:
            kwargs["tools"] = build_tools(request.tools)
        if streaming:
            kwargs["stream"] = True
        if params:
            # extra_body passes any parameter through, including ones the SDK has no argument for.
            kwargs["extra_body"] = params
        return kwargs

    async def _send(self, client: Any, kwargs: dict[str, Any]) -> Any:
        return await client.messages.create(**kwargs)

    # -- response --------------------------------------------------------------------------

    def _parse_response(self, message: Any) -> ModelResponse:
        texts: list[str] = []
        calls: list[ToolCall] = []
        content = getattr(message, "content", None)
        if not isinstance(content, list):
            raise ModelError(
                f"{self.provider} model '{self.model}': the answer has no content list; "
                "is the server a Messages API (check --base-url)?"
            )
        for block in content:
            kind = getattr(block, "type", None)
            if kind == "text":
                texts.append(str(getattr(block, "text", "") or ""))
            elif kind == "tool_use":
                arguments, raw = parse_tool_arguments(getattr(block, "input", None))
                calls.append(
                    ToolCall(
                        id=str(getattr(block, "id", "") or f"toolu_{len(calls)}"),
                        name=str(getattr(block, "name", "") or ""),
                        arguments=arguments,
                        raw_arguments=raw,
                    )
                )
        usage = getattr(message, "usage", None)
        return ModelResponse(
            text=nonempty("".join(texts)),
            tool_calls=calls,
            usage=_usage(usage) if usage is not None else None,
            model=getattr(message, "model", None) or self.model,
            stop_reason=reason_text(getattr(message, "stop_reason", None)),
        )

    def _stream_assembler(self) -> _StreamAssembler:
        return _StreamAssembler()


def build_messages(messages: list[Message]) -> list[dict[str, Any]]:
    """History in Messages API form.

    Consecutive tool results become one user message of ``tool_result`` blocks (the API
    wants every result of one assistant turn together); assistant tool calls become
    ``tool_use`` blocks.
    """
    out: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []

    def flush_results() -> None:
        if results:
            out.append({"role": "user", "content": list(results)})
            results.clear()

    for message in messages:
        if message.role == "tool":
            results.append(
                {
                    "type": "tool_result",
                    "tool_use_id": answered_call_id(message, "Anthropic"),
                    "content": message.content,
                }
            )
            continue
        flush_results()
        if message.role == "user":
            out.append({"role": "user", "content": message.content})
        elif message.role == "assistant":
            blocks = _assistant_blocks(message)
            if blocks:  # the API rejects an empty assistant turn
                out.append({"role": "assistant", "content": blocks})
        else:
            raise unsupported_role(message)
    flush_results()
    if not out or out[0]["role"] != "user":
        out.insert(0, {"role": "user", "content": CONVERSATION_START})
    return out


def _assistant_blocks(message: Message) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if message.content.strip():
        blocks.append({"type": "text", "text": message.content})
    for call in message.tool_calls:
        # The API only takes an object; arguments the model garbled are sent as empty.
        blocks.append(
            {"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments or {}}
        )
    return blocks


def build_tools(tools: list[ToolSpec]) -> list[dict[str, Any]]:
    """Tool specs as Messages API tools."""
    return [
        {"name": tool.name, "description": tool.description, "input_schema": tool.parameters}
        for tool in tools
    ]


def _usage(usage: Any) -> Usage:
    return Usage(
        input_tokens=int(getattr(usage, "input_tokens", 0) or 0),
        output_tokens=int(getattr(usage, "output_tokens", 0) or 0),
    )


@dataclass(slots=True)
class _Block:
    kind: str
    id: str = ""
    name: str = ""
    text: str = ""
    json: str = ""
    start_input: object = None


@dataclass(slots=True)
class _StreamAssembler:
    """Builds one response from Messages API stream events, block by block (by ``index``)."""

    blocks: dict[int, _Block] = field(default_factory=dict)
    input_tokens: int = 0
    output_tokens: int = 0
    saw_usage: bool = False
    model: str | None = None
    stop_reason: str | None = None

    def add(self, event: Any) -> str:
        """Take one event; return its text delta ("" if none)."""
        kind = getattr(event, "type", None)
        if kind == "message_start":
            message = getattr(event, "message", None)
            self.model = getattr(message, "model", None) or self.model
            self._take_usage(getattr(message, "usage", None))
        elif kind == "content_block_start":
            block = getattr(event, "content_block", None)
            block_kind = str(getattr(block, "type", ""))
            self.blocks[int(event.index)] = _Block(
                kind=block_kind,
                id=str(getattr(block, "id", "") or ""),
                name=str(getattr(block, "name", "") or ""),
                text=str(getattr(block, "text", "") or "") if block_kind == "text" else "",
                start_input=getattr(block, "input", None),
            )
            return self.blocks[int(event.index)].text
        elif kind == "content_block_delta":
            block = self.blocks.setdefault(int(event.index), _Block(kind="text"))
            delta = event.delta
            delta_kind = getattr(delta, "type", None)
            if delta_kind == "text_delta":
                piece = str(getattr(delta, "text", "") or "")
                block.text += piece
                return piece
            if delta_kind == "input_json_delta":
                block.json += str(getattr(delta, "partial_json", "") or "")
        elif kind == "message_delta":
            self._take_usage(getattr(event, "usage", None))
            reason = reason_text(getattr(getattr(event, "delta", None), "stop_reason", None))
            self.stop_reason = reason or self.stop_reason
        return ""

    def _take_usage(self, usage: Any) -> None:
        if usage is None:
            return
        self.saw_usage = True
        # message_start carries the input count; message_delta the (cumulative) output count.
        self.input_tokens = int(getattr(usage, "input_tokens", None) or self.input_tokens)
        self.output_tokens = int(getattr(usage, "output_tokens", None) or self.output_tokens)

    def response(self, model: str) -> ModelResponse:
        texts: list[str] = []
        calls: list[ToolCall] = []
        for index in sorted(self.blocks):
            block = self.blocks[index]
            if block.kind == "text":
                texts.append(block.text)
            elif block.kind == "tool_use":
                raw: object = block.json if block.json.strip() else block.start_input
                arguments, raw_text = parse_tool_arguments(raw)
                calls.append(
                    ToolCall(
                        id=block.id or f"toolu_{len(calls)}",
                        name=block.name,
                        arguments=arguments,
                        raw_arguments=raw_text,
                    )
                )
        usage = Usage(self.input_tokens, self.output_tokens) if self.saw_usage else None
        return ModelResponse(
            text=nonempty("".join(texts)),
            tool_calls=calls,
            usage=usage,
            model=self.model or model,
            stop_reason=self.stop_reason,
        )
