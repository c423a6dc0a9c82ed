"""Static types of literal-ish expressions, for the (warning-only) type checks."""

from __future__ import annotations

from agentscript.check.outline import AgentOutline
from agentscript.expr.nodes import (
    DictExpr,
    Expr,
    ListExpr,
    Literal,
    Unary,
    reference_path,
)

_NUMERIC = frozenset({"number", "integer", "long", "currency"})
# Types whose values are written as strings (ISO dates, record ids).
_STRINGY = frozenset({"string", "id", "date", "datetime", "time", "timestamp"})


def base_type(declared: str) -> str:
    """``list[number]`` -> ``list``; lower-cased."""
    lowered = declared.lower()
    return "list" if lowered.startswith("list") else lowered


def static_type(expr: Expr, outline: AgentOutline) -> str | None:
    """The type of ``expr`` when it is obvious without running it, else None."""
    if isinstance(expr, Literal):
        if expr.kind == "none":
            return None
        return {"string": "string", "number": "number", "bool": "boolean"}.get(expr.kind, expr.kind)
    if isinstance(expr, Unary) and expr.op in "+-" and isinstance(expr.operand, Literal):
        return "number" if expr.operand.kind == "number" else None
    if isinstance(expr, ListExpr):
        return "list"
    if isinstance(expr, DictExpr):
        return "object"
    path = reference_path(expr)
    if path is not None and len(path) == 2 and path[0] == "variables":
        var = outline.variables.get(path[1])
        return var.type if var is not None else None
    return None


def compatible(declared: str, actual: str) -> bool:
    """Whether a value of type ``actual`` may go where ``declared`` is expected; loose on
    purpose (numeric types together, string-written types together), as these are warnings."""
    d, a = base_type(declared), base_type(actual)
    if d == a or "object" in (d, a):
        return True
    if d in _NUMERIC and a in _NUMERIC:
        return True
    if d in _STRINGY and a in _STRINGY:
        return True
    # A list declared with an element type accepts a list literal and vice versa.
    return d == "list" and a == "list"
