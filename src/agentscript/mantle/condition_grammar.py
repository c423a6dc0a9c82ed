"""The documented Mantle condition grammar, enforced at load time.

Mantle conditions (``requires``, ``if:``, ``complete_when``, ``next:``, ``utter ... when:``,
response ``condition``, tool ``requires``) are one-line expressions: memory references
``session.<namespace>.<entry>``; literals (quoted strings, numbers, ``True``, ``False``,
``None``); comparisons ``== != < <= > >=`` (chained as in Python); ``and``, ``or``, ``not``;
parentheses. The shared expression parser accepts more (``in``, ``is``, arithmetic, calls,
lists, lowercase ``true``); a condition using such a form would validate and then evaluate
differently from Mantle (or fail, which a gate reads as false) at run time. So every form
outside the grammar is a ``mantle-condition-form`` error at load, with the way to write it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from agentscript.diagnostics import Diagnostic, Span
from agentscript.expr import nodes
from agentscript.mantle.model import Condition

COMPARISONS = frozenset({"==", "!=", "<", "<=", ">", ">="})
LITERAL_KINDS = frozenset({"string", "number", "bool", "none"})
_STRING = re.compile(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"")
_LOWER_CONSTANT = re.compile(r"(?<![\w.])(true|false|none|null)(?![\w.])")
_FIX = {"true": "True", "false": "False", "none": "None", "null": "None"}


def grammar_problems(condition: Condition) -> list[Diagnostic]:
    """Why ``condition`` is outside the documented grammar (empty when it is inside)."""
    out: list[Diagnostic] = []
    scrubbed = _STRING.sub(lambda m: " " * len(m.group(0)), condition.text)
    for match in _LOWER_CONSTANT.finditer(scrubbed):
        word = match.group(1)
        out.append(
            _problem(
                condition,
                f"'{word}' is not a condition literal; write {_FIX[word]}",
                condition.span,
            )
        )
    if condition.expr is not None:
        out.extend(_problem(condition, message, span) for message, span in _walk(condition.expr))
    return out


def _problem(condition: Condition, message: str, span: Span) -> Diagnostic:
    return Diagnostic("mantle-condition-form", message, span, file=condition.file)


def _walk(expr: nodes.Expr) -> Iterator[tuple[str, Span]]:
    if isinstance(expr, nodes.Literal):
        if expr.kind not in LITERAL_KINDS:
            yield f"a {expr.kind} literal is not in the condition grammar", expr.span
    elif isinstance(expr, nodes.Name | nodes.Member):
        return  # memory references are checked by name (mantle-condition-name)
    elif isinstance(expr, nodes.Unary):
        negative_number = (
            expr.op == "-"
            and isinstance(expr.operand, nodes.Literal)
            and expr.operand.kind == "number"
        )
        if expr.op != "not" and not negative_number:
            yield f"'{expr.op}' is not in the condition grammar (only not)", expr.span
        yield from _walk(expr.operand)
    elif isinstance(expr, nodes.Binary):
        right = expr.right
        op = expr.op
        if op == "*" and isinstance(right, nodes.Spread):
            # The shared parser reads ``a ** b`` as ``a * (*b)``: name what was written.
            op, right = "**", right.value
        if op not in ("and", "or"):
            yield (
                f"arithmetic ('{op}') is not in the condition grammar; compare memory "
                "entries with literals",
                expr.span,
            )
        yield from _walk(expr.left)
        yield from _walk(right)
    elif isinstance(expr, nodes.Compare):
        for op in expr.ops:
            if op in ("in", "not in"):
                yield (
                    f"'{op}' is not in the condition grammar; write a disjunction such as "
                    'session.ns.x == "a" or session.ns.x == "b"',
                    expr.span,
                )
            elif op in ("is", "is not"):
                fix = "==" if op == "is" else "!="
                yield f"'{op}' is not in the condition grammar; write {fix}", expr.span
            elif op not in COMPARISONS:
                yield f"'{op}' is not in the condition grammar", expr.span
        yield from _walk(expr.left)
        for comparator in expr.comparators:
            yield from _walk(comparator)
    else:
        kind = {
            nodes.Call: "a function call",
            nodes.Index: "indexing",
            nodes.ListExpr: "a list",
            nodes.DictExpr: "a mapping",
            nodes.Ternary: "a conditional expression",
            nodes.Spread: "unpacking with '*'",
            nodes.EllipsisExpr: "'...'",
            nodes.AtName: "an '@' reference",
        }.get(type(expr), "this expression")
        yield (
            f"{kind} is not in the condition grammar (memory references, literals, "
            "comparisons, and/or/not)",
            expr.span,
        )
