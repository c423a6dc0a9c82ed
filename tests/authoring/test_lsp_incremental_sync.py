"""Ranged didChange edits after a character ``str.splitlines`` breaks at (\\u2028, \\f, \\x85
...) but LSP does not: the server's copy of the document must stay the editor's, so that
diagnostics and definitions read the text the user sees. pygls applied such edits on
``splitlines`` lines, so an edit the editor meant for line N landed on another line."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pygls")

from agentscript.authoring.lsp_positions import replace_range

from .test_lsp_formatting_cache import URI, InProcess

ROOT = Path(__file__).resolve().parents[2]
SECURITY_GATE = ROOT / "examples" / "security_gate" / "security_gate.agent"
SEPARATORS = ["\u2028", "\u2029", "\x0c", "\x0b", "\x85", "\x1c", "\x1e"]
EMOJI = "😀" * 3
NAME_LINE = '    email: mutable string = ""'
USE = "| The verified email is {!@variables.email}"


def editor_apply(text: str, start: tuple[int, int], end: tuple[int, int], new: str) -> str:
    """What the editor holds after the change: lines end at \\n, \\r\\n and \\r only, columns
    are UTF-16 units, and a position past a line's end (or past the last line) is clamped."""
    parts = re.split(r"(\r\n|\r|\n)", text)
    lines, breaks = parts[0::2], [*parts[1::2], ""]

    def offset(line: int, character: int) -> int:
        if line >= len(lines):
            return len(text)
        before = sum(len(lines[i]) + len(breaks[i]) for i in range(line))
        units = lines[line].encode("utf-16-le")[: 2 * character]
        return before + len(units.decode("utf-16-le"))

    return text[: offset(*start)] + new + text[offset(*end) :]


def document(separator: str, newline: str) -> str:
    """The example with the separator in comments and a string before the edited lines, and
    emoji before a use of ``email``."""
    text = SECURITY_GATE.read_text()
    text = text.replace("config:\n", f"# a comment{separator}still the comment\nconfig:\n", 1)
    text = text.replace("the identity is verified.", f"the{separator}identity is verified.", 1)
    text = text.replace(NAME_LINE, f"    # {separator}{separator}\n{NAME_LINE}", 1)
    text = text.replace(USE, f"| {EMOJI} {USE[2:]}", 1)
    return text.replace("\n", newline)


def change(server: InProcess, version: int, *changes: dict[str, Any]) -> None:
    server.notify(
        "textDocument/didChange",
        {"textDocument": {"uri": URI, "version": version}, "contentChanges": list(changes)},
    )


def ranged(start: tuple[int, int], end: tuple[int, int], text: str) -> dict[str, Any]:
    return {
        "range": {
            "start": {"line": start[0], "character": start[1]},
            "end": {"line": end[0], "character": end[1]},
        },
        "text": text,
    }


def held(server: InProcess) -> str:
    """The server's copy of the document."""
    return str(server.protocol.workspace.text_documents[URI].source)


def diagnostics(server: InProcess) -> list[dict[str, Any]]:
    (last, *_) = [
        m["params"]["diagnostics"]
        for m in reversed(server.sent)
        if m.get("method") == "textDocument/publishDiagnostics"
    ]
    return list(last)


def utf16(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


@pytest.mark.parametrize(
    ("separator", "newline"),
    [*((s, "\n") for s in SEPARATORS), ("\u2028", "\r\n"), ("\x0c", "\r")],
)
def test_ranged_edits_after_a_line_separator_land_on_the_editors_line(
    separator: str, newline: str
) -> None:
    text = document(separator, newline)
    lines = re.split(r"\r\n|\r|\n", text)
    name = lines.index(NAME_LINE)
    use = next(i for i, line in enumerate(lines) if EMOJI in line)
    server = InProcess()
    server.open(text)
    assert diagnostics(server) == []

    # Rename the definition: every use of @variables.email is now unknown.
    edit = ((name, 4), (name, 9), "mail")
    text = editor_apply(text, *edit)
    change(server, 2, ranged(*edit))
    assert held(server) == text
    unknown = [d for d in diagnostics(server) if d["code"] == "undefined-reference"]
    assert use in {d["range"]["start"]["line"] for d in unknown}

    # Then the use after the emoji, in UTF-16 columns, and an insertion past the end of a
    # line and one past the end of the document, both clamped as the editor clamps them.
    after = lines[use].index("@variables.email") + len("@variables.")
    at = utf16(lines[use][:after])
    comment = next(i for i, line in enumerate(lines) if line.startswith("# a comment"))
    edits = [
        ((use, at), (use, at + len("email")), "mail"),
        ((comment, 10_000), (comment, 10_000), " and more"),
        ((10_000, 0), (10_000, 7), f"{newline}# the end{newline}"),
    ]
    for edit in edits:
        text = editor_apply(text, *edit)
    change(server, 3, *(ranged(*edit) for edit in edits))
    assert held(server) == text
    assert "{!@variables.mail}." in text
    assert not any(m.get("method") == "window/showMessage" for m in server.sent)

    # The diagnostics are those of the editor's text, read afresh.
    fresh = InProcess()
    fresh.open(text)
    assert diagnostics(server) == diagnostics(fresh)
    # And the edited use leads to the edited definition.
    found = server.request(
        "textDocument/definition",
        {"textDocument": {"uri": URI}, "position": {"line": use, "character": at + 1}},
    )
    assert found["range"]["start"] == {"line": name, "character": 4}
    assert found["range"]["end"] == {"line": name, "character": 8}


def test_a_whole_document_change_then_a_ranged_one_in_one_notification() -> None:
    server = InProcess()
    server.open("# old\n")
    text = f"# a{EMOJI}\u2028b\n# c\n"
    change(server, 2, {"text": text}, ranged((1, 2), (1, 3), "d"))
    assert held(server) == f"# a{EMOJI}\u2028b\n# d\n"


def test_replace_range_counts_the_negotiated_encodings_columns() -> None:
    text = "# é😀x\u2028y\r\n# z"
    # UTF-8: "# " is 2 bytes, é 2, the emoji 4; UTF-32 counts code points.
    assert replace_range(text, (0, 8), (0, 9), "X", "utf-8") == "# é😀X\u2028y\r\n# z"
    assert replace_range(text, (0, 4), (0, 5), "X", "utf-32") == "# é😀X\u2028y\r\n# z"
    assert replace_range(text, (0, 5), (0, 6), "X", None) == "# é😀X\u2028y\r\n# z"
    # A range given end first replaces the same text, not a copy of it.
    assert replace_range(text, (1, 3), (1, 2), "w", None) == "# é😀x\u2028y\r\n# w"
