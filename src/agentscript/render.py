"""Diagnostics as text for people: the ``file:line:col: severity[code]: message`` head, then
the source line and a caret under the span.

``render_diagnostic`` is pure (lines in, text out); ``source_lines`` reads a file for it and
returns None for an unreadable or binary file, whose bytes are never echoed. Colour is ANSI
through click's ``style`` and only when asked for. ``terminal_safe`` is for any text from an
agent file that is printed: it makes control characters visible instead of letting them act.
"""

from __future__ import annotations

import re
from pathlib import Path

import click

from agentscript.diagnostics import Diagnostic
from agentscript.reading import read_file_bytes
from agentscript.source import normalise_newlines

# The same set as agentscript.testing.reporters.escaping (C0/C1 controls, DEL, bidi overrides
# and isolates, line/paragraph separators, lone surrogates) plus the two XML non-characters, so
# one pass makes text safe for a terminal and for SVG. Kept here, not imported: importing that
# module loads the whole test runner package, which the authoring commands must not depend on.
_UNSAFE = re.compile(
    "[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2028\u2029\u2066-\u2069"
    "\ud800-\udfff\ufffe\uffff]"
)
_UNSAFE_BUT_NEWLINE = re.compile(
    "[\x00-\x09\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2028\u2029\u2066-\u2069"
    "\ud800-\udfff\ufffe\uffff]"
)
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def visible_char(match: re.Match[str]) -> str:
    """The matched character written visibly: ``\\n``, ``\\xNN`` or ``\\uNNNN``."""
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    code = ord(char)
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def terminal_safe(text: str, keep_newlines: bool = False) -> str:
    """``text`` with every control, bidi and separator character written as a visible
    ``\\xNN``/``\\uNNNN`` (an ESC from an agent file would otherwise drive the terminal, a
    C0 control makes SVG not well-formed). ``keep_newlines`` leaves ``\\n`` for multi-line
    blocks; otherwise the result is one line."""
    return (_UNSAFE_BUT_NEWLINE if keep_newlines else _UNSAFE).sub(visible_char, text)


_COLOURS = {"error": "red", "warning": "yellow", "info": "cyan"}
# A source line longer than this is shown as a window of this many characters around the
# diagnostic's column ("..." marks what is cut): a 30 KB line quoted under each of thousands
# of diagnostics made hundreds of megabytes of output.
MAX_SOURCE_WIDTH = 200
_CONTEXT_BEFORE = 60  # characters of the window before the column


def render_diagnostic(diag: Diagnostic, lines: list[str] | None, color: bool = False) -> str:
    """``diag`` as its head line, plus the source line and a caret when ``lines`` has it."""
    head = terminal_safe(diag.format())
    if color:
        head = click.style(head, fg=_COLOURS[diag.severity.value], bold=diag.is_error)
    if not lines or not (1 <= diag.span.line <= len(lines)):
        return head
    raw = lines[diag.span.line - 1]

    def shown(text: str) -> str:
        return terminal_safe(text.expandtabs(4))

    first = max(diag.span.column - 1, 0)
    last = max(diag.span.end_column - 1, first) if diag.span.end_line == diag.span.line else None
    prefix = suffix = ""
    if len(raw) > MAX_SOURCE_WIDTH:
        begin = max(0, min(first - _CONTEXT_BEFORE, len(raw) - MAX_SOURCE_WIDTH))
        end = begin + MAX_SOURCE_WIDTH
        prefix = "..." if begin > 0 else ""
        suffix = "..." if end < len(raw) else ""
        raw = raw[begin:end]
        first -= begin
        last = None if last is None else max(last - begin, first)
    text = shown(raw)
    # Columns count a tab or a control character as one character; the line is shown with tabs
    # expanded and controls escaped, so the caret is placed by the shown width of what precedes
    # it (a tab-indented file was off by 3 per tab before).
    start = len(shown(raw[:first]))
    width = len(text) - start if last is None else len(shown(raw[:last])) - start
    caret = " " * (len(prefix) + start) + "^" * max(1, min(width, max(1, len(text) - start)))
    if color:
        caret = click.style(caret, fg="green")
    return f"{head}\n    {prefix}{text}{suffix}\n    {caret}"


def source_lines(path: str | Path) -> list[str] | None:
    """The lines of ``path`` for rendering, or None when unreadable or binary."""
    try:
        data = read_file_bytes(path)
    except OSError:
        return None
    if b"\x00" in data[:8192]:
        return None  # a binary file: its bytes are not echoed under the diagnostic
    # Lines split as the parser splits them (LF, CRLF, lone CR): str.splitlines() also breaks
    # at \f, \x1c-\x1e, \x85, \u2028 and \u2029, so one of those in a comment shifted every
    # later line and the diagnostic quoted the wrong one.
    text = normalise_newlines(data.decode("utf-8-sig", errors="replace"))
    if text.endswith("\n"):
        text = text[:-1]
    return text.split("\n") if text else []


def render_report(results: list[tuple[Path, list[Diagnostic]]], color: bool = False) -> list[str]:
    """Each diagnostic of each checked path rendered, reading each source file once."""
    out: list[str] = []
    for path, diags in results:
        lines = source_lines(path) if path.is_file() else None
        # A project folder's diagnostics name its files: each is read and split once per
        # report, not once per diagnostic (50,000 memory entries took 37 s).
        others: dict[str, list[str] | None] = {}
        for diag in diags:
            out.append(render_diagnostic(diag, _lines_of(diag, path, lines, others), color))
    return out


def _lines_of(
    diag: Diagnostic, path: str | Path, lines: list[str] | None, others: dict[str, list[str] | None]
) -> list[str] | None:
    """The source lines ``diag`` points into: ``lines`` (those of ``path``) or another file's,
    read once into ``others``."""
    if diag.file in (None, str(path)):
        return lines
    assert diag.file is not None
    if diag.file not in others:
        others[diag.file] = source_lines(diag.file)
    return others[diag.file]


# Diagnostics about a table of agentscript.toml as a whole (`agentscript.load`): they have no
# line of their own to show, and never a line of the agent's source.
CONFIG_CODES = frozenset({"config-error", "invalid-limits"})


def render_load_errors(
    diagnostics: list[Diagnostic], path: str | Path, color: bool = False
) -> list[str]:
    """The errors of loading the agent at ``path`` (``AgentScriptError.diagnostics``), each
    with its source line: the agent's, or the other file's it names; a configuration error
    (``CONFIG_CODES``) as its head line alone."""
    agent_lines = source_lines(path) if Path(path).is_file() else None
    others: dict[str, list[str] | None] = {}  # each other file read once
    out: list[str] = []
    for diag in diagnostics:
        if not diag.is_error:
            continue
        lines = None if diag.code in CONFIG_CODES else _lines_of(diag, path, agent_lines, others)
        out.append(render_diagnostic(diag, lines, color))
    return out


__all__ = [
    "CONFIG_CODES",
    "render_diagnostic",
    "render_load_errors",
    "render_report",
    "source_lines",
    "terminal_safe",
]
