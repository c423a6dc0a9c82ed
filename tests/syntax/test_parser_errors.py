"""Error recovery on the 36 broken conformance scripts, and regressions for fixed parser bugs."""

from __future__ import annotations

import pytest

from agentscript.expr.nodes import Literal
from agentscript.syntax import parse
from agentscript.syntax.tree import (
    Entry,
    ExprValue,
    IfStmt,
    RunStmt,
    SequenceItem,
    TemplateStmt,
)
from conformance import ERROR_RECOVERY, ERROR_RECOVERY_DIR, error_recovery_files, read_text

PARSER_LEVEL = sorted(name for name, e in ERROR_RECOVERY.items() if e.stage == "parser")
CHECKER_LEVEL = sorted(name for name, e in ERROR_RECOVERY.items() if e.stage == "checker")


def test_expectations_cover_every_broken_file() -> None:
    if not error_recovery_files():
        pytest.skip("conformance corpus not available")
    assert sorted(p.name for p in error_recovery_files()) == sorted(ERROR_RECOVERY)
    assert len(ERROR_RECOVERY) == 36


@pytest.mark.parametrize("name", PARSER_LEVEL)
def test_parser_reports_error_on_defect_line(name: str) -> None:
    path = ERROR_RECOVERY_DIR / name
    if not path.exists():
        pytest.skip("conformance corpus not available")
    doc = parse(read_text(path), name)
    errors = [d for d in doc.diagnostics if d.is_error]
    assert errors, "no error reported"
    # The first error is the defect itself, not a cascade from it.
    assert errors[0].span.line == ERROR_RECOVERY[name].line, [d.format() for d in errors]
    assert all(d.file == name for d in errors)


@pytest.mark.parametrize("name", CHECKER_LEVEL)
def test_semantic_defects_parse_cleanly(name: str) -> None:
    """These files are well-formed text; the checker reports their defect."""
    path = ERROR_RECOVERY_DIR / name
    if not path.exists():
        pytest.skip("conformance corpus not available")
    doc = parse(read_text(path), name)
    assert not doc.has_errors, [d.format() for d in doc.diagnostics]


def _errors(text: str) -> list[tuple[int, str]]:
    return [(d.span.line, d.code) for d in parse(text).diagnostics if d.is_error]


def test_one_error_per_defect_line() -> None:
    # 'set' without '=' used to give a second error for the leftover value.
    text = "a: ->\n    set @variables.x @outputs.y\n"
    assert _errors(text) == [(2, "syntax-error")]


def test_unclosed_bracket_reported_where_it_opens() -> None:
    text = 'v:\n    items: mutable list[string] = ["a", "b"\n        description: "x"\n'
    diags = [d for d in parse(text).diagnostics if d.is_error]
    assert [(d.span.line, d.span.column) for d in diags] == [(2, 35)]
    assert "never closed" in diags[0].message


def test_unclosed_paren_in_condition_keeps_the_body() -> None:
    text = "a: ->\n    if (@v.x > 5 and (@v.y < 10):\n        run @actions.p\n"
    doc = parse(text)
    assert _errors(text) == [(2, "syntax-error")]
    entry = doc.body.items[0]
    assert isinstance(entry, Entry) and entry.block is not None
    stmt = entry.block.items[0]
    assert isinstance(stmt, IfStmt)
    assert isinstance(stmt.body.items[0], RunStmt)


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("a: ->\n", 1),  # '->' with no procedure
        ("topic test extra:\n    description: 'x'\n".replace("'", '"'), 1),  # 3-word key
        ("my-variable: 1\n", 1),  # '-' is not part of a name
        ("a: ->\n    for item in list:\n        run @actions.go\n", 2),  # no 'for'
        ('if: "value"\nother: 1\n', 1),  # keyword as key
        ('v: "hello\\xworld"\n', 1),  # unknown escape
        ("x: \u00b2\n", 1),  # a digit int() cannot read used to crash the lexer
    ],
)
def test_rejected_input(text: str, line: int) -> None:
    errors = _errors(text)
    assert errors and errors[0][0] == line


@pytest.mark.parametrize(
    "text",
    [
        "config:\n    items:\n        empty\n",  # 'empty' as the block
        "topic a:\n   empty\n",
        "key: a == b \\\n  and c != d\n",  # '==' is not a declaration default
        'task: f({\n    state: "done",  # comment\n\n    n: None\n  })\nnext: 1\n',
        "people: [\n  {name: 1},\n      {name: 2}\n]\n",
        "t:\n   a: 1\n\n#c\n   b: 2\n",  # comment left of the block
        "x: empty  # nothing\n",
        '"quoted key": 1\n',
    ],
)
def test_accepted_input(text: str) -> None:
    assert _errors(text) == []


def test_empty_block_is_empty_value() -> None:
    doc = parse("config:\n    items:\n        empty\n")
    config = doc.body.items[0]
    assert isinstance(config, Entry) and config.block is not None
    items = config.block.items[0]
    assert isinstance(items, Entry)
    assert type(items.value).__name__ == "EmptyValue" and items.block is None


def test_multiline_call_spans_lines() -> None:
    doc = parse("task: f(\n  a,\n      b\n)\nnext: 1\n")
    first, second = doc.body.items
    assert isinstance(first, Entry) and first.span.end_line == 4
    assert isinstance(second, Entry) and second.span.line == 5


def test_comment_left_of_block_stays_inside() -> None:
    doc = parse("t:\n   a: 1\n\n#c\n   b: 2\nu: 3\n")
    t = doc.body.items[0]
    assert isinstance(t, Entry) and t.block is not None
    assert [str(e.key) for e in t.block.entries()] == ["a", "b"]
    b = t.block.items[1]
    assert b.comments == ["c"]


def test_blank_lines_after_nested_block_belong_to_next_sibling() -> None:
    doc = parse("a:\n    b:\n        c: 1\n\n\n    d: 2\n\n# top\n\ne: 3\n")
    a, e = doc.body.items
    assert isinstance(a, Entry) and a.block is not None
    d = a.block.items[1]
    assert d.blank_lines_before == 2
    assert e.blank_lines_before == 2 and e.comments == [" top"]


@pytest.mark.parametrize(
    "text",
    [
        'list:\n  - a: "hello"\n    b: 3\n',  # YAML alignment
        'list:\n  - a: "hello"\n      b: 3\n',  # deeper, as in the tree-sitter corpus
    ],
)
def test_sequence_item_mapping_keeps_siblings(text: str) -> None:
    doc = parse(text)
    assert not doc.has_errors
    outer = doc.body.items[0]
    assert isinstance(outer, Entry) and outer.block is not None
    item = outer.block.items[0]
    assert isinstance(item, SequenceItem) and item.block is not None
    keys = [str(e.key) for e in item.block.entries()]
    assert keys == ["a", "b"]
    first = item.block.items[0]
    assert isinstance(first, Entry) and first.block is None


def test_sequence_item_first_entry_own_block() -> None:
    doc = parse("l:\n  - a:\n      x: 1\n    b: 2\n  - c: |\n      text\n    d: 4\n")
    assert not doc.has_errors
    outer = doc.body.items[0]
    assert isinstance(outer, Entry) and outer.block is not None
    first, second = outer.block.items
    assert isinstance(first, SequenceItem) and first.block is not None
    a = first.block.items[0]
    assert isinstance(a, Entry) and a.block is not None
    assert [str(e.key) for e in a.block.entries()] == ["x"]
    assert [str(e.key) for e in first.block.entries()] == ["a", "b"]
    assert isinstance(second, SequenceItem) and second.block is not None
    assert [str(e.key) for e in second.block.entries()] == ["c", "d"]


def test_long_template_is_joined_once() -> None:
    lines = "".join(f"    line {i}\n" for i in range(2000))
    doc = parse(f"a: ->\n  |\n{lines}")
    entry = doc.body.items[0]
    assert isinstance(entry, Entry) and entry.block is not None
    stmt = entry.block.items[0]
    assert isinstance(stmt, TemplateStmt)
    (text,) = stmt.template.parts
    assert isinstance(text, str) and text.count("\n") == 1999


def test_error_file_paths_are_recorded() -> None:
    doc = parse("a b c d\n", "broken.agent")
    assert doc.diagnostics and all(d.file == "broken.agent" for d in doc.diagnostics)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ('k:\n    - "\\":"\n', '":'),  # an escaped quote, then a colon, inside the string
        ('k:\n    - "a\\": b"\n', 'a": b'),
    ],
)
def test_sequence_item_string_with_an_escaped_quote_before_a_colon(text: str, value: str) -> None:
    """Found by the formatter round trip: ``- "\\":"`` is one string, not the quoted key
    ``\\`` followed by ``:`` and an unterminated string."""
    doc = parse(text)
    assert not doc.has_errors, [d.format() for d in doc.diagnostics]
    outer = doc.body.items[0]
    assert isinstance(outer, Entry) and outer.block is not None
    (item,) = outer.block.items
    assert isinstance(item, SequenceItem) and item.block is None
    assert isinstance(item.value, ExprValue) and isinstance(item.value.expr, Literal)
    assert item.value.expr.value == value


def test_sequence_item_quoted_key_ending_in_an_escaped_backslash_is_still_a_key() -> None:
    doc = parse('k:\n    - "a\\\\": 1\n')
    assert not doc.has_errors
    outer = doc.body.items[0]
    assert isinstance(outer, Entry) and outer.block is not None
    (item,) = outer.block.items
    assert isinstance(item, SequenceItem) and item.block is not None
    assert [e.key.parts for e in item.block.entries()] == [["a\\\\"]]
