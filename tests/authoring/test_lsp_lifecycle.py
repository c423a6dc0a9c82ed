"""The language server's protocol bookkeeping: LSP's lifecycle (initialize once, nothing before
it, nothing after shutdown, exit's code), a header after a body of the wrong length, the
futures pygls keeps per notification, and documents named by two spellings of one URI.

Messages go through pygls' parsing and dispatch in-process (as the stdio loop sends them), and
through ``run_lsp`` itself on in-memory streams where the reader and the exit code matter."""

from __future__ import annotations

import io
import json
import logging
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pygls")

from agentscript.authoring.lsp import create_server, run_lsp

from .test_index_set_variables import AGENT

ROOT = Path(__file__).resolve().parents[2]
SECURITY_GATE = (ROOT / "examples" / "security_gate" / "security_gate.agent").read_text()
NOT_INITIALIZED, INVALID_REQUEST = -32002, -32600


class Wire:
    """A server in-process, not yet initialized; the messages it writes are collected."""

    def __init__(self) -> None:
        self.protocol = create_server().protocol
        self.protocol.set_writer(self, include_headers=False)
        self.sent: list[dict[str, Any]] = []
        self.next_id = 0

    def write(self, data: bytes) -> None:
        self.sent.append(json.loads(data))

    def close(self) -> None:
        pass

    def deliver(self, message: dict[str, Any]) -> None:
        body = json.dumps({"jsonrpc": "2.0", **message})
        self.protocol.handle_message(json.loads(body, object_hook=self.protocol.structure_message))

    def notify(self, method: str, params: Any) -> None:
        self.deliver({"method": method, "params": params})

    def request(self, method: str, params: Any) -> dict[str, Any]:
        """The whole answer (``result`` or ``error``)."""
        self.next_id += 1
        self.deliver({"id": self.next_id, "method": method, "params": params})
        (answer,) = [m for m in self.sent if m.get("id") == self.next_id and "method" not in m]
        return answer

    def initialize(self) -> None:
        answer = self.request(
            "initialize", {"processId": None, "rootUri": None, "capabilities": {}}
        )
        assert "result" in answer, answer
        self.notify("initialized", {})

    def open(self, uri: str, text: str, version: int = 1) -> None:
        item = {"uri": uri, "languageId": "agentscript", "version": version, "text": text}
        self.notify("textDocument/didOpen", {"textDocument": item})

    def hover(self, uri: str, line: int, character: int) -> Any:
        position = {"line": line, "character": character}
        answer = self.request(
            "textDocument/hover", {"textDocument": {"uri": uri}, "position": position}
        )
        return answer["result"]


def hover_position(text: str, needle: str) -> tuple[int, int]:
    for number, line in enumerate(text.split("\n")):
        if needle in line:
            return number, line.index(needle) + len(needle) - 1
    raise AssertionError(needle)


# Lifecycle


def test_a_request_before_initialize_gets_server_not_initialized_and_no_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    wire = Wire()
    with caplog.at_level(logging.WARNING):
        hover = wire.request(
            "textDocument/hover",
            {"textDocument": {"uri": "file:///a.agent"}, "position": {"line": 0, "character": 0}},
        )
        unknown = wire.request("foo/bar", {})
        wire.open("file:///a.agent", SECURITY_GATE)  # a notification before it: dropped
    assert hover["error"]["code"] == NOT_INITIALIZED and "data" not in hover["error"]
    assert unknown["error"]["code"] == NOT_INITIALIZED
    assert not any(r.exc_info for r in caplog.records)
    assert not any(m.get("method") == "textDocument/publishDiagnostics" for m in wire.sent)
    # initialize is still accepted, and the server works after it.
    wire.initialize()
    wire.open("file:///a.agent", SECURITY_GATE)
    assert wire.hover("file:///a.agent", *hover_position(SECURITY_GATE, "is_verified"))


def test_a_second_initialize_is_an_invalid_request() -> None:
    wire = Wire()
    wire.initialize()
    again = wire.request("initialize", {"processId": None, "rootUri": None, "capabilities": {}})
    assert again["error"]["code"] == INVALID_REQUEST


def test_a_request_after_shutdown_is_an_invalid_request() -> None:
    wire = Wire()
    wire.initialize()
    wire.open("file:///a.agent", SECURITY_GATE)
    assert wire.request("shutdown", None) == {"jsonrpc": "2.0", "id": 2, "result": None}
    hover = wire.request(
        "textDocument/hover",
        {"textDocument": {"uri": "file:///a.agent"}, "position": {"line": 0, "character": 0}},
    )
    assert hover["error"]["code"] == INVALID_REQUEST


class Output(io.BytesIO):
    """stdout for ``run_lsp``: pygls closes it on exit; the bytes stay readable."""

    def close(self) -> None:
        pass


def framed(*messages: dict[str, Any] | bytes) -> bytes:
    out = b""
    for message in messages:
        if isinstance(message, bytes):
            out += message
            continue
        body = json.dumps({"jsonrpc": "2.0", **message}).encode()
        out += b"Content-Length: %d\r\n\r\n" % len(body) + body
    return out


def answers(output: Output) -> dict[Any, dict[str, Any]]:
    """Every response written, by id."""
    data, found = output.getvalue(), {}
    while data:
        head, _, data = data.partition(b"\r\n\r\n")
        length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
        message, data = json.loads(data[:length]), data[length:]
        if "method" not in message:
            found[message.get("id")] = message
    return found


INITIALIZE = {"id": 1, "method": "initialize", "params": {"processId": None, "capabilities": {}}}


@pytest.mark.parametrize(("shutdown_first", "code"), [(True, 0), (False, 1)])
def test_exit_ends_with_code_0_after_shutdown_and_1_without(
    shutdown_first: bool, code: int
) -> None:
    messages: list[dict[str, Any] | bytes] = [INITIALIZE, {"method": "initialized", "params": {}}]
    if shutdown_first:
        messages.append({"id": 2, "method": "shutdown"})
    messages.append({"method": "exit"})
    output = Output()
    assert run_lsp(io.BytesIO(framed(*messages)), output) == code


def test_the_end_of_stdin_without_exit_ends_with_code_0() -> None:
    assert run_lsp(io.BytesIO(framed(INITIALIZE)), Output()) == 0


# The reader


def test_a_body_longer_than_its_header_says_does_not_stop_the_next_messages() -> None:
    # `Content-Length: 4` before `[1,2]`: the `]` left over used to begin the next header's
    # line, which pygls then never read as a header, nor any header after it.
    output = Output()
    stdin = framed(
        INITIALIZE,
        b"Content-Length: 4\r\n\r\n[1,2]",
        {"id": 2, "method": "foo/bar", "params": {}},
        {"id": 3, "method": "shutdown"},
    )
    run_lsp(io.BytesIO(stdin), output)
    found = answers(output)
    assert found[None]["error"]["code"] == -32700  # the 4 bytes `[1,2`, not JSON
    assert found[2]["error"]["code"] == -32601  # answered: method not found
    assert found[3]["result"] is None


def test_an_error_to_a_request_whose_id_is_null_carries_a_null_id() -> None:
    # JSON-RPC allows a null id; the answer must carry it. lsprotocol left it out of an error,
    # so the answer to an unknown method with a null id had no id at all.
    output = Output()
    stdin = framed(
        INITIALIZE,
        {"id": None, "method": "foo/bar", "params": {}},
        {"id": 3, "method": "shutdown"},
    )
    run_lsp(io.BytesIO(stdin), output)
    found = answers(output)
    assert found[None]["id"] is None
    assert found[None]["error"]["code"] == -32601
    assert found[3]["result"] is None


# pygls' futures


def test_notifications_leave_no_future_behind() -> None:
    # pygls 2.1.1 kept a future per generator-handled notification (didOpen, didChange,
    # didClose) for good: about 2 KB each, without bound.
    wire = Wire()
    wire.initialize()
    uri = "file:///tmp/agentscript-futures/a.agent"
    for round_ in range(20):
        wire.open(uri, SECURITY_GATE, version=1)
        for version in range(2, 7):
            wire.notify(
                "textDocument/didChange",
                {
                    "textDocument": {"uri": uri, "version": version},
                    "contentChanges": [{"text": SECURITY_GATE[: 40 * version * (round_ + 1)]}],
                },
            )
        wire.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
    assert wire.protocol._request_futures == {}
    wire.open(uri, SECURITY_GATE)
    assert wire.hover(uri, *hover_position(SECURITY_GATE, "is_verified"))
    assert wire.protocol._request_futures == {}


# One document, two spellings of its URI


def test_a_document_reopened_under_the_decoded_uri_is_indexed_afresh() -> None:
    # The workspace keys documents by the percent-decoded URI; the index caches were keyed by
    # the URI as sent, so the decoded spelling kept the closed document's index.
    encoded, decoded = "file:///tmp/a%20b.agent", "file:///tmp/a b.agent"
    wire = Wire()
    wire.initialize()
    wire.open(encoded, AGENT)
    where = hover_position(AGENT, "@variables.n")
    assert "variable name" in wire.hover(decoded, *where)["contents"]["value"]
    wire.notify("textDocument/didClose", {"textDocument": {"uri": encoded}})
    renamed = AGENT.replace("@variables.name", "@variables.nom").replace(
        "    name: mutable", "    nom: mutable"
    )
    wire.open(decoded, renamed, version=1)  # the same version, other text
    assert "variable nom" in wire.hover(decoded, *where)["contents"]["value"]
    assert "variable nom" in wire.hover(encoded, *where)["contents"]["value"]


def test_rename_over_the_protocol_covers_set_variables_slots() -> None:
    wire = Wire()
    wire.initialize()
    uri = "file:///tmp/agentscript-rename/slots.agent"
    wire.open(uri, AGENT)
    line, character = hover_position(AGENT, "@variables.n")
    answer = wire.request(
        "textDocument/rename",
        {
            "textDocument": {"uri": uri},
            "position": {"line": line, "character": character},
            "newName": "full_name",
        },
    )
    edited = {edit["range"]["start"]["line"] for edit in answer["result"]["changes"][uri]}
    lines = AGENT.split("\n")
    assert {i for i, text in enumerate(lines) if "with name=" in text} <= edited
    assert {i for i, text in enumerate(lines) if 'with "name"=' in text} <= edited
