"""Stand-in LLM servers speaking the OpenAI Chat Completions and Anthropic Messages protocols.

Each server is a threaded ``http.server`` on 127.0.0.1 (random port) that answers from a
script of :class:`Reply` objects, one per request, in order, and records every request
(path, headers, JSON body). A request with ``"stream": true`` is answered as server-sent
events, cut into small pieces so the client has to reassemble text and tool arguments.

    with OpenAIServer([Reply(text="Hi")]) as server:
        model = model_at(server, OpenAIModel, "gpt-test", api_key="sk-test")
        assert complete(model, request).text == "Hi"

The helpers at the end are what the provider tests share.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, Self, TypeVar

import pytest

from agentscript.models.base import Model, ModelRequest, ModelResponse, TextSink
from agentscript.models.sdk_provider import SdkModel

M = TypeVar("M", bound=SdkModel)


@dataclass
class FakeCall:
    """A tool call the fake model makes; ``arguments`` is sent verbatim (it may be bad JSON)."""

    name: str
    arguments: str = "{}"
    id: str | None = None

    @staticmethod
    def of(name: str, arguments: dict[str, Any], id: str | None = None) -> FakeCall:
        return FakeCall(name, json.dumps(arguments), id)


@dataclass
class Reply:
    """One scripted answer: text and/or tool calls, or an error ``status`` with ``error``."""

    text: str | None = None
    calls: list[FakeCall] = field(default_factory=list)
    status: int = 200
    error: str = "scripted failure"
    delay: float = 0.0  # seconds to wait before answering (to trigger client timeouts)
    usage: tuple[int, int] = (11, 7)  # (input tokens, output tokens)
    interleave: bool = False  # stream parallel tool-call fragments interleaved
    stream_error: str | None = None  # streaming only: fail with this after the first text piece
    stream_usage: bool = True  # streaming only: honour stream_options.include_usage
    retry_after: str | None = None  # error replies: the Retry-After header to send
    stop_reason: str | None = None  # the finish/stop reason to send instead of the usual one
    refusal: str | None = None  # OpenAI only: the message's refusal text

    def stop(self, usual: str, tools: str) -> str:
        return self.stop_reason or (tools if self.calls else usual)


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


def pieces(text: str, size: int = 3) -> list[str]:
    """``text`` cut into chunks of ``size`` characters (at least one chunk)."""
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


class _FakeServer:
    """Shared machinery: the HTTP server thread, the script and the request log."""

    def __init__(self, script: list[Reply] | None = None) -> None:
        self.script: list[Reply] = list(script or [])
        self.requests: list[Recorded] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._httpd.daemon_threads = True
        # A short poll interval keeps shutdown() (once per test) quick.
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """What a client should use as its base URL."""
        return self.url

    @property
    def last(self) -> Recorded:
        return self.requests[-1]

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping.set()  # wakes any handler sleeping in a scripted delay
        self._httpd.shutdown()
        self._httpd.server_close()

    def _next_reply(self, recorded: Recorded) -> Reply | None:
        with self._lock:
            self.requests.append(recorded)
            return self.script.pop(0) if self.script else None

    # Protocol-specific parts, implemented by the subclasses.
    path = ""

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        raise NotImplementedError

    def render(self, reply: Reply, request: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def render_stream(self, reply: Reply, request: dict[str, Any]) -> list[tuple[str | None, Any]]:
        """SSE events as (event name or None, data: a JSON-able value or a raw string)."""
        raise NotImplementedError

    def stream_error_event(self, message: str) -> tuple[str | None, Any]:
        raise NotImplementedError

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # keep test output quiet
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {"_unparsable": raw.decode("utf-8", "replace")}
                headers = {k.lower(): v for k, v in self.headers.items()}
                recorded = Recorded(self.path, headers, body)
                if self.path.rstrip("/") != server.path:
                    server.requests.append(recorded)
                    self._json(404, server.error_body(404, f"no route {self.path}"))
                    return
                reply = server._next_reply(recorded)
                if reply is None:
                    # A client error, so that a client never retries an exhausted script.
                    self._json(400, server.error_body(400, "fake server: no scripted reply left"))
                    return
                if reply.delay and server._stopping.wait(reply.delay):
                    return
                if reply.status != 200:
                    extra = {"Retry-After": reply.retry_after} if reply.retry_after else {}
                    self._json(reply.status, server.error_body(reply.status, reply.error), extra)
                elif body.get("stream"):
                    self._sse(server.render_stream(reply, body), reply)
                else:
                    self._json(200, server.render(reply, body))

            def _json(
                self, status: int, data: dict[str, Any], extra: dict[str, str] | None = None
            ) -> None:
                payload = json.dumps(data).encode()
                self.send_response(status)
                for name, value in (extra or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def _sse(self, events: list[tuple[str | None, Any]], reply: Reply) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.send_header("Connection", "close")
                self.end_headers()
                sent_text = False
                for name, data in events:
                    self._event(name, data)
                    if reply.stream_error and not sent_text and _carries_text(data):
                        sent_text = True
                        self._event(*server.stream_error_event(reply.stream_error))
                        return

            def _event(self, name: str | None, data: Any) -> None:
                text = data if isinstance(data, str) else json.dumps(data)
                head = f"event: {name}\n" if name else ""
                self.wfile.write(f"{head}data: {text}\n\n".encode())
                self.wfile.flush()

        return Handler


def _carries_text(data: Any) -> bool:
    """Whether an SSE payload delivers a non-empty text delta (either protocol)."""
    if not isinstance(data, dict):
        return False
    delta = data.get("delta")
    if isinstance(delta, dict) and delta.get("text"):
        return True
    return any((choice.get("delta") or {}).get("content") for choice in data.get("choices") or [])


class OpenAIServer(_FakeServer):
    """Speaks ``POST /v1/chat/completions``."""

    path = "/v1/chat/completions"

    @property
    def base_url(self) -> str:
        return f"{self.url}/v1"

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        kind = {401: "invalid_request_error", 429: "rate_limit_exceeded"}.get(
            status, "server_error"
        )
        return {"error": {"message": message, "type": kind, "param": None, "code": None}}

    @staticmethod
    def _call_id(call: FakeCall, index: int) -> str:
        return call.id or f"call_{index}"

    def render(self, reply: Reply, request: dict[str, Any]) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": reply.text}
        if reply.refusal is not None:
            message["refusal"] = reply.refusal
        if reply.calls:
            message["tool_calls"] = [
                {
                    "id": self._call_id(call, i),
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for i, call in enumerate(reply.calls)
            ]
        return {
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "created": 1700000000,
            "model": request.get("model", "fake"),
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": reply.stop("stop", "tool_calls"),
                }
            ],
            "usage": {
                "prompt_tokens": reply.usage[0],
                "completion_tokens": reply.usage[1],
                "total_tokens": sum(reply.usage),
            },
        }

    def render_stream(self, reply: Reply, request: dict[str, Any]) -> list[tuple[str | None, Any]]:
        model = request.get("model", "fake")

        def chunk(delta: dict[str, Any], finish: str | None = None) -> tuple[str | None, Any]:
            return None, {
                "id": "chatcmpl-fake",
                "object": "chat.completion.chunk",
                "created": 1700000000,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }

        events = [chunk({"role": "assistant", "content": ""})]
        events += [chunk({"content": piece}) for piece in pieces(reply.text or "") if piece]
        events += [chunk({"refusal": piece}) for piece in pieces(reply.refusal or "") if piece]
        per_call: list[list[tuple[str | None, Any]]] = []
        for i, call in enumerate(reply.calls):
            head = {
                "index": i,
                "id": self._call_id(call, i),
                "type": "function",
                "function": {"name": call.name, "arguments": ""},
            }
            parts = [chunk({"tool_calls": [head]})]
            parts += [
                chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
                for piece in pieces(call.arguments, 4)
            ]
            per_call.append(parts)
        if reply.interleave:
            longest = max((len(p) for p in per_call), default=0)
            for step in range(longest):
                events += [parts[step] for parts in per_call if step < len(parts)]
        else:
            for parts in per_call:
                events += parts
        events.append(chunk({}, reply.stop("stop", "tool_calls")))
        if reply.stream_usage and (request.get("stream_options") or {}).get("include_usage"):
            events.append(
                (
                    None,
                    {
                        "id": "chatcmpl-fake",
                        "object": "chat.completion.chunk",
                        "created": 1700000000,
                        "model": model,
                        "choices": [],
                        "usage": {
                            "prompt_tokens": reply.usage[0],
                            "completion_tokens": reply.usage[1],
                            "total_tokens": sum(reply.usage),
                        },
                    },
                )
            )
        events.append((None, "[DONE]"))
        return events

    def stream_error_event(self, message: str) -> tuple[str | None, Any]:
        return None, {"error": {"message": message, "type": "server_error"}}


class AnthropicServer(_FakeServer):
    """Speaks ``POST /v1/messages``."""

    path = "/v1/messages"

    _ERROR_TYPES: ClassVar[dict[int, str]] = {
        400: "invalid_request_error",
        401: "authentication_error",
        403: "permission_error",
        404: "not_found_error",
        429: "rate_limit_error",
        529: "overloaded_error",
    }

    def error_body(self, status: int, message: str) -> dict[str, Any]:
        kind = self._ERROR_TYPES.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}}

    @staticmethod
    def _call_id(call: FakeCall, index: int) -> str:
        return call.id or f"toolu_{index}"

    def render(self, reply: Reply, request: dict[str, Any]) -> dict[str, Any]:
        content: list[dict[str, Any]] = []
        if reply.text:
            content.append({"type": "text", "text": reply.text})
        for i, call in enumerate(reply.calls):
            try:
                arguments: Any = json.loads(call.arguments)
            except ValueError:
                arguments = call.arguments
            content.append(
                {
                    "type": "tool_use",
                    "id": self._call_id(call, i),
                    "name": call.name,
                    "input": arguments,
                }
            )
        return {
            "id": "msg_fake",
            "type": "message",
            "role": "assistant",
            "model": request.get("model", "fake"),
            "content": content,
            "stop_reason": reply.stop("end_turn", "tool_use"),
            "stop_sequence": None,
            "usage": {"input_tokens": reply.usage[0], "output_tokens": reply.usage[1]},
        }

    def render_stream(self, reply: Reply, request: dict[str, Any]) -> list[tuple[str | None, Any]]:
        events: list[tuple[str | None, Any]] = [
            (
                "message_start",
                {
                    "type": "message_start",
                    "message": {
                        "id": "msg_fake",
                        "type": "message",
                        "role": "assistant",
                        "model": request.get("model", "fake"),
                        "content": [],
                        "stop_reason": None,
                        "stop_sequence": None,
                        "usage": {"input_tokens": reply.usage[0], "output_tokens": 1},
                    },
                },
            ),
            ("ping", {"type": "ping"}),
        ]
        blocks: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
        if reply.text:
            text_deltas = [{"type": "text_delta", "text": piece} for piece in pieces(reply.text)]
            blocks.append(({"type": "text", "text": ""}, text_deltas))
        for i, call in enumerate(reply.calls):
            block = {
                "type": "tool_use",
                "id": self._call_id(call, i),
                "name": call.name,
                "input": {},
            }
            json_deltas = [
                {"type": "input_json_delta", "partial_json": piece}
                for piece in pieces(call.arguments, 4)
            ]
            blocks.append((block, json_deltas))
        for index, (block, deltas) in enumerate(blocks):
            events += _content_block_events(index, block, deltas)
        events.append(
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {
                        "stop_reason": reply.stop("end_turn", "tool_use"),
                        "stop_sequence": None,
                    },
                    "usage": {"output_tokens": reply.usage[1]},
                },
            )
        )
        events.append(("message_stop", {"type": "message_stop"}))
        return events

    def stream_error_event(self, message: str) -> tuple[str | None, Any]:
        return "error", {"type": "error", "error": {"type": "overloaded_error", "message": message}}


def _content_block_events(
    index: int, block: dict[str, Any], deltas: list[dict[str, Any]]
) -> list[tuple[str | None, Any]]:
    """The start, delta and stop events of one Messages API content block."""
    events: list[tuple[str | None, Any]] = [
        (
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": block},
        )
    ]
    events += [
        ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
        for delta in deltas
    ]
    events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    return events


# -- helpers for the provider tests ----------------------------------------------------------


def clear_env(monkeypatch: pytest.MonkeyPatch, prefix: str) -> None:
    """Hide every environment variable starting with ``prefix`` (the machine's own keys,
    base URLs, profiles, ...) so that only what a test sets is seen."""
    for name in list(os.environ):
        if name.startswith(prefix):
            monkeypatch.delenv(name, raising=False)


def model_at(server: _FakeServer, cls: type[M], name: str, *, api_key: str, **options: Any) -> M:
    """Provider ``cls`` pointed at ``server``, retrying without waiting between attempts."""
    options.setdefault("retry_base_delay", 0.0)
    return cls(name, api_key=api_key, base_url=server.base_url, **options)


def complete(model: Model, request: ModelRequest, stream: TextSink | None = None) -> ModelResponse:
    """One answer under a fresh event loop, as the CLI runs each turn."""
    return asyncio.run(model.complete(request, stream=stream))
