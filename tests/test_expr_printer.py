"""Tests for the expression printer: canonical text, minimal parentheses, round trips."""

from __future__ import annotations

import datetime as dt

import pytest

from agentscript.diagnostics import UNKNOWN_SPAN
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
from agentscript.expr.printer import format_number, format_string, precedence, print_expr

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
    assert format_string("bell\x07") == '"bell\\u0007"'
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
    assert print_expr(DictExpr(S, [s("k"), n("v")], [num(1), num(2)])) == '{"k": 1, v: 2}'
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
        (b("or", b("and", n("a"), n("b")), n("c")), "a and b or c"),
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
        (Ternary(S, n("a"), n("c"), Ternary(S, n("b"), n("d"), n("e"))), "a if c else b if d else e"),
        (Ternary(S, Ternary(S, n("a"), n("b"), n("c")), n("d"), n("e")), "(a if b else c) if d else e"),
        (Ternary(S, n("a"), Ternary(S, n("b"), n("c"), n("d")), n("e")), "a if (b if c else d) else e"),
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
