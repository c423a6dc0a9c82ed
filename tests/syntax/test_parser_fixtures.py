"""The parser on the 270 conformance fixtures and 7 examples: no errors, and the right shapes."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentscript.expr.nodes import AtName, Binary, Compare, Literal, Member, reference_path
from agentscript.syntax import Document, parse
from agentscript.syntax.tree import (
    Block,
    Entry,
    IfStmt,
    Interpolation,
    RunStmt,
    SequenceItem,
    SetStmt,
    Template,
    TemplateStmt,
    TransitionStmt,
    VarDecl,
    WithStmt,
)
from conformance import FIXTURES_DIR, example_files, fixture_files, read_text

pytestmark = pytest.mark.skipif(not fixture_files(), reason="conformance corpus not available")


def parse_file(path: Path) -> Document:
    return parse(read_text(path), str(path))


def entry(block: Block | None, *path: str) -> Entry:
    """The entry reached by following keys from ``block``."""
    assert block is not None
    found: Entry | None = None
    for key in path:
        assert block is not None, f"no block above {key!r}"
        found = block.get(key)
        assert found is not None, f"no entry {key!r}"
        block = found.block
    assert found is not None
    return found


def fixture(name: str) -> Document:
    doc = parse_file(FIXTURES_DIR / name)
    assert not doc.has_errors, [d.format() for d in doc.diagnostics]
    return doc


def test_corpus_sizes() -> None:
    assert len(fixture_files()) == 270
    assert len(example_files()) == 7


@pytest.mark.parametrize(
    "path", fixture_files() + example_files(), ids=lambda p: f"{p.parent.name}/{p.name}"
)
def test_parses_without_errors(path: Path) -> None:
    doc = parse_file(path)
    errors = [d.format() for d in doc.diagnostics if d.is_error]
    assert errors == []
    assert doc.body.items, "a fixture is never empty"


def test_named_blocks() -> None:
    doc = fixture("001_loan_origination.agent")
    topics = [e.key.name for e in doc.body.named("topic")]
    assert topics[:4] == ["intake", "credit_check", "underwriting", "approval"]
    start = next(doc.body.named("start_agent"))
    assert start.key.parts == ["start_agent", "topic_selector"]
    assert start.key.span.line == 84


def test_run_with_set_callbacks_in_if() -> None:
    doc = fixture("001_loan_origination.agent")
    before = entry(doc.body, "topic intake", "before_reasoning")
    assert before.block is not None and not before.arrow
    (stmt,) = before.block.items
    assert isinstance(stmt, IfStmt)
    assert isinstance(stmt.condition, Compare) and stmt.condition.ops == ["=="]
    assert reference_path(stmt.condition.left) == ("variables", "is_verified")
    (run,) = stmt.body.items
    assert isinstance(run, RunStmt)
    assert reference_path(run.target) == ("actions", "validate_intake_info")
    assert run.span.line == 159
    assert run.body is not None
    kinds = [type(item) for item in run.body.items]
    assert kinds == [WithStmt, WithStmt, SetStmt, SetStmt]
    first_with = run.body.items[0]
    assert isinstance(first_with, WithStmt)
    assert [b.param for b in first_with.bindings] == ["record_ref"]
    assert reference_path(first_with.bindings[0].value) == ("variables", "loan_record_id")
    last_set = run.body.items[3]
    assert isinstance(last_set, SetStmt)
    assert reference_path(last_set.target) == ("variables", "is_verified")
    assert reference_path(last_set.value) == ("outputs", "is_valid")


def test_procedure_template_with_interpolations() -> None:
    doc = fixture("001_loan_origination.agent")
    instructions = entry(doc.body, "topic intake", "reasoning", "instructions")
    assert instructions.arrow and instructions.value is None
    assert instructions.block is not None
    first = instructions.block.items[0]
    assert isinstance(first, TemplateStmt)
    parts = first.template.parts
    assert parts[0] == "Handle the intake stage for the loan.\nCurrent loan status: "
    interpolations = [p for p in parts if isinstance(p, Interpolation)]
    assert reference_path(interpolations[0].expr) == ("variables", "loan_status")
    assert interpolations[0].source == "@variables.loan_status"
    step = interpolations[1].expr
    assert isinstance(step, Binary) and step.op == "+"
    assert isinstance(step.right, Literal) and step.right.value == 1
    # Continuation lines are dedented to the first line's column.
    assert first.template.lines[1] == "Current loan status: {! @variables.loan_status }"


def test_variable_declarations() -> None:
    doc = fixture("001_loan_origination.agent")
    variables = entry(doc.body, "variables")
    status = entry(variables.block, "loan_status")
    assert isinstance(status.value, VarDecl)
    assert status.value.modifier == "mutable" and str(status.value.type) == "string"
    assert isinstance(status.value.default, Literal) and status.value.default.value == ""


def test_else_if_chain() -> None:
    doc = fixture("else_if_after_reasoning.agent")
    found = [s for s in walk_statements(doc.body) if isinstance(s, IfStmt)]
    chain = next(s for s in found if len(s.else_ifs) == 2)
    conditions = [chain.condition, *(e.condition for e in chain.else_ifs)]
    values = []
    for condition in conditions:
        assert isinstance(condition, Compare)
        literal = condition.comparators[0]
        assert isinstance(literal, Literal)
        values.append(literal.value)
    assert values == ["a", "b", "c"]
    assert chain.else_clause is not None
    (otherwise,) = chain.else_clause.body.items
    assert isinstance(otherwise, SetStmt)
    assert isinstance(otherwise.value, Literal) and otherwise.value.value == "send_default"
    assert chain.else_clause.span.line == 30


def test_sequences() -> None:
    doc = fixture("access_with_vcra.agent")
    objects = entry(doc.body, "access", "verified_customer_record_access", "additional_objects")
    assert objects.block is not None
    items = objects.block.items
    assert all(isinstance(item, SequenceItem) for item in items)
    texts = [_dotted(item) for item in items]
    assert texts == ["CustomOrder.ContactId", "Account.OwnerId"]


def _dotted(item: object) -> str:
    assert isinstance(item, SequenceItem) and item.value is not None
    expr = getattr(item.value, "expr", None)
    assert isinstance(expr, Member)
    head = expr.obj
    return f"{getattr(head, 'name', '?')}.{expr.name}"


def test_quoted_keys() -> None:
    doc = fixture("byon_node_accesstoken.agent")
    quoted = [e for e in walk_entries(doc.body) if e.key.quoted]
    names = [e.key.parts[0] for e in quoted]
    assert "authNamedCredential" in names and "siteId" in names
    credential = quoted[names.index("authNamedCredential")]
    assert credential.key.span.line == 130
    assert credential.value is not None
    assert reference_path(credential.value.expr) == (  # type: ignore[union-attr]
        "variables",
        "authNamedCredential",
    )
    description = entry(credential.block, "description")
    assert isinstance(description.value, Template)
    assert description.value.parts == [
        "The name of the named credential that is used to get access tokens."
    ]


def test_dialect_header() -> None:
    assert fixture("byon_minimal.agent").dialect == ("agentforce", None)
    assert fixture("001_loan_origination.agent").dialect is None


def test_tabs_count_as_four_columns() -> None:
    doc = parse_file(FIXTURES_DIR / "edge_conn_customizable.agent")
    assert not doc.has_errors
    warnings = [d for d in doc.diagnostics if d.code == "mixed-indentation"]
    assert len(warnings) == 1 and warnings[0].span.line == 14
    variables = entry(doc.body, "variables")
    assert variables.block is not None
    keys = [str(e.key) for e in variables.block.entries()]
    assert keys == ["pet_placeholder_name", "Users", "defaultDate"]
    pet = entry(variables.block, "pet_placeholder_name", "description")
    assert pet.value is not None


def test_transitions_and_at_names() -> None:
    doc = fixture("001_loan_origination.agent")
    transitions = [s for s in walk_statements(doc.body) if isinstance(s, TransitionStmt)]
    assert transitions
    for stmt in transitions:
        assert len(stmt.targets) == 1
        path = reference_path(stmt.targets[0])
        assert path is not None and path[0] in ("topic", "subagent")
        root = stmt.targets[0]
        while isinstance(root, Member):
            root = root.obj
        assert isinstance(root, AtName)


# ---------------------------------------------------------------- walking helpers


def walk_entries(block: Block) -> list[Entry]:
    found: list[Entry] = []
    for item in block.items:
        if isinstance(item, Entry):
            found.append(item)
        for child in _child_blocks(item):
            found.extend(walk_entries(child))
    return found


def walk_statements(block: Block) -> list[object]:
    found: list[object] = []
    for item in block.items:
        if not isinstance(item, Entry | SequenceItem):
            found.append(item)
        for child in _child_blocks(item):
            found.extend(walk_statements(child))
    return found


def _child_blocks(item: object) -> list[Block]:
    blocks: list[Block] = []
    for name in ("block", "body"):
        child = getattr(item, name, None)
        if isinstance(child, Block):
            blocks.append(child)
    if isinstance(item, IfStmt):
        blocks.extend(e.body for e in item.else_ifs)
        if item.else_clause is not None:
            blocks.append(item.else_clause.body)
    return blocks
