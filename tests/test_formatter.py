"""Tests for the canonical formatter (``agentscript fmt``) and the tree comparison helpers."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentscript.diagnostics import Span
from agentscript.expr.nodes import AtName, Binary, Compare, EllipsisExpr, Literal, Member
from agentscript.syntax import formatter as formatter_module
from agentscript.syntax import parse
from agentscript.syntax.compare import comment_texts, tree_signature
from agentscript.syntax.formatter import format_document, format_text
from agentscript.syntax.tree import (
    Block,
    Document,
    ElseClause,
    ElseIf,
    EmptyValue,
    Entry,
    ExprValue,
    IfStmt,
    Key,
    RunStmt,
    SequenceItem,
    SetStmt,
    Template,
    TemplateStmt,
    TransitionStmt,
    TypeRef,
    VarDecl,
    WithBinding,
    WithStmt,
)

CONFORMANCE = Path("/work/shared/conformance/agentscript")
REPO = Path(__file__).resolve().parent.parent
AGENT_FILES = sorted(
    [
        *CONFORMANCE.glob("fixtures/*.agent"),
        *CONFORMANCE.glob("examples/*.agent"),
        *REPO.glob("examples/**/*.agent"),
    ]
)


def fmt(text: str) -> str:
    out, diagnostics = format_text(text)
    assert not any(d.is_error for d in diagnostics), [d.format() for d in diagnostics]
    return out


# ---------------------------------------------------------------- the whole corpus


@pytest.mark.skipif(not AGENT_FILES, reason="conformance corpus not available")
@pytest.mark.parametrize("path", AGENT_FILES, ids=lambda p: p.name)
def test_corpus_file_formats_idempotently_and_keeps_its_tree(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    original = parse(text, str(path))
    assert not original.has_errors
    once, diagnostics = format_text(text, str(path))
    assert not any(d.code == "fmt-unsafe" for d in diagnostics)
    reparsed = parse(once)
    assert not reparsed.has_errors
    assert tree_signature(reparsed) == tree_signature(original)
    assert comment_texts(reparsed) == comment_texts(original)
    assert fmt(once) == once
    assert once.endswith("\n") and not once.endswith("\n\n")
    assert "\t" not in "".join(line[: len(line) - len(line.lstrip())] for line in once.split("\n"))


def _corpus_cases() -> list[tuple[str, str]]:
    """Inputs of the parser corpus (``====`` headers, input, ``---``, tree) and broken files."""
    cases: list[tuple[str, str]] = []
    for path in sorted(CONFORMANCE.glob("parser-corpus/*.txt")):
        chunks = re.split(r"^=+\n(.*)\n=+\n", path.read_text(encoding="utf-8"), flags=re.M)
        for name, body in zip(chunks[1::2], chunks[2::2], strict=True):
            cases.append((f"{path.stem}: {name}", body.split("\n---\n")[0]))
    for path in sorted(CONFORMANCE.glob("error-recovery/*")):
        cases.append((path.name, path.read_text(encoding="utf-8")))
    return cases


CORPUS_CASES = _corpus_cases()


@pytest.mark.skipif(not CORPUS_CASES, reason="conformance corpus not available")
@pytest.mark.parametrize(("name", "text"), CORPUS_CASES, ids=[n for n, _ in CORPUS_CASES])
def test_parser_corpus_case_formats_safely(name: str, text: str) -> None:
    original = parse(text)
    out, diagnostics = format_text(text)
    if original.has_errors:
        assert out == text  # broken input is never rewritten
        return
    assert not any(d.code == "fmt-unsafe" for d in diagnostics), name
    assert tree_signature(parse(out)) == tree_signature(original)
    assert fmt(out) == out


def test_corpus_is_present() -> None:
    # Guards the parametrized test above against silently running on nothing.
    assert len(AGENT_FILES) >= 270
    assert len(CORPUS_CASES) >= 200


# ---------------------------------------------------------------- layout


def test_reindents_to_four_spaces_and_spaces_after_colon() -> None:
    text = 'config:\n  agent_name:"x"\n  nested:\n     deep:   1\n'
    assert fmt(text) == 'config:\n    agent_name: "x"\n    nested:\n        deep: 1\n'


def test_deeply_nested_blocks() -> None:
    lines = [" " * (2 * i) + f"k{i}:" for i in range(12)] + [" " * 24 + "leaf: True"]
    expected = [" " * (4 * i) + f"k{i}:" for i in range(12)] + [" " * 48 + "leaf: True"]
    assert fmt("\n".join(lines) + "\n") == "\n".join(expected) + "\n"


def test_crlf_input_gives_lf_output() -> None:
    assert fmt("config:\r\n  a: 1\r\n") == "config:\n    a: 1\n"


def test_single_trailing_newline() -> None:
    assert fmt("a: 1") == "a: 1\n"
    assert fmt("a: 1\n\n\n\n") == "a: 1\n"
    assert fmt("") == ""


def test_blank_lines_collapse_but_grouping_is_kept() -> None:
    text = "a: 1\n\n\n\n\nb: 2\nc: 3\n\nd:\n  x: 1\n\n\n\n  y: 2\n\n  z: 3\n"
    assert fmt(text) == "a: 1\n\n\nb: 2\nc: 3\n\nd:\n    x: 1\n\n    y: 2\n\n    z: 3\n"


def test_blank_lines_at_block_start_are_dropped() -> None:
    assert fmt("d:\n\n\n  x: 1\n") == "d:\n    x: 1\n"


def test_arrow_is_kept_where_written() -> None:
    text = "topic t:\n  reasoning:\n    instructions: ->\n      | hi\n"
    assert fmt(text) == "topic t:\n    reasoning:\n        instructions: ->\n            | hi\n"


def test_quoted_keys() -> None:
    assert fmt('mapping:\n  "my key":   "v"\n') == 'mapping:\n    "my key": "v"\n'


def test_multi_word_keys_and_declarations() -> None:
    text = "variables:\n  n: mutable   list[ number ] =  [1,2]\n  x: linked string\n"
    expected = "variables:\n    n: mutable list[number] = [1, 2]\n    x: linked string\n"
    assert fmt(text) == expected
    assert fmt("subagent   order_help:\n  a: 1\n") == "subagent order_help:\n    a: 1\n"


def test_empty_value() -> None:
    assert fmt("actions:   empty\n") == "actions: empty\n"


def test_empty_written_as_a_block_becomes_colinear() -> None:
    assert fmt("actions:\n    empty # nothing yet\n") == "actions: empty # nothing yet\n"


def test_empty_block_with_two_comments_keeps_both() -> None:
    text = "actions: # about actions\n        empty # about empty\n"
    assert fmt(text) == "actions: # about actions\n    empty # about empty\n"


def test_blank_lines_between_top_level_blocks() -> None:
    text = "topic a:\n  x: 1\n\n\n\n\ntopic b:\n  y: 2\ntopic c:\n  z: 3\n"
    assert fmt(text) == "topic a:\n    x: 1\n\n\ntopic b:\n    y: 2\ntopic c:\n    z: 3\n"


def test_line_continuation_is_joined() -> None:
    assert fmt("key: foo \\\n  + bar\n") == "key: foo + bar\n"
    assert fmt("key: [1, \\\n  2, 3]\n") == "key: [1, 2, 3]\n"


def test_transition_value_with_to() -> None:
    text = "actions:\n  go: @utils.transition   to   @topic.x\n"
    assert fmt(text) == "actions:\n    go: @utils.transition to @topic.x\n"


# ---------------------------------------------------------------- comments


def test_comments_are_kept_in_place() -> None:
    text = (
        "# header\n"
        "config:\n"
        "  # above a\n"
        "  a: 1   #   trailing\n"
        "  label: # after colon\n"
        "  b: 2\n"
        "  # end of config\n"
        "# end of file\n"
    )
    expected = (
        "# header\n"
        "config:\n"
        "    # above a\n"
        "    a: 1 # trailing\n"
        "    label: # after colon\n"
        "    b: 2\n"
        "    # end of config\n"
        "# end of file\n"
    )
    assert fmt(text) == expected


def test_comment_text_is_not_touched() -> None:
    assert fmt("#no space\n#   many\na: 1\n") == "#no space\n#   many\na: 1\n"


def test_dialect_header_stays_apart_from_the_first_block() -> None:
    text = "# @dialect: agentforce=2.2\n\n\nconfig:\n  a: 1\n"
    out = fmt(text)
    assert out == "# @dialect: agentforce=2.2\n\nconfig:\n    a: 1\n"
    assert parse(out).dialect == ("agentforce", "2.2")


def test_dialect_header_is_written_for_a_document_built_by_hand() -> None:
    span = Span(1, 1, 1, 2)
    entry = Entry(span, Key(["a"], span), ExprValue(span, Literal(span, 1, "number")))
    doc = Document(Block(span, [entry]), [], dialect=("agentforce", None))
    assert format_document(doc) == "# @dialect: agentforce\n\na: 1\n"


# ---------------------------------------------------------------- templates


def test_template_hash_lines_are_text_not_comments() -> None:
    text = (
        "topic foo:\n"
        "  reasoning:\n"
        "    instructions: ->\n"
        "      | hello\n"
        "          # deep comment\n"
        "        # intermediate\n"
        "      # back at base level\n"
    )
    out = fmt(text)
    assert out == (
        "topic foo:\n"
        "    reasoning:\n"
        "        instructions: ->\n"
        "            | hello\n"
        "                # deep comment\n"
        "              # intermediate\n"
        "            # back at base level\n"
    )
    template = parse(out).body.items[0]
    assert isinstance(template, Entry)


def test_template_value_text_is_kept_exactly() -> None:
    text = "config:\n  msg: |\n      ## Title\n\n        indented {! @variables.x }\n      end  \n"
    out = fmt(text)
    assert out == (
        "config:\n    msg: |\n        ## Title\n\n          indented {! @variables.x }\n        end\n"
    )


def test_colinear_template_value_moves_below_the_key() -> None:
    assert (
        fmt("config:\n  message: | hello world\n")
        == "config:\n    message: |\n        hello world\n"
    )
    assert fmt("config:\n  message: |\n  other: 1\n") == "config:\n    message: |\n    other: 1\n"


def test_template_statement_continuation_lines_align_with_text() -> None:
    text = "instructions: ->\n  |   Welcome!\n      More text\n        deeper\n  | next\n  |\n"
    assert fmt(text) == (
        "instructions: ->\n    | Welcome!\n      More text\n        deeper\n    | next\n    |\n"
    )


def test_template_statement_starting_below_the_bar() -> None:
    text = "instructions: ->\n  |\n       first indented\n     second\n"
    out = fmt(text)
    assert out == "instructions: ->\n    |\n        first indented\n      second\n"


def test_template_statement_with_leading_blank_line() -> None:
    text = "instructions: ->\n  |\n\n     text\n"
    assert fmt(text) == "instructions: ->\n    |\n\n      text\n"


# ---------------------------------------------------------------- statements


def test_procedure_statements_canonical_spacing() -> None:
    text = (
        "instructions: ->\n"
        "  run   @actions.x\n"
        "     with a = 1 ,b=@variables.y\n"
        "     with c=...\n"
        "     set @variables.z=@outputs.z\n"
        "  set @variables.n   =   @variables.n+1\n"
        "  transition   to @topic.t\n"
        "  collect @variables.email\n"
        '     message: "Email?"\n'
    )
    assert fmt(text) == (
        "instructions: ->\n"
        "    run @actions.x\n"
        "        with a=1, b=@variables.y\n"
        "        with c=...\n"
        "        set @variables.z = @outputs.z\n"
        "    set @variables.n = @variables.n + 1\n"
        "    transition to @topic.t\n"
        "    collect @variables.email\n"
        '        message: "Email?"\n'
    )


def test_with_parameter_that_needs_quotes() -> None:
    text = 'run @actions.p\n   with "Input:Question"=@variables.q, plain = 1\n'
    assert fmt(text) == 'run @actions.p\n    with "Input:Question"=@variables.q, plain=1\n'


def test_if_else_if_else_with_comments() -> None:
    text = (
        "instructions: ->\n"
        "  if @variables.a==1:   # one\n"
        "    | a\n"
        "  # before else if\n"
        "  else   if (@variables.a == 2):\n"
        "    | b\n"
        "  # before else\n"
        "  else:  # other\n"
        "    | c\n"
    )
    assert fmt(text) == (
        "instructions: ->\n"
        "    if @variables.a == 1: # one\n"
        "        | a\n"
        "    # before else if\n"
        "    else if @variables.a == 2:\n"
        "        | b\n"
        "    # before else\n"
        "    else: # other\n"
        "        | c\n"
    )


def test_available_when() -> None:
    text = "actions:\n  go: @utils.transition to @topic.x\n    available when @variables.ok==True\n"
    assert fmt(text) == (
        "actions:\n    go: @utils.transition to @topic.x\n"
        "        available when @variables.ok == True\n"
    )


# ---------------------------------------------------------------- sequences


def test_sequences_of_scalars() -> None:
    text = 'objects:\n  - CustomOrder.ContactId\n  -   "b"\n'
    assert fmt(text) == 'objects:\n    - CustomOrder.ContactId\n    - "b"\n'


def test_sequence_item_mapping_goes_on_the_dash_line() -> None:
    text = 'block:\n  -\n    a: "hello"\n'
    assert fmt(text) == 'block:\n    - a: "hello"\n'


def test_sequence_item_with_several_entries_goes_beneath_the_dash() -> None:
    text = 'items:\n  -\n    name: "first"\n    value: 1\n  - name: "second"\n'
    assert fmt(text) == (
        'items:\n    -\n        name: "first"\n        value: 1\n    - name: "second"\n'
    )


def test_sequence_item_mapping_written_yaml_style_round_trips() -> None:
    # However the parser nests the aligned entries (see /tmp/parser-bugs-formatter.md), the
    # formatted text must parse to the same tree and be stable.
    text = 'hello:\n  - a: "hello"\n    b: 3\n    c: x == y\n'
    out = fmt(text)
    assert tree_signature(parse(out)) == tree_signature(parse(text))
    assert fmt(out) == out


def test_sequence_item_template() -> None:
    assert fmt("items:\n  - |\n    some text\n") == "items:\n    - |\n        some text\n"


# ---------------------------------------------------------------- safety


def test_file_with_parse_errors_is_returned_unchanged() -> None:
    text = "config:\n  a: (1 +\n  b 2\n"
    out, diagnostics = format_text(text)
    assert out == text
    assert any(d.is_error for d in diagnostics)


def test_refuses_to_write_a_result_that_changes_the_tree(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(formatter_module, "format_document", lambda doc: "a: 2\n")
    out, diagnostics = format_text("a: 1\n", "x.agent")
    assert out == "a: 1\n"
    assert [d.code for d in diagnostics] == ["fmt-unsafe"]
    assert diagnostics[0].file == "x.agent"


def test_refuses_to_write_a_result_that_loses_a_comment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(formatter_module, "format_document", lambda doc: "a: 1\n")
    out, diagnostics = format_text("a: 1 # keep me\n")
    assert out == "a: 1 # keep me\n"
    assert [d.code for d in diagnostics] == ["fmt-unsafe"]


def test_unprintable_tree_is_reported_not_raised(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(doc: Document) -> str:
        raise TypeError("cannot format value Strange")

    monkeypatch.setattr(formatter_module, "format_document", boom)
    out, diagnostics = format_text("a: 1\n")
    assert out == "a: 1\n"
    assert diagnostics[0].code == "fmt-unsafe"
    assert "Strange" in diagnostics[0].message


def test_warnings_are_returned_with_the_formatted_text() -> None:
    # Tabs and spaces mixed: a warning, not an error, so the file is formatted (tabs go away).
    out, diagnostics = format_text("config:\n\ta: 1\nother:\n    b: 2\n")
    assert out == "config:\n    a: 1\nother:\n    b: 2\n"
    assert [d.code for d in diagnostics] == ["mixed-indentation"]


# ---------------------------------------------------------------- tree comparison helpers


def test_tree_signature_ignores_spans_and_layout() -> None:
    a = parse("config:\n  a: 1 # c\n\n  b: @variables.x\n")
    b = parse("# lead\nconfig:\n        a: 1\n        b: @variables.x\n")
    assert tree_signature(a) == tree_signature(b)
    assert tree_signature(a, layout=True) != tree_signature(b, layout=True)


def test_tree_signature_sees_values_and_number_types() -> None:
    assert tree_signature(parse("a: 1\n")) != tree_signature(parse("a: 2\n"))
    assert tree_signature(parse("a: 1\n")) != tree_signature(parse("a: 1.0\n"))
    assert tree_signature(parse("a: 1\n")) != tree_signature(parse("b: 1\n"))


def test_tree_signature_of_an_expression() -> None:
    s1, s2 = Span(1, 1, 1, 5), Span(3, 7, 3, 9)
    e1 = Member(s1, AtName(s1, "variables"), "x")
    e2 = Member(s2, AtName(s2, "variables"), "x")
    assert tree_signature(e1) == tree_signature(e2)
    assert tree_signature(e1) == (
        "Member",
        ("obj", ("AtName", ("namespace", "variables"))),
        ("name", "x"),
    )


def test_comment_texts_collects_every_kind_of_comment() -> None:
    text = (
        "# top\n"
        "a:\n"
        "  b: 1 # trailing\n"
        "  # block end\n"
        "instructions: ->\n"
        "  if x:\n"
        "    | y\n"
        "  # before else\n"
        "  else: # on else\n"
        "    | z\n"
        "# file end\n"
    )
    assert comment_texts(parse(text)) == sorted(
        [" top", "trailing", " block end", " before else", "on else", " file end"]
    )


# ---------------------------------------------------------------- generated trees

# Documents in the shapes the parser produces, built directly as trees: format_document must
# print each so that it parses back to the same tree with the same comments. Template `parts`
# are derived from `lines` by the parser, so the comparison leaves them out.

SP = Span(1, 1, 1, 2)
_word = st.from_regex(r"k[a-z0-9_]{0,5}", fullmatch=True)
_comment = st.from_regex(
    r" ?[A-Za-z0-9#:!?.,\-]([A-Za-z0-9 #:!?.,\-]{0,12}[A-Za-z0-9#:!?.,\-])?", fullmatch=True
)
_trailing = st.none() | st.from_regex(r"[A-Za-z0-9#:!?.,\-]{0,8}", fullmatch=True)
_blank = st.integers(min_value=0, max_value=3)
_expr = st.one_of(
    st.integers(min_value=-5, max_value=500).map(lambda v: Literal(SP, v, "number")),
    st.text(alphabet='ab "\\#:', max_size=6).map(lambda v: Literal(SP, v, "string")),
    st.booleans().map(lambda v: Literal(SP, v, "bool")),
    st.tuples(st.sampled_from(["variables", "outputs", "actions"]), _word).map(
        lambda p: Member(SP, AtName(SP, p[0]), p[1])
    ),
)
_condition = st.builds(
    lambda left, op, right: Compare(SP, left, [op], [right]),
    _expr,
    st.sampled_from(["==", "!=", "is", ">"]),
    _expr,
) | st.builds(lambda a, b: Binary(SP, "and", a, b), _expr, _expr)
_text_line = st.from_regex(
    r"[A-Za-z0-9#\-*:.,()!?][A-Za-z0-9 #\-*:.,()!?]{0,15}", fullmatch=True
).map(str.rstrip)
_template_lines = st.tuples(
    _text_line,
    st.lists(st.one_of(st.just(""), _text_line, _text_line.map(lambda t: "  " + t)), max_size=3),
).map(lambda t: [t[0], *t[1]] if not t[1] or t[1][-1] else [t[0], *t[1], "end"])


def _template(lines: list[str]) -> Template:
    return Template(SP, lines, ["\n".join(lines)])


def _with_layout(node: Any, comments: list[str], trailing: str | None, blanks: int) -> Any:
    node.comments = comments
    node.trailing_comment = trailing
    node.blank_lines_before = blanks
    return node


def _laid_out(strategy: st.SearchStrategy[Any], *, trailing: bool = True) -> st.SearchStrategy[Any]:
    return st.builds(
        _with_layout,
        strategy,
        st.lists(_comment, max_size=2),
        _trailing if trailing else st.none(),
        _blank,
    )


def _block(items: list[Any], trailing_comments: list[str]) -> Block:
    return Block(SP, items, trailing_comments=trailing_comments)


_simple_stmt = st.one_of(
    st.builds(lambda t, v: SetStmt(SP, t, v), _expr.filter(lambda e: isinstance(e, Member)), _expr),
    st.builds(
        lambda ps: WithStmt(SP, [WithBinding(p, v, SP) for p, v in ps]),
        st.lists(st.tuples(_word, _expr | st.just(EllipsisExpr(SP))), min_size=1, max_size=3),
    ),
    st.builds(lambda t: TransitionStmt(SP, [Member(SP, AtName(SP, "topic"), t)]), _word),
)
_stmt_block = st.builds(
    _block,
    st.lists(_laid_out(_simple_stmt), min_size=1, max_size=3),
    st.lists(_comment, max_size=1),
)
_statement = st.one_of(
    _laid_out(_simple_stmt),
    _laid_out(
        st.builds(lambda lines: TemplateStmt(SP, _template(lines)), _template_lines), trailing=False
    ),
    _laid_out(
        st.builds(
            lambda t, body: RunStmt(SP, Member(SP, AtName(SP, "actions"), t), body),
            _word,
            st.none() | _stmt_block,
        )
    ),
    _laid_out(
        st.builds(
            lambda c, body, elifs, other: IfStmt(
                SP,
                c,
                body,
                [ElseIf(ec, eb, SP, comments=cs, trailing_comment=tc) for ec, eb, cs, tc in elifs],
                None
                if other is None
                else ElseClause(other[0], SP, comments=other[1], trailing_comment=other[2]),
            ),
            _condition,
            _stmt_block,
            st.lists(
                st.tuples(_condition, _stmt_block, st.lists(_comment, max_size=1), _trailing),
                max_size=2,
            ),
            st.none() | st.tuples(_stmt_block, st.lists(_comment, max_size=1), _trailing),
        )
    ),
)
_procedure = st.builds(
    _block, st.lists(_statement, min_size=1, max_size=4), st.lists(_comment, max_size=1)
)
_scalar_value = st.one_of(
    st.builds(lambda e: ExprValue(SP, e), _expr),
    st.builds(
        lambda t: ExprValue(
            SP, Member(SP, AtName(SP, "utils"), "transition"), Member(SP, AtName(SP, "topic"), t)
        ),
        _word,
    ),
    st.builds(
        lambda mod, ty, default: VarDecl(SP, TypeRef(ty, SP), mod, default),
        st.sampled_from([None, "mutable", "linked"]),
        st.sampled_from(["string", "number", "boolean", "object"]),
        st.none() | _expr,
    ),
    st.just(EmptyValue(SP)),
)


def _entry(key: list[str], value: Any, block: Block | None, arrow: bool = False) -> Entry:
    if isinstance(value, EmptyValue):
        block = None
    return Entry(SP, Key(key, SP), value, block, arrow)


_key_parts = st.lists(_word, min_size=1, max_size=2)


def _entries(children: st.SearchStrategy[Block]) -> st.SearchStrategy[Block]:
    entry = st.one_of(
        _laid_out(st.builds(_entry, _key_parts, _scalar_value, st.none())),
        _laid_out(st.builds(_entry, _key_parts, st.none(), children)),
        _laid_out(st.builds(_entry, _key_parts, _scalar_value, children)),
        _laid_out(
            st.builds(
                lambda k, lines: _entry(k, _template(lines), None), _key_parts, _template_lines
            ),
            trailing=False,
        ),
        _laid_out(st.builds(lambda k, p: _entry(k, None, p, True), _key_parts, _procedure)),
    )
    sequence_item = _laid_out(
        st.one_of(
            st.builds(
                lambda v: SequenceItem(SP, v),
                _scalar_value.filter(lambda v: isinstance(v, ExprValue)),
            ),
            st.builds(lambda b: SequenceItem(SP, None, b), children),
        )
    )
    unique = st.lists(entry, min_size=1, max_size=4, unique_by=lambda e: tuple(e.key.parts))
    return st.one_of(
        st.builds(_block, unique, st.lists(_comment, max_size=1)),
        st.builds(
            _block, st.lists(sequence_item, min_size=1, max_size=3), st.lists(_comment, max_size=1)
        ),
    )


_leaf_block = st.builds(
    _block,
    st.lists(
        _laid_out(st.builds(_entry, _key_parts, _scalar_value, st.none()))
        | _laid_out(st.builds(lambda k, p: _entry(k, None, p, True), _key_parts, _procedure)),
        min_size=1,
        max_size=3,
        unique_by=lambda e: tuple(e.key.parts),
    ),
    st.lists(_comment, max_size=1),
)
_documents = st.builds(
    lambda body, trailing: Document(body, [], trailing_comments=trailing),
    st.recursive(_leaf_block, _entries, max_leaves=8).filter(
        lambda b: all(isinstance(i, Entry) for i in b.items)
    ),
    st.lists(_comment, max_size=2),
)


def _without_parts(signature: object) -> object:
    if isinstance(signature, tuple):
        if len(signature) == 2 and signature[0] == "parts":
            return ("parts",)
        return tuple(_without_parts(s) for s in signature)
    return signature


@pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisWarning")
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_documents)
def test_generated_documents_print_and_parse_back(doc: Document) -> None:
    text = format_document(doc)
    again = parse(text)
    assert [d.format() for d in again.diagnostics if d.is_error] == [], text
    assert _without_parts(tree_signature(again)) == _without_parts(tree_signature(doc)), text
    assert comment_texts(again) == comment_texts(doc), text
    assert format_document(again) == text
