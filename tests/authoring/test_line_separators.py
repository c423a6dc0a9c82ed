"""Line numbers of the editor index and the lints when a comment or string holds a character
``str.splitlines`` would break at (\\u2028, \\f, \\x85 ...) but the parser and LSP do not: every
position must name the line the parser and the client count."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentscript.authoring import lints
from agentscript.authoring.index import SymbolKind, build_index, completions
from agentscript.authoring.lints import fix_source, lint_agent

from .helpers import outline_of

ROOT = Path(__file__).resolve().parents[2]
SECURITY_GATE = ROOT / "examples" / "security_gate" / "security_gate.agent"
SEPARATORS = ["\u2028", "\u2029", "\x0c", "\x0b", "\x85", "\x1c", "\x1e"]


def _with_separator(separator: str, text: str | None = None) -> str:
    """The example with the separator in a comment and in a string, both before every
    definition and use of ``email``."""
    text = SECURITY_GATE.read_text() if text is None else text
    text = text.replace("config:\n", f"# a comment{separator}still the comment\nconfig:\n", 1)
    return text.replace("the identity is verified.", f"the{separator}identity is verified.", 1)


def _at(text: str, line: int, start: int, end: int) -> str:
    return text.split("\n")[line][start:end]


@pytest.mark.parametrize("separator", SEPARATORS)
def test_index_definitions_and_references_land_on_the_parsers_lines(separator: str) -> None:
    text = _with_separator(separator)
    index = build_index(text, "gate.agent")
    assert not [d for d in index.diagnostics if d.is_error]
    (email,) = index.named(SymbolKind.VARIABLE, "email")
    assert _at(text, email.definition.line, email.definition.start, email.definition.end) == (
        "email"
    )
    assert text.split("\n")[email.definition.line].strip().startswith("email: mutable string")
    assert len(email.references) == text.count("@variables.email")
    for where in email.references:
        assert _at(text, where.line, where.start, where.end) == "email"
        assert index.at(where.line, where.start) is email


@pytest.mark.parametrize("separator", SEPARATORS)
def test_index_completion_reads_the_line_the_client_means(separator: str) -> None:
    text = _with_separator(separator)
    lines = text.split("\n")
    number = next(i for i, line in enumerate(lines) if "{!@variables.email}" in line)
    column = lines[number].index("@variables.") + len("@variables.")
    labels = {label for label, _detail in completions(build_index(text), number, column)}
    assert labels == {"is_verified", "email"}


BARE = SECURITY_GATE.read_text().replace("then use {!@actions.verify}", "then use @variables.email")


@pytest.mark.parametrize("separator", SEPARATORS)
def test_lint_span_and_fix_name_the_parsers_line(separator: str) -> None:
    text = _with_separator(separator, BARE)
    (found,) = [d for d in lint_agent(outline_of(text), text) if d.code == lints.BARE_REFERENCE]
    line = text.split("\n")[found.span.line - 1]
    assert line[found.span.column - 1 : found.span.end_column - 1] == "@variables.email"
    fixed, count = fix_source(text, "gate.agent")
    assert count == 1
    # Only the flagged line changes; the separators stay where they were, not turned into
    # line breaks.
    assert fixed == text.replace("then use @variables.email", "then use {!@variables.email}")
