"""The language server's formatting cache, driven in-process through pygls' own dispatch (the
same handlers the stdio server runs), so the test can count how often the formatter runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pygls")

from agentscript.authoring.lsp import create_server
from agentscript.syntax import formatter

ROOT = Path(__file__).resolve().parents[2]
CANONICAL = (ROOT / "examples" / "security_gate" / "security_gate.agent").read_text()
URI = "file:///tmp/agentscript-formatting/gate.agent"


def messy(text: str, spaces: int = 4) -> str:
    """``text`` with extra spaces the formatter removes."""
    return text.replace('developer_name: "', "developer_name:" + " " * spaces + '"')


class InProcess:
    """A server whose bytes out are collected; messages in go through pygls' parsing and
    dispatch exactly as the stdio loop sends them."""

    def __init__(self) -> None:
        self.protocol = create_server().protocol
        self.protocol.set_writer(self, include_headers=False)
        self.sent: list[dict[str, Any]] = []
        self.next_id = 0
        self.request("initialize", {"processId": None, "rootUri": None, "capabilities": {}})
        self.notify("initialized", {})

    def write(self, data: bytes) -> None:
        self.sent.append(json.loads(data))

    def close(self) -> None:
        pass

    def notify(self, method: str, params: Any) -> None:
        body = json.dumps({"jsonrpc": "2.0", "method": method, "params": params})
        self.protocol.handle_message(json.loads(body, object_hook=self.protocol.structure_message))

    def request(self, method: str, params: Any) -> Any:
        self.next_id += 1
        body = json.dumps(
            {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}
        )
        self.protocol.handle_message(json.loads(body, object_hook=self.protocol.structure_message))
        (answer,) = [m for m in self.sent if m.get("id") == self.next_id and "method" not in m]
        assert "error" not in answer, answer
        return answer["result"]

    def open(self, text: str, version: int = 1) -> None:
        item = {"uri": URI, "languageId": "agentscript", "version": version, "text": text}
        self.notify("textDocument/didOpen", {"textDocument": item})

    def change(self, text: str, version: int) -> None:
        self.notify(
            "textDocument/didChange",
            {"textDocument": {"uri": URI, "version": version}, "contentChanges": [{"text": text}]},
        )

    def close_document(self) -> None:
        self.notify("textDocument/didClose", {"textDocument": {"uri": URI}})

    def formatted(self) -> str | None:
        """The document after the formatting edits (None when there are none)."""
        options = {"tabSize": 4, "insertSpaces": True}
        edits = self.request(
            "textDocument/formatting", {"textDocument": {"uri": URI}, "options": options}
        )
        if not edits:
            return None
        (edit,) = edits
        return str(edit["newText"])


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The texts the formatter was run on."""
    seen: list[str] = []
    real = formatter.format_text

    def counting(source: str, path: str | None = None) -> Any:
        seen.append(source)
        return real(source, path)

    monkeypatch.setattr(formatter, "format_text", counting)
    return seen


def test_formatting_an_unchanged_document_again_reuses_the_result(runs: list[str]) -> None:
    server = InProcess()
    server.open(messy(CANONICAL))
    assert server.formatted() == CANONICAL
    assert server.formatted() == CANONICAL
    assert runs == [messy(CANONICAL)]  # formatted once, answered twice


def test_formatting_after_a_change_formats_the_new_text(runs: list[str]) -> None:
    server = InProcess()
    server.open(messy(CANONICAL))
    assert server.formatted() == CANONICAL
    changed = messy(CANONICAL.replace("Security_Gate", "Gate_Two"), spaces=8)
    server.change(changed, 2)
    assert server.formatted() == CANONICAL.replace("Security_Gate", "Gate_Two")
    server.change(CANONICAL, 3)
    assert server.formatted() is None  # already canonical: no edit, not the old one
    assert runs == [messy(CANONICAL), changed, CANONICAL]


def test_closing_a_document_drops_its_formatting(runs: list[str]) -> None:
    server = InProcess()
    server.open(messy(CANONICAL))
    assert server.formatted() == CANONICAL
    server.close_document()
    # Reopened at the same version with other text: a result kept across the close would be
    # the old document's.
    other = messy(CANONICAL.replace("Security_Gate", "Reopened"))
    server.open(other)
    assert server.formatted() == CANONICAL.replace("Security_Gate", "Reopened")
    assert runs == [messy(CANONICAL), other]


def test_a_closed_document_is_not_formatted(runs: list[str]) -> None:
    server = InProcess()
    server.open(messy(CANONICAL))
    assert server.formatted() == CANONICAL
    server.close_document()
    assert server.formatted() is None
    assert runs == [messy(CANONICAL)]
