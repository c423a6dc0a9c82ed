"""Anthropic Messages API provider.

The ``anthropic`` SDK is an optional extra, imported only when a model is built.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field
from typing import Any

from agentscript.models.base import (
    Message,
    ModelError,
    ModelRequest,
    ModelResponse,
    TextSink,
    ToolCall,
    ToolSpec,
    Usage,
)
from agentscript.models.openai_provider import PLACEHOLDER_API_KEY, parse_tool_arguments
from agentscript.models.retry import (
    RetriesExhausted,
    RetryPolicy,
    call_with_retries,
    describe_status,
    is_transient_status,
    redact,
    server_message,
)

DEFAULT_MAX_TOKENS = 1024

# The Messages API wants the history to open with a user turn; an agent's history can open
# with its welcome message, so a neutral user turn is put in front of it.
CONVERSATION_START = "(The conversation starts.)"

_RESERVED_PARAMS = frozenset({"model", "messages", "tools", "system", "stream"})
# Error types the API also reports inside a 200 stream; worth another attempt.
_TRANSIENT_ERROR_TYPES = frozenset({"overloaded_error", "api_error", "rate_limit_error"})

_PROVIDER = "Anthropic"
_KEY_ENV = "ANTHROPIC_API_KEY"


def _import_anthropic() -> Any:
    try:
        import anthropic
    except ImportError as exc:
        raise ModelError(
            "The Anthropic provider needs the 'anthropic' package: "
            "pip install 'agentscript[anthropic]'"
        ) from exc
    return anthropic


def _nonempty(value: str | None) -> str | None:
    return value if value and value.strip() else None


class AnthropicModel:
    """A Claude model served through the Anthropic Messages API.

    ``api_key`` and ``base_url`` default to ``ANTHROPIC_API_KEY`` (or ``ANTHROPIC_AUTH_TOKEN``)
    and ``ANTHROPIC_BASE_URL``. ``max_tokens`` defaults to 1024 because the API requires it;
    set it in ``params`` or ``request.params``.
    """

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
        params: dict[str, Any] | None = None,
        retry_base_delay: float = 0.5,
    ) -> None:
        if not model or not model.strip():
            raise ModelError(
                "Anthropic model name is empty: write e.g. anthropic:claude-sonnet-4-5"
            )
        self._sdk = _import_anthropic()
        self.model = model.strip()
        self.name = f"anthropic:{self.model}"
        self.base_url = _nonempty(base_url) or _nonempty(os.environ.get("ANTHROPIC_BASE_URL"))
        self._api_key: str | None = _nonempty(api_key) or _nonempty(os.environ.get(_KEY_ENV))
        self._auth_token: str | None = None
        if self._api_key is None:
            self._auth_token = _nonempty(os.environ.get("ANTHROPIC_AUTH_TOKEN"))
        if self._api_key is None and self._auth_token is None:
            if self.base_url is None:
                raise ModelError(
                    f"No API key for model '{self.name}': set {_KEY_ENV}, "
                    "or pass --base-url (or set ANTHROPIC_BASE_URL) for a local server"
                )
            self._api_key = PLACEHOLDER_API_KEY
        self.timeout = timeout
        self.params: dict[str, Any] = dict(params or {})
        self.retry = RetryPolicy(max_retries=max_retries, base_delay=retry_base_delay)
        self._client: Any = None
        self._client_loop: asyncio.AbstractEventLoop | None = None

    def __repr__(self) -> str:
        where = f", base_url={self.base_url!r}" if self.base_url else ""
        return f"AnthropicModel({self.model!r}{where})"

    def _get_client(self) -> Any:
        # A client's connection pool belongs to the event loop that first used it.
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop:
            credentials = (
                {"api_key": self._api_key} if self._api_key else {"auth_token": self._auth_token}
            )
            self._client = self._sdk.AsyncAnthropic(
                **credentials,
                base_url=self.base_url,
                timeout=self.timeout,
                max_retries=0,  # retried by call_with_retries, with our own backoff
            )
            self._client_loop = loop
        return self._client

    async def complete(
        self, request: ModelRequest, *, stream: TextSink | None = None
    ) -> ModelResponse:
        kwargs = self._build_kwargs(request)
        emitted = _Flag()

        async def attempt() -> ModelResponse:
            client = self._get_client()
            if stream is None:
                message = await client.messages.create(**kwargs)
                return self._parse_message(message)
            return await self._consume_stream(client, kwargs, stream, emitted)

        def transient(exc: BaseException) -> bool:
            # Once text reached the sink, a retry would show it twice.
            return not emitted.set and self._is_transient(exc)

        try:
            return await call_with_retries(attempt, self.retry, transient)
        except ModelError:
            raise
        except RetriesExhausted as exc:
            raise self._model_error(exc.__cause__, attempts=exc.attempts) from None
        except Exception as exc:
            raise self._model_error(exc, attempts=1) from None

    # -- request ---------------------------------------------------------------------------

    def _build_kwargs(self, request: ModelRequest) -> dict[str, Any]:
        params = {**self.params, **request.params}
        clash = sorted(_RESERVED_PARAMS & params.keys())
        if clash:
            raise ModelError(
                f"Model parameter(s) {', '.join(clash)} are set by agentscript and cannot be overridden"
            )
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
        if params:
            # extra_body passes any parameter through, including ones the SDK has no argument for.
            kwargs["extra_body"] = params
        return kwargs

    # -- response --------------------------------------------------------------------------

    def _parse_message(self, message: Any) -> ModelResponse:
        texts: list[str] = []
        calls: list[ToolCall] = []
        for block in getattr(message, "content", None) or []:
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
            text=_nonempty("".join(texts)),
            tool_calls=calls,
            usage=_usage(usage) if usage is not None else None,
            model=getattr(message, "model", None) or self.model,
        )

    async def _consume_stream(
        self, client: Any, kwargs: dict[str, Any], sink: TextSink, emitted: _Flag
    ) -> ModelResponse:
        events = await client.messages.create(**kwargs, stream=True)
        assembler = _StreamAssembler()
        try:
            async for event in events:
                piece = assembler.add(event)
                if piece:
                    emitted.set = True
                    sink(piece)
        finally:
            await events.close()
        return assembler.response(self.model)

    # -- errors ----------------------------------------------------------------------------

    def _is_transient(self, exc: BaseException) -> bool:
        sdk = self._sdk
        if isinstance(exc, sdk.APIConnectionError):  # includes timeouts
            return True
        if isinstance(exc, sdk.APIStatusError):
            if getattr(exc, "type", None) in _TRANSIENT_ERROR_TYPES:
                return True
            return is_transient_status(int(exc.status_code))
        return False

    def _model_error(self, exc: BaseException | None, *, attempts: int) -> ModelError:
        sdk = self._sdk
        tries = f" ({attempts} attempts)" if attempts > 1 else ""
        where = self.base_url or "api.anthropic.com"
        if isinstance(exc, sdk.APITimeoutError):
            text = (
                f"{_PROVIDER} model '{self.model}' did not answer within {self.timeout:g} s{tries}"
            )
        elif isinstance(exc, sdk.APIConnectionError):
            text = f"Could not connect to {where}{tries}. Is the server running and the URL right?"
        elif isinstance(exc, sdk.APIStatusError):
            message = server_message(getattr(exc, "body", None), getattr(exc, "message", ""))
            status = int(exc.status_code)
            if status < 400:  # an error event inside a successful stream
                text = f"{_PROVIDER} reported an error while answering{tries}: {message}"
            else:
                text = describe_status(
                    _PROVIDER,
                    status,
                    message,
                    model=self.model,
                    key_env=_KEY_ENV,
                    attempts=attempts,
                )
        elif isinstance(exc, sdk.APIError):
            message = server_message(getattr(exc, "body", None), getattr(exc, "message", ""))
            text = f"{_PROVIDER} reported an error{tries}: {message}"
        else:
            text = f"{_PROVIDER} request failed: {type(exc).__name__}: {exc}"
        return ModelError(redact(text, [self._api_key, self._auth_token]))


@dataclass(slots=True)
class _Flag:
    set: bool = False


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
            if not message.tool_call_id:
                raise ModelError(
                    f"Tool result for '{message.name or '?'}' has no tool_call_id; "
                    "the Anthropic API needs it to match the call"
                )
            results.append(
                {
                    "type": "tool_result",
                    "tool_use_id": message.tool_call_id,
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
            raise ModelError(
                f"Unsupported message role '{message.role}' (expected user, assistant or tool)"
            )
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
            text=_nonempty("".join(texts)),
            tool_calls=calls,
            usage=usage,
            model=self.model or model,
        )
