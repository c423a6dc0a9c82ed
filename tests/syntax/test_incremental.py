"""``syntax.incremental``: re-parsing after an edit gives exactly what a full parse gives.

Random edits of real corpus files (hypothesis) compare the incremental result with a full parse
of the same text: the whole tree with every span, comment and blank-line count, and every
diagnostic with its position, the checker's and the lints' included. Unit tests pin the cases
where an unchanged-looking block must be parsed again.
"""

from __future__ import annotations

import dataclasses
from functools import cache

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentscript.authoring.index import LiveDocument, build_index, document_diagnostics
from agentscript.diagnostics import Diagnostic
from agentscript.syntax import Document, parse
from agentscript.syntax.incremental import ParseState, full_parse, reparse
from conformance import (
    error_recovery_files,
    example_files,
    fixture_files,
    read_text,
)


def exact(value: object) -> object:
    """Everything about a tree, spans and layout included, as nested tuples."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (
            type(value).__name__,
            *((f.name, exact(getattr(value, f.name))) for f in dataclasses.fields(value)),
        )
    if isinstance(value, list | tuple):
        return tuple(exact(v) for v in value)
    if isinstance(value, float | int) and not isinstance(value, bool):
        return (type(value).__name__, value)
    return value


def shown(diagnostics: list[Diagnostic]) -> list[tuple[object, ...]]:
    return [(d.code, d.severity, d.span, d.message, d.file, d.notes) for d in diagnostics]


def assert_same(state: ParseState, text: str, path: str | None = None) -> Document:
    full = parse(text, path)
    assert shown(state.document.diagnostics) == shown(full.diagnostics)
    assert exact(state.document) == exact(full)
    return full


def edit(text: str, at: int, remove: int, insert: str) -> str:
    return text[:at] + insert + text[at + remove :]


# ---------------------------------------------------------------- random edits of the corpus


@cache
def corpus() -> tuple[str, ...]:
    files = [*fixture_files()[::7], *example_files(), *error_recovery_files()]
    return tuple(read_text(path) for path in files)


FUZZ = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# Text an author types, and text that changes structure: newlines, indentation, block heads,
# brackets and quotes left open, comments, `else` lines.
SNIPPETS = [
    "x",
    " ",
    "\n",
    "\n\n",
    "  ",
    "\t",
    "\n  ",
    "#",
    "# note\n",
    ":",
    "|",
    "- ",
    "[",
    "]",
    "(",
    '"',
    "{!",
    "}",
    "\\\n",
    "if @variables.x:\n",
    "else:\n",
    "subagent extra:\n",
    '  description: "d"\n',
    "variables:\n  n: mutable number = 1\n",
    "    run @actions.go\n",
    "-> ",
]
EDIT = st.tuples(
    st.floats(min_value=0.0, max_value=1.0),
    st.sampled_from([0, 0, 0, 1, 2, 5, 30, 200]),
    st.one_of(
        st.sampled_from(SNIPPETS),
        st.text(alphabet=' \t\n:|-#@.[](){}!"=abxyz_0', max_size=12),
    ),
)


def apply(text: str, change: tuple[float, int, str]) -> str:
    where, remove, insert = change
    at = min(int(where * len(text)), len(text))
    return edit(text, at, remove, insert)


@pytest.mark.skipif(not fixture_files(), reason="conformance corpus not available")
@FUZZ
@given(
    source=st.integers(min_value=0),
    changes=st.lists(EDIT, min_size=1, max_size=4),
)
def test_random_edits_parse_as_a_full_parse_does(
    source: int, changes: list[tuple[float, int, str]]
) -> None:
    texts = corpus()
    text = texts[source % len(texts)]
    state = full_parse(text, "corpus.agent")
    assert_same(state, text, "corpus.agent")
    for change in changes:
        text = apply(text, change)
        state = reparse(state, text)
        assert_same(state, text, "corpus.agent")


@pytest.mark.skipif(not fixture_files(), reason="conformance corpus not available")
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    source=st.integers(min_value=0),
    changes=st.lists(EDIT, min_size=1, max_size=3),
)
def test_random_edits_give_the_editor_the_diagnostics_of_a_full_check(
    source: int, changes: list[tuple[float, int, str]]
) -> None:
    # What the language server publishes: parser, checker and lints, positions included.
    texts = corpus()
    text = texts[source % len(texts)]
    live = LiveDocument("corpus.agent")
    live.update(text)
    for change in changes:
        text = apply(text, change)
        incremental = live.update(text)
        full = build_index(text, "corpus.agent")
        assert shown(document_diagnostics(incremental)) == shown(document_diagnostics(full))
        assert [(s.kind, s.name, s.definition, s.references) for s in incremental.symbols] == [
            (s.kind, s.name, s.definition, s.references) for s in full.symbols
        ]


@pytest.mark.skipif(not fixture_files(), reason="conformance corpus not available")
def test_typing_in_the_middle_of_the_largest_fixture_reparses_one_block() -> None:
    path = max(fixture_files(), key=lambda p: p.stat().st_size)
    text = read_text(path)
    state = full_parse(text, str(path))
    middle = text.index("\n", len(text) // 2)
    typed = edit(text, middle - 2, 0, "x")
    after = reparse(state, typed)
    assert after.reused == len(state.items) - 1
    assert_same(after, typed, str(path))
    # A new line moves every block below it: they are reused, moved, not parsed again.
    entered = edit(text, middle, 0, "\n        ")
    moved = reparse(state, entered)
    assert moved.reused == len(state.items) - 1
    assert_same(moved, entered, str(path))


# ---------------------------------------------------------------- when a block is parsed again

AGENT = """\
system:
    instructions: "Help."

config:
    developer_name: "demo"

variables:
    n: mutable number = 0

start_agent main:
    description: "Main"
    reasoning:
        instructions: ->
            | Count {!@variables.n}.
"""


def test_an_edit_inside_a_block_reuses_the_others() -> None:
    state = full_parse(AGENT)
    assert len(state.items) == 4
    text = AGENT.replace('"demo"', '"demo2"')
    after = reparse(state, text)
    assert after.reused == 3
    assert_same(after, text)


def test_an_edit_that_joins_two_blocks_parses_both_again() -> None:
    state = full_parse(AGENT)
    text = AGENT.replace('"demo"\n\nvariables:', '"demo" variables:')
    after = reparse(state, text)
    assert after.reused == 2  # system and start_agent
    assert_same(after, text)


def test_indenting_the_first_block_changes_every_block_and_parses_again() -> None:
    state = full_parse(AGENT)
    text = "  " + AGENT
    after = reparse(state, text)
    full = assert_same(after, text)
    assert any(d.code == "indentation-error" for d in full.diagnostics)


def test_a_block_is_parsed_again_when_the_line_after_it_changes() -> None:
    # An open bracket goes on over a following line that starts with the closing one: the
    # line after a block is part of what its parse read.
    before = "a: [1,\nb: 2\n"
    state = full_parse(before)
    assert any(d.is_error for d in state.document.diagnostics)
    text = "a: [1,\n]\n"
    after = reparse(state, text)
    assert after.reused == 0
    full = assert_same(after, text)
    assert not full.diagnostics


def test_a_block_after_an_error_on_its_first_line_is_parsed_again() -> None:
    # The parser reports one error per line: an earlier error on a block's first line hides
    # the block's own. When that error goes away, the block's error must appear.
    before = "  a: 1\nb: 2 3\n"
    state = full_parse(before)
    assert [d.code for d in state.document.diagnostics] == ["indentation-error"]
    text = "a: 1\nb: 2 3\n"
    after = reparse(state, text)
    assert after.reused == 0
    full = assert_same(after, text)
    assert [d.code for d in full.diagnostics] == ["syntax-error"]
    # and back
    again = reparse(after, before)
    assert_same(again, before)


def test_joining_a_block_to_the_line_above_parses_it_again() -> None:
    state = full_parse("a: 1\nb: 2\n")
    text = "a: 1b: 2\n"
    after = reparse(state, text)
    assert after.reused == 0
    assert_same(after, text)


def test_a_block_moved_to_the_first_line_is_reused() -> None:
    state = full_parse("x\nb:\n    c: 2\n")
    text = "b:\n    c: 2\n"
    after = reparse(state, text)
    assert after.reused == 1
    full = assert_same(after, text)
    assert full.body.items[0].span.line == 1


def test_appending_after_the_last_block_parses_it_again() -> None:
    before = "a:\n    b: 1\n"
    state = full_parse(before)
    text = before + "    c: 2\n"
    after = reparse(state, text)
    assert after.reused == 0
    assert_same(after, text)


def test_an_else_after_a_top_level_if_belongs_to_it() -> None:
    before = "if @variables.x:\n    a: 1\nb: 2\n"
    state = full_parse(before)
    text = before.replace("b: 2", "else:\n    b: 2")
    after = reparse(state, text)
    assert after.reused == 0
    assert_same(after, text)


def test_comments_and_blank_lines_between_blocks_are_kept() -> None:
    state = full_parse(AGENT)
    text = AGENT.replace("\nvariables:", "\n# the state\n\n\nvariables:")
    after = reparse(state, text)
    # config read up to the next content line, so it is parsed again; the others are not.
    assert after.reused == 3
    full = assert_same(after, text)
    assert full.body.items[2].comments == [" the state"]


def test_crlf_tabs_and_a_bom_parse_as_a_full_parse_does() -> None:
    tabbed = AGENT.replace("    ", "\t")
    state = full_parse("\ufeff" + tabbed.replace("\n", "\r\n"))
    text = "\ufeff" + tabbed.replace('"demo"', '"x"').replace("\n", "\r\n")
    after = reparse(state, text)
    assert after.reused == 3
    assert_same(after, text)
    assert after.text == tabbed.replace('"demo"', '"x"')


def test_the_same_text_or_another_path_parses_as_a_full_parse_does() -> None:
    state = full_parse(AGENT, "a.agent")
    same = reparse(state, AGENT)
    assert_same(same, AGENT, "a.agent")
    other = reparse(state, AGENT, "b.agent")
    assert other.document.path == "b.agent"
    assert other.reused == 0
    assert_same(other, AGENT, "b.agent")


def test_the_previous_parse_is_left_as_it_was() -> None:
    state = full_parse(AGENT)
    snapshot = exact(state.document)
    reparse(state, "# header\n" + AGENT.replace('"Main"', '"Other"'))
    reparse(state, AGENT.replace("config:", "config: 1"))
    assert exact(state.document) == snapshot


def test_nothing_raises_on_empty_and_odd_texts() -> None:
    state = full_parse("")
    for text in ["", "\n", "a", "   ", "\t\n\t", "a:\n  b", "- x\n- y", "a: [\n", ""]:
        state = reparse(state, text)
        assert_same(state, text)
