"""Expression-level parser pieces: the lexer, ``quick_parse``, ``parse_expression``, ``Source``."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentscript.diagnostics import Span
from agentscript.expr import ExprParser, parse_expression
from agentscript.expr.lexer import Lexer
from agentscript.expr.nodes import AtName, Call, DictExpr, ListExpr, Literal, Member, Name
from agentscript.expr.parser import quick_parse
from agentscript.source import Source, normalise_newlines


def kinds(text: str, start: int = 0) -> list[tuple[str, str]]:
    return [(t.kind, t.text) for t in Lexer(text, start).tokens()]


def test_lexer_tokens() -> None:
    assert kinds('@a.b >= 1.5 and "x"') == [
        ("AT", "a"),
        ("OP", "."),
        ("IDENT", "b"),
        ("OP", ">="),
        ("NUMBER", "1.5"),
        ("KEYWORD", "and"),
        ("STRING", '"x"'),
        ("END", ""),
    ]
    assert kinds("2024-01-05 5-3") == [
        ("DATE", "2024-01-05"),
        ("NUMBER", "5"),
        ("OP", "-"),
        ("NUMBER", "3"),
        ("END", ""),
    ]


def test_lexer_stops_at_line_end_and_comment() -> None:
    assert kinds("a # b\nc") == [("IDENT", "a"), ("END", "")]
    assert kinds("a \\\n b") == [("IDENT", "a"), ("IDENT", "b"), ("END", "")]


def test_lexer_joins_lines_inside_brackets() -> None:
    text = "f(a,  # note\n\n   b\n)\nnext"
    assert kinds(text) == [
        ("IDENT", "f"),
        ("OP", "("),
        ("IDENT", "a"),
        ("OP", ","),
        ("IDENT", "b"),
        ("OP", ")"),
        ("END", ""),
    ]


def test_lexer_does_not_join_shallower_lines_or_after_colon() -> None:
    # The continuation must be indented deeper than the first line (or start with a closer).
    assert kinds("  f(a,\n  b)")[-2:] == [("OP", ","), ("END", "")]
    assert kinds("if (x:\n    run")[-2:] == [("OP", ":"), ("END", "")]


def test_lexer_errors() -> None:
    tokens = Lexer('\'x\' "a\\qb" "open', 0).tokens()
    errors = [t for t in tokens if t.kind == "ERROR"]
    assert len(errors) == 3
    assert "double quotes" in str(errors[0].value)
    assert "unknown escape '\\q'" in str(errors[1].value)
    assert "unterminated" in str(errors[2].value)


def test_lexer_non_ascii_digit_is_an_error_token() -> None:
    assert kinds("\u00b2")[0] == ("ERROR", "\u00b2")
    assert kinds("\u0663")[0] == ("ERROR", "\u0663")  # Arabic-Indic three


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('"abc"', Literal),
        ("12", Literal),
        ("-3.5", Literal),
        ("True", Literal),
        ("None", Literal),
        ("@variables.x", Member),
        ("@actions", AtName),
        ("name", Name),
        ("a.b.c  # comment", Member),
    ],
)
def test_quick_parse_simple_values(text: str, expected: type) -> None:
    quick = quick_parse(Source(text), 0)
    assert quick is not None
    expr, end = quick
    assert isinstance(expr, expected)
    full = ExprParser(Source(text), 0)
    assert repr(full.parse()) == repr(expr)
    assert end == full.tok.start or text[end:].strip().startswith("#") or end == len(text)


@pytest.mark.parametrize(
    "text", ['"a\\n"', "a + b", "2024-01-01", "and", "True.x", "x to y", "f()", "1e5", "12:30"]
)
def test_quick_parse_declines(text: str) -> None:
    assert quick_parse(Source(text), 0) is None


_NAME = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,6}", fullmatch=True)
_SIMPLE = st.one_of(
    st.builds(lambda s: f'"{s}"', st.text(st.characters(blacklist_characters='"\\\n\r'))),
    st.integers(-(10**6), 10**6).map(str),
    st.floats(0, 1e6, allow_nan=False).map(lambda f: f"{f:.3f}"),
    st.lists(_NAME, min_size=1, max_size=4).map(".".join),
    st.lists(_NAME, min_size=1, max_size=4).map(lambda ns: "@" + ".".join(ns)),
    st.sampled_from(["True", "False", "None", "and", "not", "if"]),
)


@given(
    value=_SIMPLE,
    prefix=st.sampled_from(["", "x: ", "\n  k: "]),
    suffix=st.sampled_from(["", "  ", " # c", "\n"]),
)
@settings(max_examples=300, deadline=None)
def test_quick_parse_agrees_with_full_parser(value: str, prefix: str, suffix: str) -> None:
    source = Source(prefix + value + suffix)
    start = len(prefix)
    quick = quick_parse(source, start)
    if quick is None:
        return
    full = ExprParser(source, start)
    expr = full.parse()
    assert not full.diagnostics
    assert repr(quick[0]) == repr(expr)


def test_parse_expression_positions_and_errors() -> None:
    expr, diags = parse_expression("@a.b == 1", line=3, column=10)
    assert diags == []
    assert expr.span == Span(3, 10, 3, 19)
    _, diags = parse_expression("a b")
    assert [d.message for d in diags] == ["unexpected 'b' after the expression"]
    _, diags = parse_expression("a # b")
    assert [d.message for d in diags] == ["unexpected '#' in expression"]


def test_parse_expression_multiline_literals() -> None:
    expr, diags = parse_expression('[\n  {name: "a"},\n  {name: "b"}\n]')
    assert diags == []
    assert isinstance(expr, ListExpr) and len(expr.items) == 2
    assert all(isinstance(item, DictExpr) for item in expr.items)
    expr, diags = parse_expression("f(\n  1,\n  2,\n)")
    assert diags == [] and isinstance(expr, Call) and len(expr.args) == 2


def test_parse_expression_unclosed_bracket_on_later_line() -> None:
    _, diags = parse_expression("f(1,\n  2 3")
    assert [(d.span.line, d.span.column) for d in diags] == [(1, 2)]
    assert "never closed" in diags[0].message


def test_parse_expression_deep_nesting_is_an_error_not_a_crash() -> None:
    _, diags = parse_expression("(" * 5000 + "1" + ")" * 5000)
    assert diags and "nested too deeply" in diags[0].message


def test_source_spans() -> None:
    source = Source("ab\ncd\n")
    assert source.line_col(0) == (1, 1)
    assert source.line_col(4) == (2, 2)
    assert source.span(1, 4) == Span(1, 2, 2, 2)
    assert source.span(3, 5) == Span(2, 1, 2, 3)
    assert source.span(5, 2) == Span(2, 3, 2, 3)  # an end before the start is empty
    shifted = Source("x\ny", first_line=10, first_column=5)
    assert shifted.span(0, 1) == Span(10, 5, 10, 6)
    assert shifted.span(2, 3) == Span(11, 1, 11, 2)


def test_normalise_newlines() -> None:
    assert normalise_newlines("\ufeffa\r\nb\rc\n") == "a\nb\nc\n"
    assert normalise_newlines("plain") == "plain"
