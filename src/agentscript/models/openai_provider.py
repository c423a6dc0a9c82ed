"""OpenAI Chat Completions provider (also any OpenAI-compatible server: vLLM, Ollama, ...).

The ``openai`` SDK is an optional extra, imported only when a model is built.
"""

from __future__ import annotations

import asyncio
import json
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
from agentscript.models.retry import (
    RetriesExhausted,
    RetryPolicy,
    call_with_retries,
    describe_status,
    is_transient_status,
    redact,
    server_message,
)

# Local servers ignore the key, but the SDK (and some servers) insist that one is sent.
PLACEHOLDER_API_KEY = "agentscript-no-key"

# Request fields the provider sets itself; params may not override them.
_RESERVED_PARAMS = frozenset({"model", "messages", "tools", "stream", "stream_options"})

_PROVIDER = "OpenAI"
_KEY_ENV = "OPENAI_API_KEY"


def parse_tool_arguments(raw: object) -> tuple[dict[str, Any] | None, str]:
    """Arguments as sent by a model -> (JSON object or None, raw text).

    Never raises: text that is not a JSON object gives None so the engine can tell the
    model exactly what was wrong. An empty text means "no arguments".
    """
    if isinstance(raw, dict):
        return raw, json.dumps(raw)
    text = "" if raw is None else str(raw)
    if not text.strip():
        return {}, text
    try:
        value = json.loads(text)
    except ValueError:
        return None, text
    return (value, text) if isinstance(value, dict) else (None, text)


def _import_openai() -> Any:
    try:
        import openai
    except ImportError as exc:
        raise ModelError(
            "The OpenAI provider needs the 'openai' package: pip install 'agentscript[openai]'"
        ) from exc
    return openai


def _nonempty(value: str | None) -> str | None:
    return value if value and value.strip() else None


class OpenAIModel:
    """A chat model served through the OpenAI Chat Completions API.

    ``api_key`` and ``base_url`` default to ``OPENAI_API_KEY`` and ``OPENAI_BASE_URL``. With a
    base URL and no key (a local server), a placeholder key is sent. ``params`` (temperature,
    max_tokens, top_p, ...) are sent with every request; ``request.params`` override them.
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
            raise ModelError("OpenAI model name is empty: write e.g. openai:gpt-4o-mini")
        self._sdk = _import_openai()
        self.model = model.strip()
        self.name = f"openai:{self.model}"
        self.base_url = _nonempty(base_url) or _nonempty(os.environ.get("OPENAI_BASE_URL"))
        key = _nonempty(api_key) or _nonempty(os.environ.get(_KEY_ENV))
        if key is None:
            if self.base_url is None:
                raise ModelError(
                    f"No API key for model '{self.name}': set {_KEY_ENV}, "
                    "or pass --base-url (or set OPENAI_BASE_URL) for a local server"
                )
            key = PLACEHOLDER_API_KEY
        self._api_key = key
        self.timeout = timeout
        self.params: dict[str, Any] = dict(params or {})
        self.retry = RetryPolicy(max_retries=max_retries, base_delay=retry_base_delay)
        self._client: Any = None
        self._client_loop: asyncio.AbstractEventLoop | None = None

    def __repr__(self) -> str:
        where = f", base_url={self.base_url!r}" if self.base_url else ""
        return f"OpenAIModel({self.model!r}{where})"

    def _get_client(self) -> Any:
        # An SDK client's connection pool belongs to the event loop that first used it, so a
        # caller that runs each turn under a fresh asyncio.run() gets a fresh client.
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop:
            self._client = self._sdk.AsyncOpenAI(
                api_key=self._api_key,
                base_url=self.base_url,
                timeout=self.timeout,
                max_retries=0,  # retried by call_with_retries, with our own backoff
            )
            self._client_loop = loop
        return self._client

    async def complete(
        self, request: ModelRequest, *, stream: TextSink | None = None
    ) -> ModelResponse:
        kwargs = self._build_kwargs(request, streaming=stream is not None)
        emitted = _Flag()

        async def attempt() -> ModelResponse:
            client = self._get_client()
            if stream is None:
                completion = await client.chat.completions.create(**kwargs)
                return self._parse_completion(completion)
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

    def _build_kwargs(self, request: ModelRequest, *, streaming: bool) -> dict[str, Any]:
        params = {**self.params, **request.params}
        clash = sorted(_RESERVED_PARAMS & params.keys())
        if clash:
            raise ModelError(
                f"Model parameter(s) {', '.join(clash)} are set by agentscript and cannot be overridden"
            )
        kwargs: dict[str, Any] = {"model": self.model, "messages": build_messages(request)}
        if request.tools:
            kwargs["tools"] = build_tools(request.tools)
        if streaming:
            kwargs["stream"] = True
            kwargs["stream_options"] = {"include_usage": True}
        if params:
            # extra_body passes any server-specific parameter through untouched.
            kwargs["extra_body"] = params
        return kwargs

    # -- response --------------------------------------------------------------------------

    def _parse_completion(self, completion: Any) -> ModelResponse:
        choices = getattr(completion, "choices", None) or []
        if not choices:
            raise ModelError(f"{_PROVIDER} model '{self.model}' returned no answer (no choices)")
        message = choices[0].message
        text = _nonempty(getattr(message, "content", None)) or _nonempty(
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
        )

    async def _consume_stream(
        self, client: Any, kwargs: dict[str, Any], sink: TextSink, emitted: _Flag
    ) -> ModelResponse:
        events = await client.chat.completions.create(**kwargs)
        assembler = _StreamAssembler()
        try:
            async for chunk in events:
                piece = assembler.add(chunk)
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
            return is_transient_status(int(exc.status_code))
        return False

    def _model_error(self, exc: BaseException | None, *, attempts: int) -> ModelError:
        sdk = self._sdk
        tries = f" ({attempts} attempts)" if attempts > 1 else ""
        where = self.base_url or "api.openai.com"
        if isinstance(exc, sdk.APITimeoutError):
            text = (
                f"{_PROVIDER} model '{self.model}' did not answer within {self.timeout:g} s{tries}"
            )
        elif isinstance(exc, sdk.APIConnectionError):
            text = f"Could not connect to {where}{tries}. Is the server running and the URL right?"
        elif isinstance(exc, sdk.APIStatusError):
            message = server_message(getattr(exc, "body", None), getattr(exc, "message", ""))
            text = describe_status(
                _PROVIDER,
                int(exc.status_code),
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
        return ModelError(redact(text, [self._api_key]))


@dataclass(slots=True)
class _Flag:
    set: bool = False


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
        if not message.tool_call_id:
            raise ModelError(
                f"Tool result for '{message.name or '?'}' has no tool_call_id; "
                "the OpenAI API needs it to match the call"
            )
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    raise ModelError(
        f"Unsupported message role '{message.role}' (expected user, assistant or tool)"
    )


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
            delta = getattr(choice, "delta", None)
            if delta is None:
                continue
            content = getattr(delta, "content", None)
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
            text=_nonempty("".join(self.text)),
            tool_calls=calls,
            usage=self.usage,
            model=self.model or model,
        )
