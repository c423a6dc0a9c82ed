"""Property tests: any tree over any values either evaluates or raises EvalError, nothing else."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentscript.diagnostics import Span
from agentscript.expr import parse_expression
from agentscript.expr.evaluate import Env, EvalError, compile_expr, condition_holds
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
from agentscript.expr.values import to_display, truthy

S = Span(1, 1, 1, 2)

KEYS = ["a", "b", "length", "id", "items"]
NAMESPACES = ["variables", "outputs", "missing"]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
    st.sampled_from(["", "a", "2025-09-04"]),
)

values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.sampled_from(KEYS), inner, max_size=4),
    ),
    max_leaves=12,
)


def leaf_exprs() -> st.SearchStrategy[Expr]:
    literals = st.one_of(
        st.builds(lambda v: Literal(S, v, "number"), st.integers(-5, 5) | st.floats(-5, 5)),
        st.builds(lambda v: Literal(S, v, "string"), st.sampled_from(["", "a", "ab", "length"])),
        st.builds(lambda v: Literal(S, v, "bool"), st.booleans()),
        st.just(Literal(S, None, "none")),
        st.just(Literal(S, "2025-09-04", "date")),
    )
    refs = st.builds(
        lambda ns, key: Member(S, AtName(S, ns), key),
        st.sampled_from(NAMESPACES),
        st.sampled_from(KEYS),
    )
    others = st.one_of(
        st.builds(lambda ns: AtName(S, ns), st.sampled_from(NAMESPACES)),
        st.builds(lambda n: Name(S, n), st.sampled_from(["session", "len", "nobody"])),
        st.just(EllipsisExpr(S)),
        st.just(ErrorExpr(S, "bad")),
    )
    return st.one_of(literals, refs, refs, others)


def compound(children: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
    ops = st.sampled_from(["+", "-", "*", "/", "and", "or", "%"])
    cmp_ops = st.sampled_from(
        ["==", "!=", "<", "<=", ">", ">=", "is", "is not", "in", "not in", "??"]
    )
    items = st.lists(st.one_of(children, st.builds(lambda c: Spread(S, c), children)), max_size=3)
    return st.one_of(
        st.builds(lambda op, a, b: Binary(S, op, a, b), ops, children, children),
        st.builds(lambda op, a: Unary(S, op, a), st.sampled_from(["-", "+", "not"]), children),
        st.builds(
            lambda a, pairs: Compare(S, a, [p[0] for p in pairs], [p[1] for p in pairs]),
            children,
            st.lists(st.tuples(cmp_ops, children), min_size=1, max_size=3),
        ),
        st.builds(lambda a, b, c: Ternary(S, a, b, c), children, children, children),
        st.builds(lambda o, k: Member(S, o, k), children, st.sampled_from(KEYS)),
        st.builds(lambda o, i: Index(S, o, i), children, children),
        st.builds(lambda xs: ListExpr(S, xs), items),
        st.builds(
            lambda pairs: DictExpr(S, [p[0] for p in pairs], [p[1] for p in pairs]),
            st.lists(st.tuples(children, children), max_size=3),
        ),
        st.builds(
            lambda f, args: Call(S, Name(S, f), args),
            st.sampled_from(["len", "min", "max", "print"]),
            items,
        ),
        st.builds(lambda o, args: Call(S, o, args), children, items),
        st.builds(lambda c: Spread(S, c), children),
    )


exprs = st.recursive(leaf_exprs(), compound, max_leaves=25)

envs = st.builds(
    lambda variables, outputs, session: Env(
        namespaces={"variables": variables, "outputs": outputs},
        names={"session": session},
    ),
    st.dictionaries(st.sampled_from(KEYS), values, max_size=5),
    st.dictionaries(st.sampled_from(KEYS), values, max_size=5),
    values,
)


def check(expr: Expr, env: Env) -> None:
    compiled = compile_expr(expr)
    try:
        result = compiled(env)
    except EvalError as exc:
        assert not exc.message.startswith("internal"), exc.message
        assert exc.span == S
        assert condition_holds(compiled, env) is False
        return
    assert isinstance(to_display(result), str)
    # Deterministic: a second run gives the same value (compared by display, NaN-safe).
    assert to_display(compiled(env)) == to_display(result)
    assert condition_holds(compiled, env) is truthy(result)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(exprs, envs)
def test_random_trees_evaluate_or_raise_eval_error(expr: Expr, env: Env) -> None:
    check(expr, env)


TOKENS = [
    "@variables.a",
    "@variables.b",
    "@outputs.items",
    "@outputs",
    "session",
    "len",
    "min",
    "max",
    "(",
    ")",
    "[",
    "]",
    "{",
    "}",
    ",",
    ":",
    ".",
    ".length",
    "[0]",
    "*",
    "+",
    "-",
    "/",
    "==",
    "!=",
    "<",
    "<=",
    ">",
    ">=",
    "is",
    "is not",
    "in",
    "not",
    "and",
    "or",
    "if",
    "else",
    "True",
    "False",
    "None",
    "0",
    "1",
    "2.5",
    '"a"',
    '""',
    "2025-09-04",
    "...",
]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(TOKENS), max_size=14), envs)
def test_parsed_text_evaluates_or_raises_eval_error(tokens: list[str], env: Env) -> None:
    expr, _ = parse_expression(" ".join(tokens))
    compiled = compile_expr(expr)
    try:
        result = compiled(env)
    except EvalError as exc:
        assert not exc.message.startswith("internal"), exc.message
        assert exc.span.line >= 1
        assert exc.span.column >= 1
        return
    assert isinstance(to_display(result), str)
