"""Expression syntax tree.

Expressions appear in conditions, `set`/`with` values, defaults and `{!...}` interpolations.
The grammar is Python-flavoured (see ``parser.py``); every node carries its source span.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agentscript.diagnostics import Span


@dataclass(slots=True, eq=False)
class Expr:
    span: Span


@dataclass(slots=True, eq=False)
class Literal(Expr):
    """A constant. ``kind`` is one of: string, number, bool, none, date, datetime."""

    value: object
    kind: str


@dataclass(slots=True, eq=False)
class EllipsisExpr(Expr):
    """``...``: the value is left for the LLM to fill (only meaningful as a ``with`` value)."""


@dataclass(slots=True, eq=False)
class AtName(Expr):
    """``@variables``: the root of a namespaced reference."""

    namespace: str


@dataclass(slots=True, eq=False)
class Name(Expr):
    """A bare identifier (valid as a callee like ``len``; elsewhere a diagnostic)."""

    name: str


@dataclass(slots=True, eq=False)
class Member(Expr):
    obj: Expr
    name: str


@dataclass(slots=True, eq=False)
class Index(Expr):
    obj: Expr
    index: Expr


@dataclass(slots=True, eq=False)
class Call(Expr):
    func: Expr
    args: list[Expr] = field(default_factory=list)


@dataclass(slots=True, eq=False)
class Unary(Expr):
    """``op`` is one of ``-``, ``+``, ``not``."""

    op: str
    operand: Expr


@dataclass(slots=True, eq=False)
class Binary(Expr):
    """Arithmetic and boolean operators: ``+ - * / and or``."""

    op: str
    left: Expr
    right: Expr


@dataclass(slots=True, eq=False)
class Compare(Expr):
    """``a < b <= c``: Python-style chained comparison. Ops: == != < <= > >= is, is not, in, not in."""

    left: Expr
    ops: list[str]
    comparators: list[Expr]


@dataclass(slots=True, eq=False)
class Ternary(Expr):
    """``body if condition else orelse``."""

    body: Expr
    condition: Expr
    orelse: Expr


@dataclass(slots=True, eq=False)
class ListExpr(Expr):
    items: list[Expr]


@dataclass(slots=True, eq=False)
class DictExpr(Expr):
    keys: list[Expr]
    values: list[Expr]


@dataclass(slots=True, eq=False)
class Spread(Expr):
    """``*x`` inside a call's arguments or a list."""

    value: Expr


@dataclass(slots=True, eq=False)
class ErrorExpr(Expr):
    """Placeholder left by error recovery; evaluating it is an error."""

    text: str = ""


def reference_path(expr: Expr) -> tuple[str, ...] | None:
    """``@variables.a.b`` -> ("variables", "a", "b"); None if not a plain dotted reference."""
    parts: list[str] = []
    node = expr
    while isinstance(node, Member):
        parts.append(node.name)
        node = node.obj
    if isinstance(node, AtName):
        parts.append(node.namespace)
        return tuple(reversed(parts))
    return None
