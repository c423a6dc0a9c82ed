"""The tree-sitter / JavaScript parser corpus (``parser-corpus/*.txt``) against our parser.

A case whose expected tree has an ``ERROR`` or ``MISSING`` node must give at least one error
diagnostic; any other case must give none. Some structural facts of the expected tree (how many
if/run/set/with/transition statements and templates) are checked against our tree too.

``DIVERGENCES`` lists the cases where we knowingly differ, with the reason.
"""

from __future__ import annotations

import pytest

from agentscript.expr import parse_expression
from agentscript.syntax import parse
from agentscript.syntax.tree import (
    Block,
    IfStmt,
    RunStmt,
    SetStmt,
    Template,
    TemplateStmt,
    TransitionStmt,
    WithStmt,
)
from conformance import CorpusCase, corpus_cases

# case id -> why our result differs from the corpus on purpose.
DIVERGENCES: dict[str, str] = {
    "javascript-error_recovery::Error 22: Trailing comma should be valid syntax": (
        "a trailing comma in a call or list is accepted, as in Python (the case's own title "
        "says it should be valid)"
    ),
    "javascript-error_recovery::Error 24: Unsupported modulo should not split expression": (
        "our expression language has '%' (Python arithmetic); the evaluator implements it"
    ),
    "javascript-error_recovery_hardening::Error 4a: Misspelled modifier should wrap in ERROR "
    "and parse declaration": (
        "modifiers are checked by the checker (unknown modifier), not by the parser"
    ),
}

CASES = corpus_cases()


def _is_expression_case(case: CorpusCase) -> bool:
    """tree-sitter corpus cases that parse a bare expression instead of a file."""
    return case.expected.replace("\n", " ").split()[:2] == ["(source_file", "(expression"]


def test_corpus_is_loaded() -> None:
    if not CASES:
        pytest.skip("conformance corpus not available")
    assert len(CASES) == 281
    assert len({case.id for case in CASES}) == len(CASES)
    assert sum(case.expects_error for case in CASES) == 47


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
def test_corpus_case(case: CorpusCase) -> None:
    if _is_expression_case(case):
        # `fn(*items)` as a whole file: our entry point for a bare expression.
        _, diagnostics = parse_expression(case.source.strip())
        errors = [d.format() for d in diagnostics]
    else:
        doc = parse(case.source)
        errors = [d.format() for d in doc.diagnostics if d.is_error]
    if case.id in DIVERGENCES:
        assert bool(errors) != case.expects_error, "divergence no longer needed: remove it"
        return
    if case.expects_error:
        assert errors, "expected at least one error diagnostic"
    else:
        assert errors == []


def _counts(block: Block) -> dict[str, int]:
    counts = dict.fromkeys(("if", "else if", "run", "set", "with", "transition", "template"), 0)

    def visit(block: Block) -> None:
        for item in block.items:
            kind = {
                IfStmt: "if",
                RunStmt: "run",
                SetStmt: "set",
                WithStmt: "with",
                TransitionStmt: "transition",
                TemplateStmt: "template",
            }.get(type(item))
            if kind:
                counts[kind] += 1
            value = getattr(item, "value", None)
            if isinstance(value, Template):
                counts["template"] += 1
            for name in ("block", "body"):
                child = getattr(item, name, None)
                if isinstance(child, Block):
                    visit(child)
            if isinstance(item, IfStmt):
                counts["else if"] += len(item.else_ifs)
                for clause in item.else_ifs:
                    visit(clause.body)
                if item.else_clause is not None:
                    visit(item.else_clause.body)

    visit(block)
    return counts


def _expected_counts(case: CorpusCase) -> dict[str, int]:
    return {
        "if": case.count("if_statement"),
        "else if": case.count("else_if_clause"),
        "run": case.count("run_statement"),
        "set": case.count("set_statement"),
        "with": case.count("with_statement"),
        "transition": case.count("transition_statement"),
        "template": case.count("template"),
    }


STRUCTURAL = [
    case
    for case in CASES
    if not case.expects_error
    and not _is_expression_case(case)
    and case.id not in DIVERGENCES
    and any(
        case.count(node) for node in ("if_statement", "run_statement", "set_statement", "template")
    )
]


@pytest.mark.parametrize("case", STRUCTURAL, ids=[case.id for case in STRUCTURAL])
def test_corpus_statement_counts(case: CorpusCase) -> None:
    doc = parse(case.source)
    assert _counts(doc.body) == _expected_counts(case)
