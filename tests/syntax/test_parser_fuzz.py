"""Fuzzing the parser: mutated fixtures, hostile input, huge input, deep nesting.

Whatever the input, ``parse`` must return a Document without raising, every diagnostic (and
every node) must have a sane span, and the work must grow about linearly with the input.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from functools import cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentscript.diagnostics import Span
from agentscript.expr import parse_expression
from agentscript.source import normalise_newlines
from agentscript.syntax import Document, parse
from agentscript.syntax.tree import Block, ElseClause, ElseIf, Node
from conformance import fixture_files, read_text

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@cache
def fixtures() -> tuple[str, ...]:
    # A spread of sizes keeps examples cheap: every 9th fixture.
    return tuple(read_text(path) for path in fixture_files()[::9])


def check_span(span: Span, lines: int, what: object) -> None:
    assert 1 <= span.line <= lines + 1, (span, what)
    assert 1 <= span.end_line <= lines + 1, (span, what)
    assert span.column >= 1 and span.end_column >= 1, (span, what)
    assert (span.end_line, span.end_column) >= (span.line, span.column), (span, what)


def spans(value: object) -> Iterator[tuple[Span, object]]:
    """Every span in a tree (nodes, keys, expressions, interpolations, bindings)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(item)
            continue
        span = getattr(item, "span", None)
        if isinstance(span, Span):
            yield span, item
        slots = getattr(type(item), "__dataclass_fields__", None)
        if slots is None:
            continue
        for name in slots:
            if name in ("span", "comments", "trailing_comments"):
                continue
            child = getattr(item, name)
            if isinstance(child, list | Node | Block | ElseIf | ElseClause) or hasattr(
                child, "__dataclass_fields__"
            ):
                stack.append(child)


def parse_and_check(text: str) -> Document:
    doc = parse(text, "fuzz.agent")
    assert isinstance(doc, Document)
    lines = normalise_newlines(text).count("\n") + 1
    for diag in doc.diagnostics:
        check_span(diag.span, lines, diag.message)
        assert diag.message and diag.code
        assert diag.file == "fuzz.agent"
    for span, node in spans(doc.body):
        check_span(span, lines, type(node).__name__)
    return doc


# ---------------------------------------------------------------- mutations of fixtures


def _mutate(text: str, data: st.DataObject) -> str:
    lines = text.split("\n")
    for _ in range(data.draw(st.integers(1, 6), label="mutations")):
        if not lines:
            lines = [""]
        index = data.draw(st.integers(0, len(lines) - 1), label="line")
        action = data.draw(
            st.sampled_from(
                ["delete", "duplicate", "indent", "dedent", "tabs", "insert", "truncate", "swap"]
            ),
            label="action",
        )
        line = lines[index]
        if action == "delete":
            del lines[index]
        elif action == "duplicate":
            lines.insert(index, line)
        elif action == "indent":
            lines[index] = " " * data.draw(st.integers(1, 9)) + line
        elif action == "dedent":
            lines[index] = line.lstrip()
        elif action == "tabs":
            lines[index] = line.replace("    ", "\t")
        elif action == "insert":
            at = data.draw(st.integers(0, len(line)))
            junk = data.draw(st.text(min_size=1, max_size=8))
            lines[index] = line[:at] + junk + line[at:]
        elif action == "truncate":
            lines[index] = line[: data.draw(st.integers(0, len(line)))]
        else:
            other = data.draw(st.integers(0, len(lines) - 1))
            lines[index], lines[other] = lines[other], lines[index]
    return "\n".join(lines)


@FUZZ
@given(data=st.data())
def test_mutated_fixtures(data: st.DataObject) -> None:
    if not fixtures():
        pytest.skip("conformance corpus not available")
    text = data.draw(st.sampled_from(fixtures()), label="fixture")
    parse_and_check(_mutate(text, data))


@FUZZ
@given(data=st.data())
def test_truncated_fixtures(data: st.DataObject) -> None:
    """Cutting a file anywhere leaves open strings, templates, brackets and blocks."""
    if not fixtures():
        pytest.skip("conformance corpus not available")
    text = data.draw(st.sampled_from(fixtures()), label="fixture")
    parse_and_check(text[: data.draw(st.integers(0, len(text)), label="cut")])


@FUZZ
@given(
    data=st.data(),
    newline=st.sampled_from(["\n", "\r\n", "\r"]),
    bom=st.booleans(),
    tabs=st.booleans(),
)
def test_newlines_bom_and_tabs(data: st.DataObject, newline: str, bom: bool, tabs: bool) -> None:
    if not fixtures():
        pytest.skip("conformance corpus not available")
    text = data.draw(st.sampled_from(fixtures()), label="fixture")
    plain = parse(text)
    changed = text.replace("\n", newline)
    if tabs:
        changed = changed.replace("    ", "\t")
    if bom:
        changed = "\ufeff" + changed
    doc = parse_and_check(changed)
    if not tabs:
        # Newline style and a BOM change nothing.
        assert [d.format() for d in doc.diagnostics] == [d.format() for d in plain.diagnostics]
        assert len(doc.body.items) == len(plain.body.items)


_HOSTILE = st.lists(
    st.one_of(
        st.sampled_from(list(" \t\n\r:-|#@\"'{}[]()!=<>.,\\")),
        st.sampled_from(["if ", "else:", "run ", "set ", "with ", "->", "{!", "empty", "to "]),
        st.characters(),
    ),
    max_size=150,
).map("".join)


@FUZZ
@given(text=_HOSTILE)
def test_random_text(text: str) -> None:
    parse_and_check(text)


@FUZZ
@given(raw=st.binary(max_size=300))
def test_random_bytes_decoded(raw: bytes) -> None:
    parse_and_check(raw.decode("utf-8", errors="replace"))
    parse_and_check(raw.decode("latin-1"))


@FUZZ
@given(text=_HOSTILE)
def test_random_expressions(text: str) -> None:
    expr, diagnostics = parse_expression(text, line=2, column=3)
    lines = normalise_newlines(text).count("\n") + 2
    check_span(expr.span, lines, expr)
    for diag in diagnostics:
        check_span(diag.span, lines, diag.message)


# ---------------------------------------------------------------- pathological shapes


@pytest.mark.parametrize(
    "text",
    [
        'a: "never closed\nb: 1\n',
        "a: |\n    text {!@variables.x\n    more {!\n",
        "a: ->\n    | {!{!{!{!{!\n",
        "a: [1, 2\nb: {\n",
        "a: ->\n    if (x and (y:\n        run @a.b\n",
        "a:\n" + " " * 3 + "b:\n" + "\t" * 2 + "c: 1\n",
        "\x00\x01\x02: \x7f\n",
        "\ufeff\ufeff: 1\n",
        "\u202e\u2028: 1\u2029\n",
        "-\n-\n - \n-- -\n",
        "else:\n    run @a.b\nelse if x:\n",
        "a: ->\n    " + "if x:\n    " * 3,
        "x:" + ":" * 1000,
    ],
)
def test_hostile_shapes(text: str) -> None:
    doc = parse_and_check(text)
    if "\x00" not in text and "\ufeff\ufeff" not in text:
        assert doc.has_errors or doc.diagnostics or doc.body.items


def test_deep_block_nesting_10000() -> None:
    # One more space per level: 50 MB of indentation, all of it below the nesting limit.
    text = "".join(" " * i + f"k{i}:\n" for i in range(10_000))
    doc = parse_and_check(text)
    assert any(d.code == "nesting-too-deep" for d in doc.diagnostics)


def test_deep_if_nesting() -> None:
    text = "a: ->\n" + "".join(" " * (i + 1) + "if x:\n" for i in range(2000))
    text += " " * 2001 + "run @actions.go\n"
    doc = parse_and_check(text)
    assert any(d.code == "nesting-too-deep" for d in doc.diagnostics)


@pytest.mark.parametrize("open_, close", [("(", ")"), ("[", "]"), ("{", "}"), ("f(", ")")])
def test_deep_bracket_nesting_10000(open_: str, close: str) -> None:
    inner = "1" if open_ != "{" else "a: 1"
    text = "v: " + open_ * 10_000 + inner + close * 10_000 + "\n"
    doc = parse_and_check(text)
    assert any("nested too deeply" in d.message for d in doc.diagnostics)
    _, diagnostics = parse_expression(open_ * 10_000 + inner + close * 10_000)
    assert diagnostics


def test_deep_unary_nesting() -> None:
    for prefix in ("not ", "-", "+", "*"):
        parse_and_check("v: " + prefix * 10_000 + "1\n")


def test_blocks_and_brackets_nested_together() -> None:
    """Deep blocks plus deep brackets must not exhaust Python's recursion limit."""
    depth = 60
    text = "a: ->\n" + "".join(" " * (i + 1) + "if x:\n" for i in range(depth))
    text += " " * (depth + 1) + "set @v.x = " + "[" * 60 + "1" + "]" * 60 + "\n"
    parse_and_check(text)


# ---------------------------------------------------------------- size and linearity


def _repeat_to(text: str, size: int) -> str:
    return (text + "\n") * (size // (len(text) + 1) + 1)


def _work(fn: Callable[[], object]) -> int:
    """How many Python and C function calls ``fn`` makes: a count of work that, unlike a
    timing, does not depend on what else the machine is doing (the timing version of this test
    failed under load)."""
    calls = 0

    def count(_frame: object, event: str, _arg: object) -> None:
        nonlocal calls
        if event in ("call", "c_call"):
            calls += 1

    sys.setprofile(count)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return calls


def test_ten_megabytes() -> None:
    if not fixtures():
        pytest.skip("conformance corpus not available")
    # Many topics with the same names: a checker problem, not a parser one.
    text = _repeat_to(max(fixtures(), key=len), 10_000_000)
    doc = parse(text)
    assert not doc.has_errors
    assert len(doc.body.items) > 100


# Each input grows with n inside one structure (one template, one line, one block), so
# quadratic work inside a structure shows up, not just across repeated structures.
LINEARITY_INPUTS: dict[str, Callable[[int], str]] = {
    "fixtures": lambda n: "\n".join(fixtures()[: max(1, n // 100)]) if fixtures() else "a: 1",
    "template lines": lambda n: "a: |\n" + "    line {!@v.x} text\n" * n,
    "template line": lambda n: "a: |\n    " + "word {!@v.x} " * n,
    "open interpolations": lambda n: "a: ->\n    | " + "{!" * n,
    "unclosed brackets": lambda n: "a: " + "(" * 30 + "\n" + "    x,\n" * n,
    "comments left of block": lambda n: "t:\n   a: 1\n" + "#c\n" * n + "   b: 2\n",
    "errors": lambda n: "a b c d\n" * n + "  :\n" * n,
    "long string": lambda n: 'a: "' + "x" * (20 * n) + "\n",
    "flat entries": lambda n: "".join(f"k{i}: @v.x{i}\n" for i in range(n)),
    "deep blocks": lambda n: "".join(" " * i + f"k{i}:\n" for i in range(n // 10)),
}


@pytest.mark.parametrize("name", sorted(LINEARITY_INPUTS))
def test_work_grows_linearly(name: str) -> None:
    build = LINEARITY_INPUTS[name]
    small = build(300)
    large = build(3000)
    parse(small)  # warm caches (compiled patterns, memoised helpers) out of the count
    w_small = _work(lambda: parse(small))
    w_large = _work(lambda: parse(large))
    # 10x the input may take at most 30x the calls: generous, but quadratic work fails it.
    assert w_large < 30 * max(w_small, 100), (w_small, w_large)
