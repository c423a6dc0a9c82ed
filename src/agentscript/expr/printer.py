"""Expression -> canonical source text.

The printer is the inverse of the expression parser: ``parse_expression(print_expr(e))`` yields a
tree with the same shape as ``e``. Output is canonical: one space around binary and comparison
operators, ``, `` between list items and call arguments, ``": "`` in dicts, double-quoted strings,
and only the parentheses that precedence requires (the parser keeps no parentheses in the tree),
except that ``and`` inside ``or`` is always parenthesized: ``(a and b) or c``.

Precedence, lowest to highest (see ``parser.py``): ternary, ``or``, ``and``, ``not``, comparisons,
``+ -``, ``* /``, unary ``+ -`` and spread ``*``, then postfix member/index/call, then atoms.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
from decimal import Decimal

from agentscript.expr.lexer import KEYWORDS
from agentscript.expr.nodes import (
    AtName,
    Binary,
    Call,
    Compare,
    DictExpr,
    EllipsisExpr,
    ErrorExpr,
    Expr,
    Index,
    ListExpr,
    Literal,
    Member,
    Name,
    Spread,
    Ternary,
    Unary,
)

__all__ = ["format_number", "format_string", "precedence", "print_expr"]

# Binding strength of each construct; a child printed where a stronger one is required gets
# parentheses.
TERNARY = 0
OR = 1
AND = 2
NOT = 3
COMPARE = 4
ADD = 5
MUL = 6
UNARY = 7
POSTFIX = 8
ATOM = 9

_BINARY_LEVEL = {"or": OR, "and": AND, "+": ADD, "-": ADD, "*": MUL, "/": MUL, "%": MUL}

# The lexer's escapes; other characters (control characters included) are written as they are.
_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r", "\0": "\\0"}
# A dict key that starts with a bare name is read as the name's string (`{name: 1}`), so any
# other key that would start with one is parenthesized.
_LEADING_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def precedence(expr: Expr) -> int:
    """How tightly ``expr`` binds when printed without parentheses."""
    if isinstance(expr, Ternary):
        return TERNARY
    if isinstance(expr, Binary):
        return _BINARY_LEVEL.get(expr.op, ADD)
    if isinstance(expr, Unary):
        return NOT if expr.op == "not" else UNARY
    if isinstance(expr, Compare):
        return COMPARE
    if isinstance(expr, Spread):
        return UNARY
    if isinstance(expr, Member | Index | Call):
        return POSTFIX
    if isinstance(expr, Literal) and expr.kind == "number" and _is_negative(expr.value):
        # A negative number prints with a leading '-', so it binds like a unary minus.
        return UNARY
    return ATOM


def print_expr(expr: Expr) -> str:
    """The canonical source text of ``expr``."""
    return _print(expr)


def format_string(value: str) -> str:
    """A double-quoted string literal whose parse gives back ``value``."""
    return '"' + "".join(_ESCAPES.get(ch, ch) for ch in value) + '"'


def format_number(value: object) -> str:
    """Ints in decimal; floats in positional notation (``0.0000001``, not ``1e-07``), keeping a
    ``.0`` so a float stays a float."""
    if isinstance(value, bool):  # bool is an int subclass; a number literal is never one
        raise TypeError(f"not a number: {value!r}")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"number literal cannot be {value!r}")
        text = repr(value)
        if "e" in text or "E" in text:
            text = format(Decimal(text), "f")
            if "." not in text:
                text += ".0"
        return text
    if isinstance(value, Decimal):
        text = format(value, "f")
        return text
    raise TypeError(f"not a number: {value!r}")


def _is_negative(value: object) -> bool:
    if isinstance(value, int | float | Decimal) and not isinstance(value, bool):
        return value < 0 or (isinstance(value, float) and math.copysign(1.0, value) < 0)
    return False


def _wrap(expr: Expr, minimum: int) -> str:
    """Print ``expr``, parenthesized when it binds more loosely than ``minimum``."""
    text = _print(expr)
    return f"({text})" if precedence(expr) < minimum else text


def _dict_key(key: Expr) -> str:
    text = _print(key)
    match = _LEADING_NAME.match(text)
    if match and match.group() not in KEYWORDS:
        return f"({text})"
    return text


def _clarify_and(operand: Expr, text: str) -> str:
    if isinstance(operand, Binary) and operand.op == "and" and not text.startswith("("):
        return f"({text})"
    return text


def _print_literal(expr: Literal) -> str:
    kind, value = expr.kind, expr.value
    if kind == "string" and isinstance(value, str):
        return format_string(value)
    if kind == "number":
        return format_number(value)
    if kind == "bool":
        return "True" if value else "False"
    if kind == "none":
        return "None"
    if kind in ("date", "datetime"):
        return _format_date(value)
    raise ValueError(f"cannot print literal of kind {kind!r}: {value!r}")


def _format_date(value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, _dt.datetime):
        text = value.isoformat()
        return text[:-6] + "Z" if text.endswith("+00:00") else text
    if isinstance(value, _dt.date):
        return value.isoformat()
    raise ValueError(f"cannot print date literal {value!r}")


def _print(expr: Expr) -> str:
    if isinstance(expr, Literal):
        return _print_literal(expr)
    if isinstance(expr, EllipsisExpr):
        return "..."
    if isinstance(expr, AtName):
        return "@" + expr.namespace
    if isinstance(expr, Name):
        return expr.name
    if isinstance(expr, Member):
        obj = _wrap(expr.obj, POSTFIX)
        if isinstance(expr.obj, Literal) and expr.obj.kind == "number" and not obj.startswith("("):
            # `1.x` would lex as the float `1.` followed by `x`.
            obj = f"({obj})"
        return f"{obj}.{expr.name}"
    if isinstance(expr, Index):
        return f"{_wrap(expr.obj, POSTFIX)}[{_print(expr.index)}]"
    if isinstance(expr, Call):
        args = ", ".join(_print(a) for a in expr.args)
        return f"{_wrap(expr.func, POSTFIX)}({args})"
    if isinstance(expr, Unary):
        if expr.op == "not":
            return "not " + _wrap(expr.operand, NOT)
        operand = _wrap(expr.operand, UNARY)
        if operand.startswith(("-", "+")):
            # `- -x` rather than `--x`, which reads like a different operator.
            return f"{expr.op} {operand}"
        return expr.op + operand
    if isinstance(expr, Spread):
        return "*" + _wrap(expr.value, UNARY)
    if isinstance(expr, Binary):
        level = _BINARY_LEVEL.get(expr.op, ADD)
        # Left-associative: the right operand needs a strictly stronger binding.
        left, right = _wrap(expr.left, level), _wrap(expr.right, level + 1)
        if expr.op == "or":
            # The one deliberate extra: `(a and b) or c` reads unambiguously, so `and` inside
            # `or` keeps parentheses that precedence alone would drop.
            left, right = _clarify_and(expr.left, left), _clarify_and(expr.right, right)
        return f"{left} {expr.op} {right}"
    if isinstance(expr, Compare):
        # Chains are one node; a comparison nested as an operand needs parentheses.
        parts = [_wrap(expr.left, COMPARE + 1)]
        for op, comparator in zip(expr.ops, expr.comparators, strict=True):
            parts.append(op)
            parts.append(_wrap(comparator, COMPARE + 1))
        return " ".join(parts)
    if isinstance(expr, Ternary):
        body = _wrap(expr.body, OR)
        condition = _wrap(expr.condition, OR)
        orelse = _wrap(expr.orelse, TERNARY)  # right-associative
        return f"{body} if {condition} else {orelse}"
    if isinstance(expr, ListExpr):
        return "[" + ", ".join(_print(i) for i in expr.items) + "]"
    if isinstance(expr, DictExpr):
        pairs = (
            f"{_dict_key(k)}: {_print(v)}" for k, v in zip(expr.keys, expr.values, strict=True)
        )
        return "{" + ", ".join(pairs) + "}"
    if isinstance(expr, ErrorExpr):
        return expr.text
    raise TypeError(f"cannot print expression node {type(expr).__name__}")
