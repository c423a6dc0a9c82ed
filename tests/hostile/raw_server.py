"""A loopback HTTP server whose every POST is answered by a function of the test: for bodies
no well-behaved provider sends (a stream cut mid-answer, HTML instead of JSON) and for
keep-alive streaming, which the shared fake servers do not do."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

Answer = Callable[[BaseHTTPRequestHandler, dict[str, Any]], None]


class RawServer:
    """``answer(handler, body)`` writes each response; HTTP/1.1, so connections stay open."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.bodies: list[dict[str, Any]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                outer.bodies.append(body)
                outer.answer(self, body)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def send(handler: BaseHTTPRequestHandler, status: int, content_type: str, body: bytes) -> None:
    handler.send_response(status)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)
    handler.wfile.flush()


def openai_chunk(text: str | None = None, finish: str | None = None) -> bytes:
    """One Chat Completions stream event carrying ``text``."""
    delta = {"role": "assistant", "content": text} if text is not None else {}
    data = {
        "id": "c1",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "gpt-test",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return f"data: {json.dumps(data)}\n\n".encode()


def openai_completion(text: str, *, usage: dict[str, int] | None = None) -> bytes:
    """A non-streamed chat completion saying ``text`` (with ``usage`` when given)."""
    answer: dict[str, Any] = {
        "id": "c1",
        "object": "chat.completion",
        "created": 0,
        "model": "gpt-test",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
            }
        ],
    }
    if usage is not None:
        answer["usage"] = usage
    return json.dumps(answer).encode()


def openai_stream(text: str) -> bytes:
    """A whole, well-formed streamed answer of ``text``."""
    return openai_chunk(text) + openai_chunk(finish="stop") + b"data: [DONE]\n\n"


# Answers of a broken OpenAI-compatible server, for the CLI and the lean client's tests.
def cut_stream(handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
    """Announces a long body, sends one piece of text, then closes the connection."""
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream")
    handler.send_header("Content-Length", "100000")
    handler.end_headers()
    handler.wfile.write(openai_chunk("Your order is"))
    handler.wfile.flush()
    handler.close_connection = True


def html_page(handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
    send(handler, 200, "text/html", b"<html><body>It works!</body></html>")


def json_string(handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
    send(handler, 200, "application/json", b'"not an answer"')
