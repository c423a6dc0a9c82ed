"""A stand-in model for demos, benchmarks and tests of ``agentscript serve``: no LLM needed.

One rule decides every answer, the same in-process (:class:`StandInModel`, a real
:class:`~agentscript.models.base.Model`) and over HTTP (:class:`StandInServer`, an
OpenAI-compatible ``POST /v1/chat/completions`` on 127.0.0.1, streaming included):

- the last message is the user's and starts with ``/TOOL`` (optionally followed by a JSON object
  of arguments) where TOOL is offered: call TOOL;
- the last message is a tool result: answer ``done: <result>``;
- otherwise answer ``You said: <the user's last message>``.

The HTTP server waits ``delay`` seconds before each answer (a model's latency, for benchmarks).
Run it alone with ``python -m agentscript.server.standin --port 8001 --delay 0.05``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import threading
import time
from collections.abc import Sequence
from typing import Any

from agentscript.models.base import ModelRequest, ModelResponse, TextSink, ToolCall, Usage


def answer(messages: Sequence[tuple[str, str]], tools: Sequence[str]) -> tuple[str | None, Any]:
    """``(text, None)`` or ``(None, (tool, arguments))`` for a conversation given as
    ``(role, content)`` pairs and the names of the offered tools."""
    last_role, last = messages[-1] if messages else ("user", "")
    if last_role == "tool":
        return f"done: {last[:200]}", None
    if last_role == "user" and last.startswith("/"):
        name, _, rest = last[1:].partition(" ")
        if name in tools:
            try:
                arguments = json.loads(rest) if rest.strip() else {}
            except ValueError:
                arguments = {}
            return None, (name, arguments if isinstance(arguments, dict) else {})
    said = next((c for r, c in reversed(messages) if r == "user"), "")
    return f"You said: {said}", None


class StandInModel:
    """The stand-in rule as an in-process model (no network, no delay)."""

    name = "standin"

    def __init__(self) -> None:
        self._calls = 0

    async def complete(
        self, request: ModelRequest, *, stream: TextSink | None = None
    ) -> ModelResponse:
        messages = [(m.role, m.content) for m in request.messages]
        text, call = answer(messages, [t.name for t in request.tools])
        if call is not None:
            self._calls += 1
            name, arguments = call
            return ModelResponse(
                tool_calls=[ToolCall(f"call_{self._calls}", name, arguments)],
                usage=Usage(10, 5),
                model="standin",
            )
        if stream is not None and text:
            for i in range(0, len(text), 8):
                stream(text[i : i + 8])
        return ModelResponse(text=text, usage=Usage(10, 5), model="standin")


class StandInServer:
    """The stand-in rule behind an OpenAI-compatible HTTP endpoint on loopback.

    One asyncio loop in a daemon thread serves every connection (HTTP/1.1, keep-alive): a
    benchmark's model must add nothing but its fixed delay, and a thread per connection adds
    GIL waits (up to the 5 ms switch interval) that a benchmark would charge to the server it
    measures. uvloop is used when it is installed.
    """

    def __init__(self, port: int = 0, delay: float = 0.0) -> None:
        self.delay = delay
        self.requests = 0
        self._loop = _new_loop()
        self._listener = socket.create_server(("127.0.0.1", port), backlog=1024)
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    @property
    def port(self) -> int:
        return int(self._listener.getsockname()[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> StandInServer:
        self._thread.start()

        async def listen() -> asyncio.Server:
            return await asyncio.start_server(self._connection, sock=self._listener)

        self._server = asyncio.run_coroutine_threadsafe(listen(), self._loop).result()
        return self

    def stop(self) -> None:
        if self._server is not None:
            server = self._server

            async def close() -> None:
                server.close()
                if hasattr(server, "close_clients"):
                    server.close_clients()

            asyncio.run_coroutine_threadsafe(close(), self._loop).result(timeout=5)
            self._server = None
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self._loop.close()
        self._listener.close()

    def __enter__(self) -> StandInServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            while True:
                request = await _read_request(reader)
                if request is None:
                    return
                path, body = request
                status, kind, payload = await self._answer(path, body)
                head = (
                    f"HTTP/1.1 {status} {'OK' if status == 200 else 'Not Found'}\r\n"
                    f"Content-Type: {kind}\r\nContent-Length: {len(payload)}\r\n\r\n"
                )
                writer.write(head.encode() + payload)
                await writer.drain()
        except (
            ConnectionError,
            asyncio.IncompleteReadError,
            asyncio.LimitOverrunError,
            ValueError,
        ):
            return
        finally:
            writer.close()

    async def _answer(self, path: str, raw: bytes) -> tuple[int, str, bytes]:
        try:
            body = json.loads(raw or b"{}")
        except (ValueError, RecursionError):
            body = {}
        if not path.rstrip("/").endswith("/chat/completions") or not isinstance(body, dict):
            return 404, "application/json", b'{"error": {"message": "not found"}}'
        text, call = self.reply(body)
        if self.delay:
            await asyncio.sleep(self.delay)
        model = str(body.get("model", "standin"))
        if body.get("stream"):
            payload = "".join(f"data: {json.dumps(c)}\n\n" for c in _chunks(text, call, model))
            return 200, "text/event-stream", (payload + "data: [DONE]\n\n").encode()
        return 200, "application/json", json.dumps(_completion(text, call, model)).encode()

    def reply(self, body: dict[str, Any]) -> tuple[str | None, Any]:
        self.requests += 1
        messages = [
            (str(m.get("role", "")), _content(m.get("content"))) for m in body.get("messages", [])
        ]
        tools = [
            str((t.get("function") or {}).get("name", ""))
            for t in body.get("tools") or []
            if isinstance(t, dict)
        ]
        return answer(messages, tools)


def _content(content: Any) -> str:
    if isinstance(content, list):  # content parts
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def _completion(text: str | None, call: Any, model: str) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if call is not None:
        message["tool_calls"] = [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": call[0], "arguments": json.dumps(call[1])},
            }
        ]
    return {
        "id": "chatcmpl-standin",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if call else "stop",
            }
        ],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
    }


def _chunks(text: str | None, call: Any, model: str) -> list[dict[str, Any]]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            "id": "chatcmpl-standin",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }

    out = [chunk({"role": "assistant", "content": ""})]
    if text:
        out += [chunk({"content": text[i : i + 8]}) for i in range(0, len(text), 8)]
    if call is not None:
        head = {
            "index": 0,
            "id": "call_1",
            "type": "function",
            "function": {"name": call[0], "arguments": json.dumps(call[1])},
        }
        out.append(chunk({"tool_calls": [head]}))
    out.append(chunk({}, "tool_calls" if call else "stop"))
    usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    out.append({**chunk({}), "choices": [], "usage": usage})
    return out


async def _read_request(reader: asyncio.StreamReader) -> tuple[str, bytes] | None:
    """The path and body of the next request on a connection; None when the client closed it."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3:
        raise ValueError("bad request line")
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length":
            length = int(value.strip())
    return parts[1], await reader.readexactly(length) if length else b""


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def main(argv: Sequence[str] | None = None) -> None:  # pragma: no cover - a dev tool
    parser = argparse.ArgumentParser(description="Stand-in OpenAI-compatible model server.")
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--delay", type=float, default=0.0, help="seconds before each answer")
    parser.add_argument("--seconds", type=float, default=3600.0, help="stop after this long")
    args = parser.parse_args(argv)
    server = StandInServer(args.port, args.delay).start()
    print(f"stand-in model at {server.base_url} (delay {args.delay:g} s)", flush=True)
    try:
        time.sleep(args.seconds)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()


if __name__ == "__main__":  # pragma: no cover
    main()
