"""Diagnostics as text for people: the ``file:line:col: severity[code]: message`` head, then
the source line and a caret under the span.

``render_diagnostic`` is pure (lines in, text out); ``source_lines`` reads a file for it and
returns None for an unreadable or binary file, whose bytes are never echoed. Colour is ANSI
through click's ``style`` and only when asked for.
"""

from __future__ import annotations

from pathlib import Path

import click

from agentscript.diagnostics import Diagnostic
from agentscript.reading import read_file_bytes

_COLOURS = {"error": "red", "warning": "yellow", "info": "cyan"}


def render_diagnostic(diag: Diagnostic, lines: list[str] | None, color: bool = False) -> str:
    """``diag`` as its head line, plus the source line and a caret when ``lines`` has it."""
    head = diag.format()
    if color:
        head = click.style(head, fg=_COLOURS[diag.severity.value], bold=diag.is_error)
    if not lines or not (1 <= diag.span.line <= len(lines)):
        return head
    raw = lines[diag.span.line - 1]
    source = raw.expandtabs(4)
    # Columns count a tab as one character; the line is shown with tabs expanded, so the caret
    # is placed by the expanded width of what precedes it (a tab-indented file was off by 3 per
    # tab before).
    first = max(diag.span.column - 1, 0)
    start = len(raw[:first].expandtabs(4))
    if diag.span.end_line == diag.span.line:
        last = max(diag.span.end_column - 1, first)
        width = len(raw[:last].expandtabs(4)) - start
    else:
        width = len(source) - start
    caret = " " * start + "^" * max(1, min(width, max(1, len(source) - start)))
    if color:
        caret = click.style(caret, fg="green")
    return f"{head}\n    {source}\n    {caret}"


def source_lines(path: str | Path) -> list[str] | None:
    """The lines of ``path`` for rendering, or None when unreadable or binary."""
    try:
        data = read_file_bytes(path)
    except OSError:
        return None
    if b"\x00" in data[:8192]:
        return None  # a binary file: its bytes are not echoed under the diagnostic
    return data.decode("utf-8-sig", errors="replace").splitlines()


def render_report(results: list[tuple[Path, list[Diagnostic]]], color: bool = False) -> list[str]:
    """Each diagnostic of each checked path rendered, reading each source file once."""
    out: list[str] = []
    for path, diags in results:
        lines = source_lines(path) if path.is_file() else None
        for diag in diags:
            file_lines = lines if diag.file in (None, str(path)) else source_lines(diag.file)
            out.append(render_diagnostic(diag, file_lines, color))
    return out


__all__ = ["render_diagnostic", "render_report", "source_lines"]
