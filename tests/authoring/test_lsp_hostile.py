"""`agentscript lsp` against hostile requests: unopened URIs (a FIFO), non-ASCII columns,
invalid params and very large documents. A raw JSON-RPC driver, so the tests can send what a
well-behaved client library would refuse to, and read the server's stderr."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

import pytest

pytest.importorskip("pygls")

ROOT = Path(__file__).resolve().parents[2]
SECURITY_GATE = ROOT / "examples" / "security_gate" / "security_gate.agent"
URI = "file:///tmp/agentscript-hostile/emoji.agent"
# Six: the 6-unit shift they cause is longer than the name after them.
EMOJI = "😀" * 6
# Generous: each answer takes milliseconds; only a blocked server gets near it.
BOUND = 30.0


class RawServer:
    def __init__(self, stderr: IO[bytes]) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", "from agentscript.cli import main; main()", "lsp"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
        )
        self.messages: queue.Queue[Any] = queue.Queue()
        self.next_id = 0
        threading.Thread(target=self._read, daemon=True).start()
        self.request("initialize", {"processId": None, "rootUri": None, "capabilities": {}})
        self.notify("initialized", {})

    def _read(self) -> None:
        assert self.process.stdout is not None
        stream = self.process.stdout
        while True:
            length = 0
            while (line := stream.readline().strip()) != b"":
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            if length == 0:
                self.messages.put(None)
                return
            self.messages.put(json.loads(stream.read(length)))

    def send(self, message: dict[str, Any]) -> None:
        self.send_body(json.dumps({"jsonrpc": "2.0", **message}).encode())

    def send_body(self, body: bytes) -> None:
        """``body`` under a valid header, whatever it holds."""
        assert self.process.stdin is not None
        self.process.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        self.process.stdin.flush()

    def error_without_request(self) -> dict[str, Any]:
        """The next error response to no request of ours (its id null or not one we sent)."""
        deadline = time.monotonic() + BOUND
        while True:
            message = self.messages.get(timeout=max(deadline - time.monotonic(), 0.01))
            assert message is not None, "the server exited"
            if "error" in message and "method" not in message:
                return message

    def notify(self, method: str, params: Any) -> None:
        self.send({"method": method, "params": params})

    def request(self, method: str, params: Any) -> dict[str, Any]:
        self.next_id += 1
        wanted = self.next_id
        self.send({"id": wanted, "method": method, "params": params})
        deadline = time.monotonic() + BOUND
        while True:
            message = self.messages.get(timeout=max(deadline - time.monotonic(), 0.01))
            assert message is not None, "the server exited"
            if message.get("id") == wanted and "method" not in message:
                return message

    def diagnostics(self, uri: str) -> list[dict[str, Any]]:
        deadline = time.monotonic() + BOUND
        while True:
            message = self.messages.get(timeout=max(deadline - time.monotonic(), 0.01))
            assert message is not None, "the server exited"
            params = message.get("params") or {}
            if message.get("method") == "textDocument/publishDiagnostics" and params["uri"] == uri:
                return list(params["diagnostics"])

    def open(self, text: str, uri: str = URI) -> list[dict[str, Any]]:
        self.notify(
            "textDocument/didOpen",
            {"textDocument": {"uri": uri, "languageId": "agentscript", "version": 1, "text": text}},
        )
        return self.diagnostics(uri)

    def close(self) -> None:
        try:
            self.request("shutdown", None)
            self.notify("exit", None)
            self.process.wait(timeout=10)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()


@pytest.fixture
def server(tmp_path: Path) -> Any:
    with (tmp_path / "stderr.txt").open("wb") as stderr:
        running = RawServer(stderr)
        try:
            yield running
        finally:
            running.close()


def stderr_of(tmp_path: Path) -> str:
    return (tmp_path / "stderr.txt").read_text(errors="replace")


def td(uri: str = URI) -> dict[str, str]:
    return {"uri": uri}


def utf16(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def utf16_slice(line: str, start: int, end: int) -> str:
    return line.encode("utf-16-le")[2 * start : 2 * end].decode("utf-16-le")


def emoji_text() -> tuple[str, int, str]:
    """The example with emoji before a reference to ``email`` on one line."""
    text = SECURITY_GATE.read_text().replace(
        "| The verified email is {!@variables.email}",
        f"| {EMOJI} The verified email is {{!@variables.email}}",
    )
    lines = text.split("\n")
    number = next(i for i, line in enumerate(lines) if EMOJI in line)
    return text, number, lines[number]


def apply_edits(text: str, edits: list[dict[str, Any]]) -> str:
    """Apply LSP edits (UTF-16 columns) the way an editor does."""
    lines = text.split("\n")
    ordered = sorted(
        edits,
        key=lambda e: (e["range"]["start"]["line"], e["range"]["start"]["character"]),
        reverse=True,
    )
    for edit in ordered:
        start, end = edit["range"]["start"], edit["range"]["end"]
        assert start["line"] == end["line"]
        units = lines[start["line"]].encode("utf-16-le")
        lines[start["line"]] = (
            units[: 2 * start["character"]].decode("utf-16-le")
            + edit["newText"]
            + units[2 * end["character"] :].decode("utf-16-le")
        )
    return "\n".join(lines)


def test_lsp_hostile_unopened_fifo_uri_gets_empty_answers_without_blocking(
    server: RawServer, tmp_path: Path
) -> None:
    fifo = tmp_path / "pipe.agent"
    os.mkfifo(fifo)
    secret = tmp_path / "secret.agent"
    secret.write_text(SECURITY_GATE.read_text())
    position = {"line": 0, "character": 0}
    for uri in (fifo.as_uri(), secret.as_uri()):
        started = time.monotonic()
        answers = {
            "hover": server.request(
                "textDocument/hover", {"textDocument": td(uri), "position": position}
            ),
            "symbols": server.request("textDocument/documentSymbol", {"textDocument": td(uri)}),
            "formatting": server.request(
                "textDocument/formatting",
                {"textDocument": td(uri), "options": {"tabSize": 4, "insertSpaces": True}},
            ),
            "rename": server.request(
                "textDocument/rename",
                {"textDocument": td(uri), "position": position, "newName": "x"},
            ),
        }
        assert time.monotonic() - started < BOUND
        # Nothing read from disk: a readable file the editor never opened is not served either.
        assert {name: a.get("result") for name, a in answers.items()} == {
            "hover": None,
            "symbols": [],
            "formatting": [],
            "rename": None,
        }
    # And the server still serves the documents that are open.
    server.open(SECURITY_GATE.read_text())
    symbols = server.request("textDocument/documentSymbol", {"textDocument": td()})
    assert {"is_verified", "email"} <= {s["name"] for s in symbols["result"]}


def test_lsp_hostile_hover_and_completion_after_emoji_use_utf16_columns(
    server: RawServer,
) -> None:
    text, number, line = emoji_text()
    server.open(text)
    inside = utf16(line[: line.index("email}") + 1])
    hover = server.request(
        "textDocument/hover",
        {"textDocument": td(), "position": {"line": number, "character": inside}},
    )
    assert "variable email" in hover["result"]["contents"]["value"]

    typing = f"| {EMOJI} @variables. and more"
    server.notify(
        "textDocument/didChange",
        {
            "textDocument": {"uri": URI, "version": 2},
            "contentChanges": [{"text": text.replace(line.strip(), typing)}],
        },
    )
    server.diagnostics(URI)
    after_dot = utf16(line[: line.index("|")] + typing[: typing.index(". and")] + ".")
    completion = server.request(
        "textDocument/completion",
        {"textDocument": td(), "position": {"line": number, "character": after_dot}},
    )
    assert {i["label"] for i in completion["result"]["items"]} == {"is_verified", "email"}


def test_lsp_hostile_rename_after_emoji_edits_exactly_the_name(server: RawServer) -> None:
    text, number, line = emoji_text()
    server.open(text)
    at = {"line": number, "character": utf16(line[: line.index("email}") + 2])}
    references = server.request(
        "textDocument/references",
        {"textDocument": td(), "position": at, "context": {"includeDeclaration": False}},
    )
    on_line = [r["range"] for r in references["result"] if r["range"]["start"]["line"] == number]
    assert [utf16_slice(line, r["start"]["character"], r["end"]["character"]) for r in on_line] == [
        "email"
    ]
    renamed = server.request(
        "textDocument/rename", {"textDocument": td(), "position": at, "newName": "address"}
    )
    edited = apply_edits(text, renamed["result"]["changes"][URI])
    assert edited == text.replace("@variables.email", "@variables.address").replace(
        "    email: mutable", "    address: mutable"
    )


def test_lsp_hostile_diagnostic_after_emoji_covers_the_utf16_range(server: RawServer) -> None:
    text = SECURITY_GATE.read_text().replace(
        "then use {!@actions.verify}", f"then {EMOJI} use @variables.email"
    )
    lines = text.split("\n")
    (diagnostic,) = server.open(text)
    assert diagnostic["code"] == "bare-reference-in-prose"
    where = diagnostic["range"]
    line = lines[where["start"]["line"]]
    flagged = utf16_slice(line, where["start"]["character"], where["end"]["character"])
    assert flagged.startswith("@variables.email")


def test_lsp_hostile_invalid_params_get_an_error_response_and_no_traceback(
    server: RawServer, tmp_path: Path
) -> None:
    server.open(SECURITY_GATE.read_text())
    answer = server.request(
        "textDocument/hover",
        {"textDocument": td(), "position": {"line": -1, "character": -1}},
    )
    assert answer["error"]["code"] == -32602
    # A change to a document never opened, and a ranged change with a negative position.
    server.notify(
        "textDocument/didChange",
        {
            "textDocument": {"uri": "file:///never/opened.agent", "version": 2},
            "contentChanges": [{"text": "x"}],
        },
    )
    bad_range = {"start": {"line": -1, "character": 0}, "end": {"line": 0, "character": 0}}
    server.notify(
        "textDocument/didChange",
        {
            "textDocument": {"uri": URI, "version": 2},
            "contentChanges": [{"range": bad_range, "text": "x"}],
        },
    )
    symbols = server.request("textDocument/documentSymbol", {"textDocument": td()})
    assert {"is_verified", "email"} <= {s["name"] for s in symbols["result"]}
    assert "Traceback" not in stderr_of(tmp_path)


def test_lsp_hostile_document_symbols_for_thirty_thousand_variables_answer_every_one(
    server: RawServer,
) -> None:
    # Each top-level symbol used to scan every symbol for its children: 17 s a request here,
    # about 2 s grouped in one pass (not asserted: the request's own timeout bounds it).
    example = SECURITY_GATE.read_text()
    many = "".join(f'    v{i}: mutable string = ""\n' for i in range(30_000))
    server.open("variables:\n" + many + example.split("variables:\n", 1)[1])
    symbols = server.request("textDocument/documentSymbol", {"textDocument": td()})
    assert len(symbols["result"]) > 30_000


def test_lsp_hostile_definition_and_references_after_line_separators_in_a_comment(
    server: RawServer,
) -> None:
    # The client and the parser do not end lines at \u2028 or \f: neither may the index.
    text = SECURITY_GATE.read_text().replace(
        "config:\n", "# a\u2028comment\x0cwith separators\nconfig:\n", 1
    )
    assert server.open(text, URI) == []
    lines = text.split("\n")
    use = next(i for i, line in enumerate(lines) if "{!@variables.email}" in line)
    at = utf16(lines[use][: lines[use].index("@variables.email") + len("@variables.")])
    position = {"line": use, "character": at}
    found = server.request("textDocument/definition", {"textDocument": td(), "position": position})
    where = found["result"]["range"]
    assert lines[where["start"]["line"]].strip().startswith("email: mutable string")
    refs = server.request(
        "textDocument/references",
        {"textDocument": td(), "position": position, "context": {"includeDeclaration": True}},
    )
    assert len(refs["result"]) == 1 + text.count("@variables.email")
    for ref in refs["result"]:
        start, end = ref["range"]["start"], ref["range"]["end"]
        assert utf16_slice(lines[start["line"]], start["character"], end["character"]) == "email"


def test_lsp_hostile_body_that_is_not_json_gets_a_parse_error_and_no_traceback(
    server: RawServer, tmp_path: Path
) -> None:
    server.send_body(b"hello")
    answer = server.error_without_request()
    assert answer["id"] is None and answer["error"]["code"] == -32700
    # Bytes that are not text at all, and JSON that is not a JSON-RPC message.
    server.send_body(b"\xff\x00\xfe")
    assert server.error_without_request()["error"]["code"] == -32700
    server.send_body(b'{"jsonrpc": "2.0", "id": 41}')
    assert server.error_without_request() == {
        "jsonrpc": "2.0",
        "id": 41,
        "error": {"code": -32600, "message": "invalid request: not a JSON-RPC message"},
    }
    server.send_body(b"[1, 2]")
    assert server.error_without_request()["error"]["code"] == -32600
    # The next valid messages are served as if nothing had happened.
    server.open(SECURITY_GATE.read_text())
    symbols = server.request("textDocument/documentSymbol", {"textDocument": td()})
    assert {"is_verified", "email"} <= {s["name"] for s in symbols["result"]}
    stderr = stderr_of(tmp_path)
    assert "Traceback" not in stderr
    assert stderr.count("not JSON") == 2  # one line for each body that was not JSON
