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
import json
import socket
import threading
import time
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
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


class _Listener(ThreadingHTTPServer):
    # The default backlog (5) resets connections when a benchmark's clients open many at once.
    request_queue_size = 1024


class StandInServer:
    """The stand-in rule behind an OpenAI-compatible HTTP endpoint on loopback."""

    def __init__(self, port: int = 0, delay: float = 0.0) -> None:
        self.delay = delay
        self.requests = 0
        self._httpd = _Listener(("127.0.0.1", port), _handler(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> StandInServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> StandInServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

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


def _handler(server: StandInServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self) -> None:
            super().setup()
            # Headers and body leave in two writes: without this, Nagle's algorithm and the
            # client's delayed ACK add ~40 ms to every answer.
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except ValueError:
                body = {}
            if not self.path.rstrip("/").endswith("/chat/completions") or not isinstance(
                body, dict
            ):
                self._send(404, "application/json", b'{"error": {"message": "not found"}}')
                return
            text, call = server.reply(body)
            if server.delay:
                time.sleep(server.delay)
            model = str(body.get("model", "standin"))
            if body.get("stream"):
                payload = "".join(f"data: {json.dumps(c)}\n\n" for c in _chunks(text, call, model))
                self._send(200, "text/event-stream", (payload + "data: [DONE]\n\n").encode())
            else:
                self._send(
                    200, "application/json", json.dumps(_completion(text, call, model)).encode()
                )

        def _send(self, status: int, kind: str, payload: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    return Handler


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
