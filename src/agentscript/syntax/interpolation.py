"""``{!expr}`` inside quoted strings used as text (``welcome: "Hi {!@variables.name}"``).

``|`` templates get their interpolations from the parser; a quoted string is one literal, so
its ``{!...}`` parts are split here, for the checker (references) and the engine (rendering).
"""

from __future__ import annotations

from agentscript.expr.nodes import Literal
from agentscript.expr.parser import ExprParser
from agentscript.source import Source
from agentscript.syntax.tree import Interpolation, TemplatePart


def split_interpolations(text: str, line: int, column: int) -> list[TemplatePart]:
    """``"a {!x} b"`` -> ["a ", Interpolation(x), " b"]; a malformed ``{!`` stays text.

    ``line``/``column`` locate the first character of ``text`` so spans point into the file.
    """
    parts: list[TemplatePart] = []
    source = Source(text, first_line=line, first_column=column)
    pos = 0
    while (found := text.find("{!", pos)) != -1:
        parser = ExprParser(source, found + 2)
        expr = parser.parse()
        if not parser.is_op("}") or parser.diagnostics:
            break
        close = parser.tok.start
        if found > pos:
            parts.append(text[pos:found])
        parts.append(
            Interpolation(expr, source.span(found, close + 1), text[found + 2 : close].strip())
        )
        pos = close + 1
    if pos < len(text):
        parts.append(text[pos:])
    return parts


def literal_parts(literal: Literal) -> list[TemplatePart] | None:
    """The parts of a string literal with ``{!``, or None for any other literal."""
    value = literal.value
    if not isinstance(value, str) or "{!" not in value:
        return None
    return split_interpolations(value, literal.span.line, literal.span.column + 1)
