"""Condition strings: build :class:`Condition`, parse them, list the memory they read.

Parsing uses :func:`agentscript.expr.parse_expression` when that module is present. It is
looked up at call time so this module works before the expression parser lands; until
then references are found by a small scanner over the raw text (strings skipped).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agentscript.diagnostics import Diagnostic, Span
from agentscript.expr import nodes
from agentscript.mantle.condition_grammar import grammar_problems
from agentscript.mantle.model import Condition

KEYWORDS = frozenset({"and", "or", "not", "True", "False", "None", "in", "is", "true", "false"})

_STRING = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")
_DOTTED = re.compile(r"(?<![\w.])[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")

ParseFn = Callable[[str, int, int], tuple[nodes.Expr, list[Diagnostic]]]


def _parser() -> ParseFn | None:
    try:
        module = importlib.import_module("agentscript.expr.parser")
    except ImportError:
        return None
    parse = getattr(module, "parse_expression", None)
    return parse if callable(parse) else None


def make_condition(text: str, file: str, span: Span) -> tuple[Condition, list[Diagnostic]]:
    """A Condition for ``text`` (folded YAML newlines become spaces), parsed when possible."""
    clean = " ".join(text.split())
    condition = Condition(clean, file, span)
    diagnostics: list[Diagnostic] = []
    if not clean:
        diagnostics.append(Diagnostic("mantle-condition", "empty condition", span, file=file))
        return condition, diagnostics
    parse = _parser()
    if parse is None:
        return condition, diagnostics
    try:
        expr, problems = parse(_double_quoted(clean), span.line, span.column)
    except Exception as exc:  # a parser bug must not become a traceback for the user
        diagnostics.append(
            Diagnostic("mantle-condition", f"cannot parse condition: {exc}", span, file=file)
        )
        return condition, diagnostics
    for problem in problems:
        problem.file = file
        problem.code = problem.code or "mantle-condition"
        diagnostics.append(problem)
    if not any(p.is_error for p in problems):
        condition.expr = expr
    diagnostics.extend(grammar_problems(condition))
    return condition, diagnostics


def _double_quoted(text: str) -> str:
    """Mantle accepts 'single-quoted' strings; the shared parser wants double quotes.

    Same length in and out, so spans stay right; a string containing '"' is left alone.
    """

    def swap(match: re.Match[str]) -> str:
        body = match.group(0)
        if body.startswith("'") and '"' not in body:
            return '"' + body[1:-1] + '"'
        return body

    return _STRING.sub(swap, text)


@dataclass(frozen=True, slots=True)
class NameUse:
    """A name a condition reads: ``parts`` like ("session", "project", "x") or ("foo",)."""

    parts: tuple[str, ...]
    span: Span

    @property
    def dotted(self) -> str:
        return ".".join(self.parts)


def names_used(condition: Condition) -> list[NameUse]:
    """Every dotted name the condition reads (memory references and stray bare names)."""
    if condition.expr is not None:
        return list(_names_in_tree(condition.expr))
    scrubbed = _STRING.sub(lambda m: " " * len(m.group(0)), condition.text)
    out: list[NameUse] = []
    for match in _DOTTED.finditer(scrubbed):
        word = match.group(0)
        if word in KEYWORDS:
            continue
        out.append(NameUse(tuple(word.split(".")), condition.span))
    return out


def _names_in_tree(expr: nodes.Expr) -> list[NameUse]:
    path = _dotted_path(expr)
    if path is not None:
        return [] if path[0] in KEYWORDS else [NameUse(path, expr.span)]
    if isinstance(expr, nodes.Call):
        # A call's callee is a function name, not memory; only its arguments read state.
        return [use for arg in expr.args for use in _names_in_tree(arg)]
    out: list[NameUse] = []
    for child in _children(expr):
        out.extend(_names_in_tree(child))
    return out


def _dotted_path(expr: nodes.Expr) -> tuple[str, ...] | None:
    parts: list[str] = []
    node: nodes.Expr = expr
    while isinstance(node, nodes.Member):
        parts.append(node.name)
        node = node.obj
    if isinstance(node, nodes.Name):
        parts.append(node.name)
        return tuple(reversed(parts))
    return None


def _children(expr: nodes.Expr) -> list[nodes.Expr]:
    out: list[nodes.Expr] = []
    for name in getattr(type(expr), "__slots__", ()):
        if name == "span":
            continue
        value: Any = getattr(expr, name, None)
        if isinstance(value, nodes.Expr):
            out.append(value)
        elif isinstance(value, list):
            out.extend(v for v in value if isinstance(v, nodes.Expr))
    return out
