"""Reading field values out of syntax nodes: kind checks and conversion to Python values."""

from __future__ import annotations

from agentscript.check.schema import Kind
from agentscript.expr.nodes import DictExpr, Expr, ListExpr, Literal, Name, Unary, reference_path
from agentscript.syntax.tree import EmptyValue, Entry, ExprValue, Template, Value

_MISSING = object()


def literal(expr: Expr) -> object:
    """The Python value of a constant expression, or the sentinel ``_MISSING``."""
    if isinstance(expr, Literal):
        return expr.value
    if isinstance(expr, Unary) and expr.op in "+-" and isinstance(expr.operand, Literal):
        value = expr.operand.value
        if isinstance(value, int | float) and not isinstance(value, bool):
            return -value if expr.op == "-" else value
        return _MISSING
    if isinstance(expr, ListExpr):
        items = [literal(item) for item in expr.items]
        return _MISSING if any(i is _MISSING for i in items) else items
    if isinstance(expr, DictExpr):
        out: dict[str, object] = {}
        for key, value in zip(expr.keys, expr.values, strict=True):
            k = key.name if isinstance(key, Name) else literal(key)
            v = literal(value)
            if not isinstance(k, str) or v is _MISSING:
                return _MISSING
            out[k] = v
        return out
    return _MISSING


def python_value(value: Value | None) -> object:
    """A field value as Python: literals as values, templates as text, other expressions as-is."""
    if isinstance(value, ExprValue):
        result = literal(value.expr)
        return value.expr if result is _MISSING else result
    if isinstance(value, Template):
        return template_text(value)
    return None


def template_text(template: Template) -> str:
    """The text of a template as written, interpolations included as ``{!...}``."""
    return "".join(p if isinstance(p, str) else "{!" + p.source + "}" for p in template.parts)


def string_of(entry: Entry | None) -> str | None:
    """The text of a string field (literal or template), else None."""
    if entry is None:
        return None
    value = entry.value
    if isinstance(value, ExprValue) and isinstance(value.expr, Literal):
        return value.expr.value if isinstance(value.expr.value, str) else None
    if isinstance(value, Template):
        return template_text(value)
    return None


def bool_of(entry: Entry | None) -> bool | None:
    """The value of a boolean field written as ``True``/``False``, else None."""
    if entry is None or not isinstance(entry.value, ExprValue):
        return None
    expr = entry.value.expr
    return expr.value if isinstance(expr, Literal) and isinstance(expr.value, bool) else None


def is_none(entry: Entry | None) -> bool:
    """Whether the field is written ``None``."""
    return (
        entry is not None
        and isinstance(entry.value, ExprValue)
        and isinstance(entry.value.expr, Literal)
        and entry.value.expr.kind == "none"
    )


def kind_matches(kind: Kind, value: Value) -> bool:
    """Whether a scalar value has the shape a field of ``kind`` needs."""
    if kind in (Kind.EXPR, Kind.FREE):
        return isinstance(value, ExprValue | Template)
    if isinstance(value, Template):
        return kind in (Kind.STRING, Kind.NULLABLE_STRING, Kind.INSTRUCTIONS)
    if not isinstance(value, ExprValue) or value.to is not None:
        return False
    expr = value.expr
    if kind is Kind.REFERENCE:
        return reference_path(expr) is not None
    if kind is Kind.SEQUENCE:
        return isinstance(expr, ListExpr)
    if not isinstance(expr, Literal):
        if kind is Kind.NUMBER:
            return isinstance(expr, Unary) and isinstance(expr.operand, Literal)
        return False
    if kind in (Kind.STRING, Kind.INSTRUCTIONS):
        return expr.kind == "string"
    if kind is Kind.NULLABLE_STRING:
        return expr.kind in ("string", "none")
    if kind is Kind.BOOL:
        return expr.kind == "bool"
    if kind is Kind.NUMBER:
        return expr.kind == "number"
    return False


def is_empty(value: Value | None) -> bool:
    """Whether the value is the ``empty`` keyword."""
    return isinstance(value, EmptyValue)
