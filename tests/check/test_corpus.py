"""The public conformance corpus: which fixtures check clean, and why the others do not."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentscript.check import check
from agentscript.syntax import parse

CORPUS = Path("/work/shared/conformance/agentscript")
FIXTURES = sorted((CORPUS / "fixtures").glob("*.agent"))
EXAMPLES = sorted((CORPUS / "examples").glob("*.agent"))

pytestmark = pytest.mark.skipif(not FIXTURES, reason="conformance corpus not available")

_NO_USER = "config-missing-default-agent-user"
_BOTH_NAMES = "config-duplicate-agent-name"
_NO_SOURCE = "linked-variable-missing-source"

# Files the agentforce rules reject, with the error codes. Org rules (agent name/user, linked
# source, allowed namespaces, hyperclassifier hooks) go away in the agentscript dialect.
ORG_REJECTED: dict[str, set[str]] = {
    "edge_action_after_reasoning.agent": {_NO_SOURCE},
    "edge_action_before_reasoning.agent": {_NO_SOURCE},
    "edge_action_many.agent": {_NO_SOURCE},
    "edge_action_set_many.agent": {_NO_SOURCE},
    "edge_action_with_ellipsis.agent": {_NO_SOURCE},
    "edge_action_with_variables.agent": {_NO_SOURCE},
    "edge_config_all_fields.agent": {_BOTH_NAMES},
    "edge_config_debug.agent": {_BOTH_NAMES, _NO_USER},
    "edge_config_enhanced_logs.agent": {_BOTH_NAMES, _NO_USER},
    "edge_employee_agent.agent": {_BOTH_NAMES},
    "edge_empty_messages.agent": {_BOTH_NAMES, _NO_USER},
    "edge_locale_multiple.agent": {_BOTH_NAMES, _NO_USER},
    "edge_locale_non_us.agent": {_BOTH_NAMES, _NO_USER},
    "edge_long_messages.agent": {_BOTH_NAMES, _NO_USER},
    "edge_router_complex.agent": {
        "hyperclassifier-before-reasoning",
        "hyperclassifier-after-reasoning",
    },
    "edge_vars_all_types.agent": {_BOTH_NAMES, _NO_USER},
    "edge_vars_custom_fields.agent": {_NO_USER},
    "edge_vars_defaults.agent": {_BOTH_NAMES, _NO_USER},
    "edge_vars_linked_types.agent": {_BOTH_NAMES, _NO_USER},
    "edge_vars_lists.agent": {_BOTH_NAMES, _NO_USER},
    "edge_vars_many.agent": {_BOTH_NAMES, _NO_USER},
    "edge_vars_mixed.agent": {_BOTH_NAMES, _NO_USER},
    "edge_vars_no_description.agent": {_BOTH_NAMES, _NO_USER},
    "edge_vars_null_defaults.agent": {_BOTH_NAMES, _NO_USER},
    "edge_vars_object_complex.agent": {_BOTH_NAMES, _NO_USER},
    "matrix.agent": {"constraint-allowed-namespaces"},
}
# Files that are wrong in any dialect.
BROKEN: dict[str, set[str]] = {
    # `name: go to @subagent.x` binds a bare identifier instead of @utils.transition.
    "byon_node_accesstoken.agent": {"invalid-action-reference", "unknown-identifier"},
    # `delegate_escalation: "yes"` is not a boolean.
    "delegate_escalation_bad.agent": {"type-mismatch"},
}


def _error_codes(path: Path, dialect: str | None = None) -> set[str]:
    doc = parse(path.read_text(encoding="utf-8"), str(path))
    assert not doc.has_errors, [d.format() for d in doc.diagnostics]
    return {d.code for d in check(doc, dialect=dialect).errors}


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_fixture_errors_match_the_official_toolchain(path: Path) -> None:
    expected = ORG_REJECTED.get(path.name, set()) | BROKEN.get(path.name, set())
    assert _error_codes(path) == expected


@pytest.mark.parametrize("name", sorted(ORG_REJECTED))
def test_agentscript_dialect_clears_org_rules(name: str) -> None:
    assert _error_codes(CORPUS / "fixtures" / name, "agentscript") == set()


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_broken_fixtures_fail_in_every_dialect(name: str) -> None:
    assert _error_codes(CORPUS / "fixtures" / name, "agentscript") == BROKEN[name]


def test_corpus_size() -> None:
    assert len(FIXTURES) == 270
    assert len(ORG_REJECTED) + len(BROKEN) == 28


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_check_clean(path: Path) -> None:
    assert _error_codes(path) == set()


def test_outline_of_a_fixture() -> None:
    doc = parse((CORPUS / "fixtures" / "001_loan_origination.agent").read_text())
    outline = check(doc).outline
    assert outline.start_agent == "topic_selector"
    assert outline.agent_name == "loan_origination_agent_v1"
    assert outline.variables["loan_tier"].is_mutable
    start = outline.subagents["topic_selector"]
    assert start.is_start and start.is_procedure
    go = start.tools["go_to_credit_check"]
    assert (go.kind, go.target) == ("transition", "credit_check")
    assert go.guard is not None
    intake = outline.subagents["intake"]
    assert intake.kind == "topic"
    assert intake.actions["process_intake_data"].target == "flow://Process_Intake_Data"
    assert set(intake.actions["process_intake_data"].inputs) == {
        "record_ref",
        "step_num",
        "category_val",
    }
