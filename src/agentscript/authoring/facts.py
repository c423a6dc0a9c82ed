"""What one path through an agent knows about its variables, and conditions judged against it.

The authoring tools (``prompts``, ``check-gates``, the gate lints) walk procedures symbolically:
they do not run actions and do not know the session's values, so a condition is *true*, *false*
or *unknown* on a path. :class:`Facts` holds what the path has learnt (a variable equals a
literal, a variable is not one of some literals, an opaque condition held or not, a variable
was set at run time by an action); :func:`truth` judges a condition against it, and
:func:`assume` adds a condition, returning ``None`` when the path becomes impossible.

Never raises on any expression, however half-typed: what it does not understand is opaque and
keyed by its printed text.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from agentscript.expr.nodes import (
    Binary,
    Compare,
    Expr,
    Literal,
    Member,
    Name,
    Unary,
    reference_path,
)
from agentscript.expr.printer import print_expr

_UNKNOWN = object()
# The negation of each comparison operator, so a false branch reads as a plain comparison.
_NEGATED = {
    "==": "!=",
    "!=": "==",
    "<": ">=",
    ">=": "<",
    ">": "<=",
    "<=": ">",
    "is": "is not",
    "is not": "is",
    "in": "not in",
    "not in": "in",
}


def variable_name(expr: Expr) -> str | None:
    """``@variables.x`` -> ``x``; a Mantle memory path (``session.skill.entry``) as written;
    None for anything else."""
    path = reference_path(expr)
    if path is not None:
        return path[1] if len(path) == 2 and path[0] == "variables" else None
    parts: list[str] = []
    node = expr
    while isinstance(node, Member):
        parts.append(node.name)
        node = node.obj
    if isinstance(node, Name) and parts:
        parts.append(node.name)
        return ".".join(reversed(parts))
    return None


def readable(expr: Expr) -> str:
    """An expression as a reviewer reads it: ``@variables.`` dropped."""
    return print_expr(expr).replace("@variables.", "")


@dataclass(frozen=True, slots=True)
class Atom:
    """One condition a path assumed: ``text`` is the positive form, ``holds`` its truth."""

    text: str
    holds: bool
    shown: str  # how the assumption reads ("is_late == False", "not (a > b)")
    runtime: str | None = None  # "set at run time by check_if_late", when that is why

    def label(self) -> str:
        shown = (
            f"({self.shown})"
            if " or " in self.shown and not self.shown.startswith("not (")
            else self.shown
        )
        return f"{shown} [{self.runtime}]" if self.runtime else shown


@dataclass(slots=True)
class Facts:
    """What one path knows. Copy with :meth:`fork` before changing a shared instance."""

    types: dict[str, str]
    equal: dict[str, object] = field(default_factory=dict)
    excluded: dict[str, set[object]] = field(default_factory=dict)
    opaque: dict[str, bool] = field(default_factory=dict)
    # Variables whose value an action's output gave on this path, with the action's name.
    runtime: dict[str, str] = field(default_factory=dict)
    atoms: list[Atom] = field(default_factory=list)
    # Printed conditions by node identity, shared by every fork of one walk: the same guard is
    # judged on every path, and printing dominated the walk's profile.
    printed: dict[int, str] = field(default_factory=dict)
    # The expression behind each opaque key, shared like ``printed``.
    conditions: dict[str, Expr] = field(default_factory=dict)

    def fork(self) -> Facts:
        return Facts(
            self.types,
            dict(self.equal),
            {k: set(v) for k, v in self.excluded.items()},
            dict(self.opaque),
            dict(self.runtime),
            list(self.atoms),
            self.printed,
            self.conditions,
        )

    def text(self, expr: Expr) -> str:
        key = id(expr)
        found = self.printed.get(key)
        if found is None:
            found = self.printed[key] = print_expr(expr)
        return found

    def forget(self, variable: str, *, set_by: str | None = None) -> None:
        """A write whose value is unknown here: drop what was known about the variable."""
        self.equal.pop(variable, None)
        self.excluded.pop(variable, None)
        for key in [k for k in self.opaque if f"@variables.{variable}" in k]:
            del self.opaque[key]
        if set_by is None:
            self.runtime.pop(variable, None)
        else:
            self.runtime[variable] = set_by

    def know(self, variable: str, value: object) -> None:
        self.forget(variable)
        self.equal[variable] = value

    def value_of(self, expr: Expr) -> object:
        """A literal's value, or a variable's known value, else ``_UNKNOWN``."""
        if isinstance(expr, Literal):
            return expr.value
        name = variable_name(expr)
        if name is not None and name in self.equal:
            return self.equal[name]
        return _UNKNOWN

    def is_boolean(self, variable: str) -> bool:
        return self.types.get(variable, "").lower() in ("boolean", "bool")


def truth(expr: Expr, facts: Facts) -> bool | None:
    """True, False, or None (unknown on this path)."""
    judged = _structural(expr, facts)
    if judged is None and facts.opaque:
        return facts.opaque.get(facts.text(expr))
    return judged


def _structural(expr: Expr, facts: Facts) -> bool | None:
    if isinstance(expr, Literal):
        return bool(expr.value) if expr.kind in ("bool", "boolean", "none") else None
    if isinstance(expr, Unary) and expr.op == "not":
        inner = truth(expr.operand, facts)
        return None if inner is None else not inner
    if isinstance(expr, Binary) and expr.op in ("and", "or"):
        left, right = truth(expr.left, facts), truth(expr.right, facts)
        if expr.op == "and":
            if left is False or right is False:
                return False
            return True if left and right else None
        if left is True or right is True:
            return True
        return False if left is False and right is False else None
    name = variable_name(expr)
    if name is not None:
        if name in facts.equal:
            return bool(facts.equal[name])
        if facts.is_boolean(name) and (
            True in facts.excluded.get(name, ()) or False in facts.excluded.get(name, ())
        ):
            return False in facts.excluded[name]
        return None
    if isinstance(expr, Compare) and len(expr.ops) == 1:
        return _compare(expr.left, expr.ops[0], expr.comparators[0], facts)
    return None


def _compare(left: Expr, op: str, right: Expr, facts: Facts) -> bool | None:
    a, b = facts.value_of(left), facts.value_of(right)
    if a is not _UNKNOWN and b is not _UNKNOWN:
        try:
            return _apply(op, a, b)
        except TypeError:
            return None
    # One side a variable, the other a literal: exclusions still decide == and !=.
    for var_side, lit_side in ((left, right), (right, left)):
        name = variable_name(var_side)
        if (
            name is None
            or not isinstance(lit_side, Literal)
            or op not in ("==", "!=", "is", "is not")
        ):
            continue
        if lit_side.value in facts.excluded.get(name, ()):
            return op in ("!=", "is not")
    return None


def _apply(op: str, a: object, b: object) -> bool:
    if op in ("==", "is"):
        return a == b
    if op in ("!=", "is not"):
        return a != b
    if op == "in":
        return a in b  # type: ignore[operator]
    if op == "not in":
        return a not in b  # type: ignore[operator]
    return bool(
        {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]  # type: ignore[operator]
    )


def assume(expr: Expr, holds: bool, facts: Facts) -> Facts | None:
    """``facts`` plus "``expr`` is ``holds``", or None when that contradicts the path.

    Works on a fork; ``facts`` itself is left unchanged.
    """
    known = truth(expr, facts)
    if known is not None:
        return facts if known == holds else None
    out = facts.fork()
    out.atoms.append(_atom(expr, holds, facts))
    _learn(expr, holds, out)
    # What was just learnt may decide a condition assumed earlier as a whole (`a or b`, then
    # `a == 1` and `b == 2` separately): the path is impossible if it now contradicts it.
    for key, expected in list(out.opaque.items()):
        condition = out.conditions.get(key)
        if condition is not None and _structural(condition, out) not in (None, expected):
            return None
    return out


def _learn(expr: Expr, holds: bool, facts: Facts) -> None:
    if isinstance(expr, Unary) and expr.op == "not":
        _learn(expr.operand, not holds, facts)
        return
    if isinstance(expr, Binary) and expr.op in ("and", "or") and holds == (expr.op == "and"):
        # Both parts are known: `a and b` held, or `a or b` failed.
        _learn(expr.left, holds, facts)
        _learn(expr.right, holds, facts)
        return
    name = variable_name(expr)
    if name is not None and facts.is_boolean(name):
        facts.equal[name] = holds
        return
    if (
        isinstance(expr, Compare)
        and len(expr.ops) == 1
        and expr.ops[0] in ("==", "!=", "is", "is not")
    ):
        left, right = expr.left, expr.comparators[0]
        if isinstance(left, Literal):
            left, right = right, left
        name = variable_name(left)
        if name is not None and isinstance(right, Literal):
            positive = holds == (expr.ops[0] in ("==", "is"))
            if positive:
                facts.equal[name] = right.value
            else:
                excluded = facts.excluded.setdefault(name, set())
                excluded.add(right.value)
                if facts.is_boolean(name) and isinstance(right.value, bool):
                    facts.equal[name] = not right.value
            return
    key = facts.text(expr)
    facts.opaque[key] = holds
    facts.conditions[key] = expr


def _atom(expr: Expr, holds: bool, facts: Facts) -> Atom:
    names = sorted(_variables_in(expr))
    runtime = [f"{n} set at run time by {facts.runtime[n]}" for n in names if n in facts.runtime]
    return Atom(facts.text(expr), holds, _shown(expr, holds, facts), "; ".join(runtime) or None)


def _shown(expr: Expr, holds: bool, facts: Facts) -> str:
    if holds:
        return readable(expr)
    if isinstance(expr, Unary) and expr.op == "not":
        return readable(expr.operand)
    if isinstance(expr, Compare) and len(expr.ops) == 1:
        left, right = expr.left, expr.comparators[0]
        name = variable_name(left)
        if (
            name is not None
            and facts.is_boolean(name)
            and isinstance(right, Literal)
            and isinstance(right.value, bool)
            and expr.ops[0] in ("==", "!=")
        ):
            value = right.value if expr.ops[0] == "!=" else not right.value
            return f"{name} == {value}"
        return f"{readable(left)} {_NEGATED[expr.ops[0]]} {readable(right)}"
    return f"not ({readable(expr)})"


def sub_expressions(expr: Expr) -> Iterator[Expr]:
    """``expr`` and every expression inside it (operands, arguments, items), any order."""
    stack: list[Expr] = [expr]
    while stack:
        node = stack.pop()
        yield node
        for slot in getattr(type(node), "__slots__", ()):
            value = getattr(node, slot, None)
            if isinstance(value, Expr):
                stack.append(value)
            elif isinstance(value, list):
                stack.extend(v for v in value if isinstance(v, Expr))


def _variables_in(expr: Expr) -> set[str]:
    # A reference's own parts (`@variables` inside `@variables.x`) are not looked at again.
    return {name for node in sub_expressions(expr) if (name := variable_name(node)) is not None}


def variables_in(expr: Expr) -> set[str]:
    """Every ``@variables.x`` an expression reads."""
    return _variables_in(expr)
