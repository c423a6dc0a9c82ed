"""The opt-in http(s):// handler against a local server."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import agentscript
from agentscript.actions import http_json_handler
from agentscript.models.scripted import Move, ScriptedModel

received: list[tuple[str, dict[str, object], str | None]] = []


class Backend(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        received.append((self.path, body, self.headers.get("Authorization")))
        if self.path == "/orders/status":
            payload, status = json.dumps({"status": f"shipped:{body['order_id']}"}).encode(), 200
        elif self.path == "/broken":
            payload, status = b"<html>oops</html>", 200
        else:
            payload, status = b"{}", 503
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def backend() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Backend)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    received.clear()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


AGENT = """\
system:
    instructions: "Be brief."
    messages:
        error: "Something failed."
config:
    developer_name: "http_agent"
variables:
    status: mutable string = ""
start_agent main:
    description: "main"
    reasoning:
        instructions: ->
            | Help.
        actions:
            status: @actions.order_status
                set @variables.status = @outputs.status
            broken: @actions.broken
            down: @actions.down
    actions:
        order_status:
            description: "Order status"
            target: "BASE/orders/status"
            inputs:
                order_id: string
                    is_required: True
            outputs:
                status: string
        broken:
            description: "Answers HTML"
            target: "BASE/broken"
        down:
            description: "Unavailable"
            target: "BASE/down"
"""


def test_http_targets_post_json_and_read_json(tmp_path: Path, backend: str) -> None:
    path = tmp_path / "http.agent"
    path.write_text(AGENT.replace("BASE", backend))
    agent = agentscript.load(path, dialect="agentscript")
    agent.register_handler("http", http_json_handler(headers={"Authorization": "Bearer t0k"}))
    model = ScriptedModel(
        [
            Move(calls=[("status", {"order_id": "42"}), ("broken", {}), ("down", {})]),
            Move(text="Shipped."),
        ]
    )
    session = agent.session(model=model)
    reply = session.send("where is 42?")
    assert reply.error is None
    assert session.variables["status"] == "shipped:42"
    assert received[0] == ("/orders/status", {"order_id": "42"}, "Bearer t0k")
    errors = {
        s["name"]: s["error"]
        for s in reply.trace["planTrace"]["steps"]
        if s["type"] == "ACTION_STEP"
    }
    assert errors["status"] is None
    assert "did not answer with JSON" in errors["broken"]
    assert "HTTP 503" in errors["down"]
    # The header (a secret) is never written into the trace.
    assert "t0k" not in json.dumps(reply.trace)


def test_http_is_not_called_unless_registered(tmp_path: Path, backend: str) -> None:
    path = tmp_path / "http.agent"
    path.write_text(AGENT.replace("BASE", backend))
    agent = agentscript.load(path, dialect="agentscript")
    model = ScriptedModel([Move(calls=[("status", {"order_id": "42"})]), Move(text="Sorry.")])
    reply = agent.session(model=model).send("where is 42?")
    assert received == []
    step = next(s for s in reply.trace["planTrace"]["steps"] if s["type"] == "ACTION_STEP")
    assert "register a handler for 'http://'" in step["error"]
