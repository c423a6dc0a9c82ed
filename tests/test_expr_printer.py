"""Tests for the expression printer: canonical text, minimal parentheses, round trips."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentscript.diagnostics import UNKNOWN_SPAN
from agentscript.expr.lexer import KEYWORDS
from agentscript.expr.nodes import (
    AtName,
    Binary,
    Call,
    Compare,
    DictExpr,
    EllipsisExpr,
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
from agentscript.expr.parser import parse_expression
from agentscript.expr.printer import format_number, format_string, precedence, print_expr
from agentscript.syntax.compare import tree_signature

S = UNKNOWN_SPAN


def num(v: int | float) -> Literal:
    return Literal(S, v, "number")


def s(v: str) -> Literal:
    return Literal(S, v, "string")


def n(name: str) -> Name:
    return Name(S, name)


def ref(*path: str) -> Expr:
    node: Expr = AtName(S, path[0])
    for part in path[1:]:
        node = Member(S, node, part)
    return node


def b(op: str, left: Expr, right: Expr) -> Binary:
    return Binary(S, op, left, right)


def cmp(left: Expr, *rest: str | Expr) -> Compare:
    ops = [r for r in rest[::2] if isinstance(r, str)]
    comps = [r for r in rest[1::2] if isinstance(r, Expr)]
    return Compare(S, left, ops, comps)


# ---------------------------------------------------------------- atoms


@pytest.mark.parametrize(
    ("expr", "text"),
    [
        (num(3), "3"),
        (num(-42), "-42"),
        (num(3.14), "3.14"),
        (num(0.5), "0.5"),
        (num(2.0), "2.0"),
        (Literal(S, True, "bool"), "True"),
        (Literal(S, False, "bool"), "False"),
        (Literal(S, None, "none"), "None"),
        (s("hi"), '"hi"'),
        (EllipsisExpr(S), "..."),
        (AtName(S, "variables"), "@variables"),
        (ref("variables", "customer", "city"), "@variables.customer.city"),
        (n("len"), "len"),
        (Literal(S, dt.date(2025, 9, 4), "date"), "2025-09-04"),
        (Literal(S, "2025-09-04T12:01:59Z", "datetime"), "2025-09-04T12:01:59Z"),
        (
            Literal(S, dt.datetime(2025, 9, 4, 12, 1, tzinfo=dt.UTC), "datetime"),
            "2025-09-04T12:01:00Z",
        ),
    ],
)
def test_atoms(expr: Expr, text: str) -> None:
    assert print_expr(expr) == text


def test_string_escapes() -> None:
    assert format_string('say "hi"') == '"say \\"hi\\""'
    assert format_string("a\\b") == '"a\\\\b"'
    assert format_string("line\nnext\ttab") == '"line\\nnext\\ttab"'
    assert format_string("nul\0") == '"nul\\0"'
    assert format_string("bell\x07") == '"bell\x07"'  # no escape exists; the lexer reads it raw
    assert format_string("café ✓") == '"café ✓"'


def test_numbers_never_use_exponent_form() -> None:
    assert format_number(1e-7) == "0.0000001"
    assert format_number(1e16) == "10000000000000000.0"
    assert format_number(12) == "12"


@pytest.mark.parametrize("bad", [float("inf"), float("nan")])
def test_non_finite_numbers_are_rejected(bad: float) -> None:
    with pytest.raises(ValueError):
        format_number(bad)


def test_bool_is_not_a_number() -> None:
    with pytest.raises(TypeError):
        format_number(True)


# ---------------------------------------------------------------- compound forms


def test_postfix_forms() -> None:
    assert print_expr(Index(S, ref("outputs", "items"), num(0))) == "@outputs.items[0]"
    call = Call(S, n("max"), [num(1), ref("variables", "x")])
    assert print_expr(call) == "max(1, @variables.x)"
    assert print_expr(Call(S, n("f"), [])) == "f()"
    assert print_expr(Call(S, n("f"), [Spread(S, ref("variables", "xs"))])) == "f(*@variables.xs)"
    assert print_expr(Member(S, Index(S, ref("o", "items"), num(0)), "id")) == "@o.items[0].id"


def test_collections() -> None:
    assert print_expr(ListExpr(S, [num(1), s("a")])) == '[1, "a"]'
    assert print_expr(ListExpr(S, [])) == "[]"
    assert print_expr(DictExpr(S, [s("k"), s("v")], [num(1), num(2)])) == '{"k": 1, "v": 2}'
    assert print_expr(DictExpr(S, [], [])) == "{}"


def test_operators_are_spaced() -> None:
    assert print_expr(cmp(ref("variables", "x"), "==", s("a"))) == '@variables.x == "a"'
    assert print_expr(cmp(n("a"), "is not", Literal(S, None, "none"))) == "a is not None"
    assert print_expr(cmp(n("a"), "not in", n("b"))) == "a not in b"
    assert print_expr(cmp(n("a"), "<", n("b"), "<=", n("c"))) == "a < b <= c"
    assert print_expr(b("and", n("a"), n("b"))) == "a and b"
    assert print_expr(Unary(S, "not", n("a"))) == "not a"
    assert print_expr(Unary(S, "-", n("a"))) == "-a"


@pytest.mark.parametrize(
    ("expr", "text"),
    [
        # Left associativity: parentheses only on the right.
        (b("-", b("-", n("a"), n("b")), n("c")), "a - b - c"),
        (b("-", n("a"), b("-", n("b"), n("c"))), "a - (b - c)"),
        (b("*", b("+", n("a"), n("b")), n("c")), "(a + b) * c"),
        (b("+", n("a"), b("*", n("b"), n("c"))), "a + b * c"),
        # ... except `and` inside `or`, parenthesized for the reader.
        (b("or", b("and", n("a"), n("b")), n("c")), "(a and b) or c"),
        (b("or", n("c"), b("and", n("a"), n("b"))), "c or (a and b)"),
        (b("or", b("or", n("a"), n("b")), n("c")), "a or b or c"),
        (b("and", b("and", n("a"), n("b")), n("c")), "a and b and c"),
        (b("and", b("or", n("a"), n("b")), n("c")), "(a or b) and c"),
        # `not` binds more loosely than comparisons.
        (Unary(S, "not", cmp(n("a"), "==", n("b"))), "not a == b"),
        (cmp(Unary(S, "not", n("a")), "==", n("b")), "(not a) == b"),
        (b("+", n("a"), Unary(S, "not", n("b"))), "a + (not b)"),
        (Unary(S, "not", Unary(S, "not", n("a"))), "not not a"),
        # A comparison nested inside a comparison is not a chain.
        (cmp(cmp(n("a"), "==", n("b")), "==", n("c")), "(a == b) == c"),
        (cmp(n("a"), "==", cmp(n("b"), "==", n("c"))), "a == (b == c)"),
        # Unary minus.
        (Unary(S, "-", b("+", n("a"), n("b"))), "-(a + b)"),
        (b("*", Unary(S, "-", n("a")), n("b")), "-a * b"),
        (Unary(S, "-", Unary(S, "-", n("a"))), "- -a"),
        (Unary(S, "-", num(-1)), "- -1"),
        (b("-", n("a"), num(-1)), "a - -1"),
        (Member(S, Unary(S, "-", n("a")), "b"), "(-a).b"),
        (Member(S, num(1), "real"), "(1).real"),
        (Member(S, num(-1), "real"), "(-1).real"),
        (Call(S, b("+", n("a"), n("b")), []), "(a + b)()"),
        # Ternary is right-associative and binds loosest.
        (
            Ternary(S, n("a"), n("c"), Ternary(S, n("b"), n("d"), n("e"))),
            "a if c else b if d else e",
        ),
        (
            Ternary(S, Ternary(S, n("a"), n("b"), n("c")), n("d"), n("e")),
            "(a if b else c) if d else e",
        ),
        (
            Ternary(S, n("a"), Ternary(S, n("b"), n("c"), n("d")), n("e")),
            "a if (b if c else d) else e",
        ),
        (b("+", Ternary(S, n("a"), n("b"), n("c")), n("d")), "(a if b else c) + d"),
        (ListExpr(S, [Ternary(S, n("a"), n("b"), n("c"))]), "[a if b else c]"),
        (Spread(S, b("+", n("a"), n("b"))), "*(a + b)"),
    ],
)
def test_minimal_parentheses(expr: Expr, text: str) -> None:
    assert print_expr(expr) == text


def test_precedence_order() -> None:
    levels = [
        Ternary(S, n("a"), n("b"), n("c")),
        b("or", n("a"), n("b")),
        b("and", n("a"), n("b")),
        Unary(S, "not", n("a")),
        cmp(n("a"), "==", n("b")),
        b("+", n("a"), n("b")),
        b("*", n("a"), n("b")),
        Unary(S, "-", n("a")),
        Member(S, n("a"), "b"),
        n("a"),
    ]
    assert [precedence(e) for e in levels] == sorted(precedence(e) for e in levels)
    assert len({precedence(e) for e in levels}) == len(levels)


def test_unknown_node_is_a_clear_error() -> None:
    class Strange(Expr):
        pass

    with pytest.raises(TypeError, match="Strange"):
        print_expr(Strange(S))


def test_dict_keys_that_start_with_a_name_are_parenthesized() -> None:
    # `{a: 1}` means the string key "a"; a Name key must not print that way.
    assert print_expr(DictExpr(S, [n("a")], [num(1)])) == "{(a): 1}"
    assert print_expr(DictExpr(S, [Member(S, n("a"), "b")], [num(1)])) == "{(a.b): 1}"
    assert print_expr(DictExpr(S, [Unary(S, "not", n("a"))], [num(1)])) == "{not a: 1}"
    assert print_expr(DictExpr(S, [ref("v", "k")], [num(1)])) == "{@v.k: 1}"


# ---------------------------------------------------------------- round trips through the parser


def roundtrip(text: str) -> str:
    expr, diagnostics = parse_expression(text)
    assert diagnostics == [], text
    printed = print_expr(expr)
    again, diagnostics = parse_expression(printed)
    assert diagnostics == [], printed
    assert tree_signature(again) == tree_signature(expr), (text, printed)
    return printed


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("@variables.x==True", "@variables.x == True"),
        ("(a+b)*c", "(a + b) * c"),
        ("a+(b*c)", "a + b * c"),
        ("((a))", "a"),
        ("a-(b-c)", "a - (b - c)"),
        ("not(a and b)", "not (a and b)"),
        ("-(1)", "-1"),
        ("- -1", "1"),  # the parser folds signs into number literals
        ("+ -1", "+ -1"),
        ("x if(a if b else c)else y", "x if (a if b else c) else y"),
        ("a<b<=c", "a < b <= c"),
        ("(a<b)<c", "(a < b) < c"),
        ("a is not None", "a is not None"),
        ("a not in [1,2]", "a not in [1, 2]"),
        ("len( @variables.items )>0", "len(@variables.items) > 0"),
        ("max(*@v.xs, 3)", "max(*@v.xs, 3)"),
        ("{name:'x'}".replace("'", '"'), '{"name": "x"}'),
        ("{(a):1}", "{(a): 1}"),
        ('"tab\\there \\"q\\""', '"tab\\there \\"q\\""'),
        ("2025-09-04", "2025-09-04"),
        ("2025-09-04T12:01:59.123Z", "2025-09-04T12:01:59.123Z"),
        ("5.", "5.0"),
        (".5", "0.5"),
        ("1e3", "1000.0"),
        ("(1).real", "(1).real"),
        ("@outputs.items[0].id", "@outputs.items[0].id"),
        ("a % b * c", "a % b * c"),
        ("...", "..."),
        ("@x.if", "@x.if"),
    ],
)
def test_roundtrip_examples(text: str, canonical: str) -> None:
    assert roundtrip(text) == canonical


# A generator of expression trees in the shapes the parser produces (it folds `-` into number
# literals and reads bare dict keys as strings, so those shapes are left out or normalised).
_ident = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,6}", fullmatch=True)
_name = _ident.filter(lambda w: w not in KEYWORDS)
_number = st.one_of(
    st.integers(min_value=-(10**20), max_value=10**20),
    st.floats(allow_nan=False, allow_infinity=False, width=64),
)
_leaf: st.SearchStrategy[Expr] = st.one_of(
    _number.map(lambda v: Literal(S, v, "number")),
    st.text(st.characters(blacklist_categories=["Cs"]), max_size=8).map(s),
    st.booleans().map(lambda v: Literal(S, v, "bool")),
    st.just(Literal(S, None, "none")),
    st.sampled_from(["2025-09-04", "2025-09-04T12:01", "2025-09-04T12:01:59Z"]).map(
        lambda v: Literal(S, v, "datetime" if "T" in v else "date")
    ),
    st.just(EllipsisExpr(S)),
    _ident.map(lambda w: AtName(S, w)),
    _name.map(n),
)


def _is_number(e: Expr) -> bool:
    return isinstance(e, Literal) and e.kind == "number"


def _extend(children: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
    items = st.lists(children, max_size=3)
    return st.one_of(
        st.builds(lambda o, w: Member(S, o, w), children, _ident),
        st.builds(lambda o, i: Index(S, o, i), children, children),
        st.builds(lambda f, a: Call(S, f, a), children, items),
        st.builds(
            lambda op, e: Unary(S, op, e),
            st.sampled_from(["-", "+", "not"]),
            children,
        ).filter(lambda u: not (u.op == "-" and _is_number(u.operand))),
        st.builds(lambda e: Spread(S, e), children),
        st.builds(
            lambda op, a, c: Binary(S, op, a, c),
            st.sampled_from(["+", "-", "*", "/", "%", "and", "or"]),
            children,
            children,
        ),
        st.builds(
            lambda left, pairs: Compare(S, left, [p[0] for p in pairs], [p[1] for p in pairs]),
            children,
            st.lists(
                st.tuples(
                    st.sampled_from(
                        ["==", "!=", "<", "<=", ">", ">=", "is", "is not", "in", "not in"]
                    ),
                    children,
                ),
                min_size=1,
                max_size=3,
            ),
        ),
        st.builds(lambda a, c, e: Ternary(S, a, c, e), children, children, children),
        items.map(lambda xs: ListExpr(S, xs)),
        st.lists(st.tuples(children, children), max_size=3).map(
            lambda kv: DictExpr(S, [k for k, _ in kv], [v for _, v in kv])
        ),
    )


expressions = st.recursive(_leaf, _extend, max_leaves=12)


# Hypothesis warns when the repr of this recursive strategy gets large; that is only cosmetic.
@pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisWarning")
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expressions)
def test_printed_expressions_parse_back_to_the_same_tree(expr: Expr) -> None:
    printed = print_expr(expr)
    again, diagnostics = parse_expression(printed)
    assert diagnostics == [], printed
    assert tree_signature(again) == tree_signature(expr), printed
    assert print_expr(again) == printed  # printing is idempotent
