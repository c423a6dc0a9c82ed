"""Safe expression evaluator: an AST is compiled once into nested closures, then run many times.

No ``eval``/``exec``/``ast``: every operation is an explicit Python function, so an
expression can only read what the :class:`Env` exposes, call ``len``/``min``/``max``, and
do bounded work. Every failure is an :class:`EvalError` carrying the failing node's span.
Semantics are Python's unless ``docs/expressions.md`` says otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Final

from agentscript.diagnostics import Diagnostic, Span, error
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
    reference_path,
)
from agentscript.expr.values import type_name_of
from agentscript.limits import MAX_INT_BITS as LIMIT_INT_BITS
from agentscript.limits import MAX_SEQUENCE_LENGTH as LIMIT_SEQUENCE_LENGTH

__all__ = [
    "BUILTINS",
    "MAX_INT_BITS",
    "MAX_SEQUENCE_LENGTH",
    "Compiled",
    "Env",
    "EvalError",
    "compile_expr",
    "condition_holds",
    "evaluate",
]

# Hostile-input bounds: a string or list result longer than this, or an integer wider than
# this many bits, is an error rather than a slow or memory-hungry success.
MAX_SEQUENCE_LENGTH: Final = LIMIT_SEQUENCE_LENGTH
MAX_INT_BITS: Final = LIMIT_INT_BITS

BUILTINS: Final = frozenset({"len", "min", "max"})

_EMPTY: Mapping[str, object] = {}


class EvalError(Exception):
    """An expression could not be evaluated; ``span`` is the failing node's source region."""

    def __init__(self, message: str, span: Span) -> None:
        super().__init__(message)
        self.message = message
        self.span = span

    def __str__(self) -> str:
        return f"{self.span.line}:{self.span.column}: {self.message}"

    def to_diagnostic(self, code: str = "expression-error") -> Diagnostic:
        return error(code, self.message, self.span)


class Env:
    """What an expression can see.

    ``namespaces`` holds the roots of ``@ns`` references (``variables``, ``outputs``,
    ``system_variables``, ``actions`` ...); each is a mapping. ``names`` holds bare
    identifiers (Mantle's ``session``). Both are read, never written.
    """

    __slots__ = ("names", "namespaces")

    def __init__(
        self,
        namespaces: Mapping[str, object] | None = None,
        names: Mapping[str, object] | None = None,
    ) -> None:
        self.namespaces: Mapping[str, object] = namespaces if namespaces is not None else _EMPTY
        self.names: Mapping[str, object] = names if names is not None else _EMPTY


Compiled = Callable[[Env], object]


def compile_expr(expr: Expr) -> Compiled:
    """Compile ``expr`` into a function of an :class:`Env`.

    Compilation never fails: a construct that cannot work (an unknown function, ``...``,
    a parse-error placeholder) compiles to a function that raises :class:`EvalError`, so
    callers can compile everything up front and decide per evaluation what an error means.
    """
    root_span = expr.span
    try:
        inner = _compile(expr)
    except RecursionError:
        return _raiser("expression is nested too deeply", root_span)

    def run(env: Env) -> object:
        try:
            return inner(env)
        except EvalError:
            raise
        except RecursionError:
            raise EvalError("expression or value is nested too deeply", root_span) from None
        except MemoryError:
            raise EvalError("expression result is too large", root_span) from None
        except Exception as exc:  # a safety net; each operation reports its own errors
            raise EvalError(f"internal evaluation error: {exc!r}", root_span) from None

    return run


def evaluate(expr: Expr, env: Env) -> object:
    """Compile and evaluate once (prefer :func:`compile_expr` for repeated use)."""
    return compile_expr(expr)(env)


def condition_holds(compiled: Compiled, env: Env) -> bool:
    """A gate: the Python truthiness of the result; any evaluation error counts as false."""
    try:
        return bool(compiled(env))
    except EvalError:
        return False
    except Exception:  # bool() of a foreign host object may fail; gates fail closed
        return False


# --- compilation ---------------------------------------------------------------------------


def _raiser(message: str, span: Span) -> Compiled:
    def fail(env: Env) -> object:
        raise EvalError(message, span)

    return fail


def _constant(value: object) -> Compiled:
    def const(env: Env) -> object:
        return value

    return const


def _compile(expr: Expr) -> Compiled:
    compiler = _COMPILERS.get(type(expr))
    if compiler is None:
        return _raiser(f"unsupported expression node {type(expr).__name__}", expr.span)
    return compiler(expr)


def _compile_literal(expr: Expr) -> Compiled:
    assert isinstance(expr, Literal)
    value = expr.value
    if expr.kind in ("date", "datetime") and not isinstance(value, str):
        isoformat = getattr(value, "isoformat", None)
        value = isoformat() if callable(isoformat) else str(value)
    return _constant(value)


def _compile_ellipsis(expr: Expr) -> Compiled:
    return _raiser("'...' has no value here; it is only a placeholder for the LLM", expr.span)


def _compile_error(expr: Expr) -> Compiled:
    assert isinstance(expr, ErrorExpr)
    detail = f": {expr.text}" if expr.text else ""
    return _raiser(f"cannot evaluate an expression with a syntax error{detail}", expr.span)


def _compile_spread(expr: Expr) -> Compiled:
    return _raiser("'*' spread is only allowed inside a list or call arguments", expr.span)


def _compile_at_name(expr: Expr) -> Compiled:
    assert isinstance(expr, AtName)
    namespace, span = expr.namespace, expr.span

    def root(env: Env) -> object:
        try:
            value = env.namespaces[namespace]
        except KeyError:
            raise EvalError(f"unknown namespace @{namespace}", span) from None
        # A copy, so a stored result never aliases live runtime state.
        return dict(value) if isinstance(value, Mapping) else value

    return root


def _compile_name(expr: Expr) -> Compiled:
    assert isinstance(expr, Name)
    name, span = expr.name, expr.span
    if name in BUILTINS:
        return _raiser(f"'{name}' is a function; call it as {name}(...)", span)

    def lookup(env: Env) -> object:
        try:
            return env.names[name]
        except KeyError:
            raise EvalError(f"unknown name '{name}'", span) from None

    return lookup


def _namespace_item(namespace: str, key_of: Compiled | str, span: Span) -> Compiled:
    """``@ns.key`` / ``@ns[key]``: a missing entry is an error naming the reference."""
    if isinstance(key_of, str):
        key = key_of

        def member(env: Env) -> object:
            try:
                ns = env.namespaces[namespace]
            except KeyError:
                raise EvalError(f"unknown namespace @{namespace}", span) from None
            try:
                return ns[key]  # type: ignore[index]
            except KeyError:
                raise EvalError(f"@{namespace}.{key} is not defined", span) from None
            except TypeError:
                raise EvalError(f"@{namespace} cannot be read by key", span) from None

        return member

    index_of = key_of

    def item(env: Env) -> object:
        try:
            ns = env.namespaces[namespace]
        except KeyError:
            raise EvalError(f"unknown namespace @{namespace}", span) from None
        index = index_of(env)
        try:
            return ns[index]  # type: ignore[index]
        except (KeyError, IndexError):
            raise EvalError(f"@{namespace}[{index!r}] is not defined", span) from None
        except TypeError:
            raise EvalError(
                f"@{namespace} cannot be indexed by a {type_name_of(index)}", span
            ) from None

    return item


def _describe_target(expr: Expr) -> str:
    path = reference_path(expr)
    if path is None:
        return "the value"
    return "@" + ".".join(path)


def _compile_member(expr: Expr) -> Compiled:
    assert isinstance(expr, Member)
    name, span = expr.name, expr.span
    if isinstance(expr.obj, AtName):
        return _namespace_item(expr.obj.namespace, name, span)
    obj = _compile(expr.obj)
    target = _describe_target(expr.obj)

    def member(env: Env) -> object:
        value = obj(env)
        if type(value) is dict:  # the common case first, without isinstance
            if name in value:
                return value[name]
            if name == "length":
                return len(value)
            return None
        return _member_slow(value, name, target, span)

    return member


def _member_slow(value: object, name: str, target: str, span: Span) -> object:
    if isinstance(value, Mapping):
        if name in value:
            return value[name]
        return len(value) if name == "length" else None
    if name == "length" and isinstance(value, str | list | tuple):
        return len(value)
    if value is None:
        raise EvalError(f"cannot read '.{name}': {target} is None", span)
    raise EvalError(f"cannot read '.{name}' of a {type_name_of(value)}", span)


def _compile_index(expr: Expr) -> Compiled:
    assert isinstance(expr, Index)
    span = expr.span
    index_of = _compile(expr.index)
    if isinstance(expr.obj, AtName):
        return _namespace_item(expr.obj.namespace, index_of, span)
    obj = _compile(expr.obj)
    target = _describe_target(expr.obj)

    def item(env: Env) -> object:
        return _index(obj(env), index_of(env), target, span)

    return item


def _index(value: object, index: object, target: str, span: Span) -> object:
    if isinstance(value, list | tuple | str):
        # Number literals may arrive as floats, so `items[0.0]` must work like `items[0]`.
        if type(index) is float and index.is_integer():
            index = int(index)
        if type(index) is not int:
            raise EvalError(
                f"a {type_name_of(value)} index must be an integer, not a {type_name_of(index)}",
                span,
            )
        try:
            return value[index]
        except IndexError:
            raise EvalError(
                f"index {index} is out of range for a {type_name_of(value)} of length {len(value)}",
                span,
            ) from None
    if isinstance(value, Mapping):
        try:
            return value.get(index)
        except TypeError:
            raise EvalError(f"an object key cannot be a {type_name_of(index)}", span) from None
    if value is None:
        raise EvalError(f"cannot index: {target} is None", span)
    raise EvalError(f"cannot index a {type_name_of(value)}", span)


def _compile_items(items: list[Expr], span: Span) -> Compiled:
    """A list of values with ``*spread`` support, as used by list literals and calls."""
    if not any(isinstance(item, Spread) for item in items):
        if not items:
            return lambda env: []
        compiled = [_compile(item) for item in items]
        return lambda env: [f(env) for f in compiled]
    # A spread item compiles its operand: the Spread node itself only compiles to an error.
    parts = [
        (True, _compile(item.value)) if isinstance(item, Spread) else (False, _compile(item))
        for item in items
    ]

    def build(env: Env) -> object:
        out: list[object] = []
        for is_spread, fn in parts:
            if is_spread:
                value = fn(env)
                if not isinstance(value, list | tuple | str):
                    raise EvalError(f"cannot spread a {type_name_of(value)}", span)
                if len(out) + len(value) > MAX_SEQUENCE_LENGTH:
                    raise EvalError("list would be longer than the allowed maximum", span)
                out.extend(value)
            else:
                out.append(fn(env))
        return out

    return build


def _compile_list(expr: Expr) -> Compiled:
    assert isinstance(expr, ListExpr)
    return _compile_items(expr.items, expr.span)


def _compile_dict(expr: Expr) -> Compiled:
    assert isinstance(expr, DictExpr)
    span = expr.span
    keys: list[Compiled] = []
    for key in expr.keys:
        # `{name: 1}`: a bare identifier key is the string "name", as in JSON-ish literals.
        keys.append(_constant(key.name) if isinstance(key, Name) else _compile(key))
    values = [_compile(value) for value in expr.values]
    pairs = list(zip(keys, values, strict=True))

    def build(env: Env) -> object:
        out: dict[object, object] = {}
        for key_of, value_of in pairs:
            key = key_of(env)
            if not (key is None or isinstance(key, str | int | float)):
                raise EvalError(f"an object key cannot be a {type_name_of(key)}", span)
            out[key] = value_of(env)
        return out

    return build


def _compile_call(expr: Expr) -> Compiled:
    assert isinstance(expr, Call)
    span = expr.span
    func = expr.func
    if not isinstance(func, Name):
        return _raiser("only len, min and max can be called; methods cannot be called", span)
    if func.name not in BUILTINS:
        return _raiser(f"unknown function '{func.name}'; only len, min and max exist", span)
    args = _compile_items(expr.args, span)
    if func.name == "len":
        return _len_call(args, span)
    return _minmax_call(func.name, args, span)


def _len_call(args: Compiled, span: Span) -> Compiled:
    def call(env: Env) -> object:
        values = args(env)
        assert isinstance(values, list)
        if len(values) != 1:
            raise EvalError(f"len() takes exactly one argument ({len(values)} given)", span)
        value = values[0]
        if isinstance(value, str | list | tuple | Mapping):
            return len(value)
        raise EvalError(f"len() of a {type_name_of(value)} is not defined", span)

    return call


def _minmax_call(name: str, args: Compiled, span: Span) -> Compiled:
    pick = min if name == "min" else max

    def call(env: Env) -> object:
        values = args(env)
        assert isinstance(values, list)
        if len(values) == 1:
            only = values[0]
            if not isinstance(only, list | tuple):
                raise EvalError(f"{name}() of one argument needs a list", span)
            values = list(only)
        if not values:
            raise EvalError(f"{name}() of an empty list", span)
        try:
            return pick(values)
        except TypeError:
            kinds = sorted({type_name_of(v) for v in values})
            raise EvalError(f"{name}() cannot compare {' and '.join(kinds)} values", span) from None

    return call


def _compile_unary(expr: Expr) -> Compiled:
    assert isinstance(expr, Unary)
    op, span = expr.op, expr.span
    operand = _compile(expr.operand)
    if op == "not":
        return lambda env: not operand(env)
    if op not in ("-", "+"):
        return _raiser(f"unknown unary operator '{op}'", span)
    negate = op == "-"

    def sign(env: Env) -> object:
        value = operand(env)
        if not isinstance(value, int | float):
            raise EvalError(f"unary '{op}' needs a number, not a {type_name_of(value)}", span)
        return -value if negate else +value

    return sign


def _compile_binary(expr: Expr) -> Compiled:
    assert isinstance(expr, Binary)
    op, span = expr.op, expr.span
    left = _compile(expr.left)
    right = _compile(expr.right)
    if op == "and":
        return lambda env: left(env) and right(env)
    if op == "or":
        return lambda env: left(env) or right(env)
    arith = _ARITHMETIC.get(op)
    if arith is None:
        return _raiser(f"unknown operator '{op}'", span)
    return arith(left, right, span)


def _numbers(a: object, b: object) -> bool:
    ta, tb = type(a), type(b)
    return (ta is int or ta is float) and (tb is int or tb is float)


def _arith_error(op: str, a: object, b: object, span: Span) -> EvalError:
    return EvalError(f"'{op}' is not defined for {type_name_of(a)} and {type_name_of(b)}", span)


def _finite(result: object, span: Span) -> object:
    """Float arithmetic overflows to inf (or NaN) instead of raising: neither is JSON, so
    neither may reach state, traces or the model."""
    if type(result) is float and not math.isfinite(result):
        raise EvalError("number is too large", span)
    return result


def _add(left: Compiled, right: Compiled, span: Span) -> Compiled:
    def add(env: Env) -> object:
        a = left(env)
        b = right(env)
        try:
            if _numbers(a, b):
                return _finite(a + b, span)  # type: ignore[operator]
        except OverflowError:
            raise EvalError("number is too large", span) from None
        return _add_slow(a, b, span)

    return add


def _add_slow(a: object, b: object, span: Span) -> object:
    if isinstance(a, int | float) and isinstance(b, int | float):  # bools, as in Python
        try:
            return _finite(a + b, span)
        except OverflowError:
            raise EvalError("number is too large", span) from None
    if isinstance(a, str) and isinstance(b, str):
        if len(a) + len(b) > MAX_SEQUENCE_LENGTH:
            raise EvalError("string would be longer than the allowed maximum", span)
        return a + b
    if isinstance(a, list) and isinstance(b, list):
        if len(a) + len(b) > MAX_SEQUENCE_LENGTH:
            raise EvalError("list would be longer than the allowed maximum", span)
        return a + b
    raise _arith_error("+", a, b, span)


def _sub(left: Compiled, right: Compiled, span: Span) -> Compiled:
    def sub(env: Env) -> object:
        a = left(env)
        b = right(env)
        if not (isinstance(a, int | float) and isinstance(b, int | float)):
            raise _arith_error("-", a, b, span)
        try:
            return _finite(a - b, span)
        except OverflowError:
            raise EvalError("number is too large", span) from None

    return sub


def _mul(left: Compiled, right: Compiled, span: Span) -> Compiled:
    def mul(env: Env) -> object:
        a = left(env)
        b = right(env)
        if not (isinstance(a, int | float) and isinstance(b, int | float)):
            raise _arith_error("*", a, b, span)
        try:
            result = a * b
        except OverflowError:
            raise EvalError("number is too large", span) from None
        if type(result) is int and result.bit_length() > MAX_INT_BITS:
            raise EvalError("number is too large", span)
        return _finite(result, span)

    return mul


def _div(left: Compiled, right: Compiled, span: Span) -> Compiled:
    def div(env: Env) -> object:
        a = left(env)
        b = right(env)
        if not (isinstance(a, int | float) and isinstance(b, int | float)):
            raise _arith_error("/", a, b, span)
        try:
            return _finite(a / b, span)
        except ZeroDivisionError:
            raise EvalError("division by zero", span) from None
        except OverflowError:
            raise EvalError("number is too large", span) from None

    return div


_ARITHMETIC: Final[dict[str, Callable[[Compiled, Compiled, Span], Compiled]]] = {
    "+": _add,
    "-": _sub,
    "*": _mul,
    "/": _div,
}


# --- comparisons ---------------------------------------------------------------------------


def _same(a: object, b: object) -> bool:
    # CPython object identity is an implementation detail for strings and numbers, so `is`
    # means: identical singletons (None/True/False), or the same type and equal.
    return a is b or (type(a) is type(b) and a == b)


def _contains(a: object, b: object) -> bool:
    if isinstance(b, str):
        if not isinstance(a, str):
            raise TypeError
        return a in b
    if isinstance(b, list | tuple | Mapping):
        return a in b
    raise TypeError


_RELATIONS: Final[dict[str, Callable[[object, object], bool]]] = {
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,  # type: ignore[operator]
    "<=": lambda a, b: a <= b,  # type: ignore[operator]
    ">": lambda a, b: a > b,  # type: ignore[operator]
    ">=": lambda a, b: a >= b,  # type: ignore[operator]
    "is": _same,
    "is not": lambda a, b: not _same(a, b),
    "in": _contains,
    "not in": lambda a, b: not _contains(a, b),
}


def _compare_error(op: str, a: object, b: object, span: Span) -> EvalError:
    if op in ("in", "not in"):
        if isinstance(b, str):
            return EvalError(f"'{op}' a string needs a string on the left", span)
        if isinstance(b, Mapping):
            return EvalError(f"a {type_name_of(a)} cannot be an object key", span)
        return EvalError(f"'{op}' needs a list, string or object, not a {type_name_of(b)}", span)
    return EvalError(f"cannot compare {type_name_of(a)} and {type_name_of(b)} with '{op}'", span)


def _compile_compare(expr: Expr) -> Compiled:
    assert isinstance(expr, Compare)
    span = expr.span
    if not expr.ops or len(expr.ops) != len(expr.comparators):
        return _raiser("malformed comparison", span)
    for op in expr.ops:
        if op not in _RELATIONS:
            return _raiser(f"unknown comparison operator '{op}'", span)
    left = _compile(expr.left)
    if len(expr.ops) == 1:
        return _compare_one(expr.ops[0], left, _compile(expr.comparators[0]), span)
    steps = [
        (op, _RELATIONS[op], _compile(node))
        for op, node in zip(expr.ops, expr.comparators, strict=True)
    ]

    def chain(env: Env) -> object:
        a = left(env)
        for op, relation, right in steps:
            b = right(env)
            try:
                if not relation(a, b):
                    return False
            except TypeError:
                raise _compare_error(op, a, b, span) from None
            a = b
        return True

    return chain


def _compare_one(op: str, left: Compiled, right: Compiled, span: Span) -> Compiled:
    if op == "==":
        return lambda env: left(env) == right(env)
    if op == "!=":
        return lambda env: left(env) != right(env)
    relation = _RELATIONS[op]

    def compare(env: Env) -> object:
        a = left(env)
        b = right(env)
        try:
            return relation(a, b)
        except TypeError:
            raise _compare_error(op, a, b, span) from None

    return compare


def _compile_ternary(expr: Expr) -> Compiled:
    assert isinstance(expr, Ternary)
    body = _compile(expr.body)
    condition = _compile(expr.condition)
    orelse = _compile(expr.orelse)
    return lambda env: body(env) if condition(env) else orelse(env)


_COMPILERS: Final[dict[type[Expr], Callable[[Expr], Compiled]]] = {
    Literal: _compile_literal,
    EllipsisExpr: _compile_ellipsis,
    ErrorExpr: _compile_error,
    AtName: _compile_at_name,
    Name: _compile_name,
    Member: _compile_member,
    Index: _compile_index,
    Call: _compile_call,
    Unary: _compile_unary,
    Binary: _compile_binary,
    Compare: _compile_compare,
    Ternary: _compile_ternary,
    ListExpr: _compile_list,
    DictExpr: _compile_dict,
    Spread: _compile_spread,
}
