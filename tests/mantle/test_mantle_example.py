"""The card_bank example: model contents and the engine-facing queries."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentscript.mantle import (
    StepKind,
    current_step,
    load_project,
    next_step_id,
    offered_skills,
    select_variant,
    skill_prompt,
    tool_allowed,
    tool_constraint,
    visible_tools,
)
from agentscript.mantle.model import Condition, Project
from agentscript.mantle.queries import holds, render_response_text, substitute

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "card_bank"


@pytest.fixture(scope="module")
def project() -> Project:
    loaded, diagnostics = load_project(EXAMPLE)
    assert diagnostics == []
    assert loaded is not None
    return loaded


def test_model_of_the_card_replace_skill(project: Project) -> None:
    skill = project.skills["card_replace"]
    assert skill.name == "Card Replace"
    assert skill.requires is not None and skill.requires.span.line == 4
    assert skill.complete_when is not None
    assert skill.complete_when.criteria == [
        "The customer knows the fee and when the new card arrives."
    ]
    gate = skill.tool_constraints["order_replacement"]
    assert gate.requires_confirmation is not None and gate.requires_confirmation.enabled
    assert gate.on_failure == "utter_card_replace_failed"
    assert [u.response for u in skill.utter] == [
        "utter_card_replace_intro",
        "utter_card_replace_stolen",
    ]
    block = skill.blocks["order_card"]
    assert [s.kind for s in block.steps] == [
        StepKind.EXECUTE_TOOL,
        StepKind.COLLECT,
        StepKind.COLLECT,
        StepKind.EXECUTE_TOOL,
    ]
    assert block.steps[1].span.line == 42
    assert skill.memory["card_blocked"].visibility == "private"
    assert [r.token for r in skill.references] == [
        "@memory.project.customer_name",
        "@block.order_card",
        "@skill.check_balance",
    ]


def test_tools_are_described_from_signatures(project: Project) -> None:
    verify = project.skills["authenticate"].tools["verify_customer"]
    assert verify.takes_context and not verify.is_async and not verify.is_stub
    assert verify.description == "Check a customer number and PIN."
    assert verify.parameters_schema["required"] == ["customer_number", "pin"]
    assert verify.parameters_schema["properties"]["pin"] == {
        "type": "string",
        "description": "The four-digit PIN.",
    }
    assert {w.name for w in verify.writes} == {
        "attempts",
        "authenticated",
        "customer_name",
        "customer_id",
    }
    balance = project.skills["check_balance"].tools["get_balance"]
    assert balance.description == "Get the verified customer's current account balance."
    assert balance.parameters_schema == {"type": "object", "properties": {}}
    assert balance.function is not None


def test_routing_follows_requires(project: Project) -> None:
    assert [s.id for s in offered_skills(project, {})] == ["authenticate"]
    signed_in = {"project.authenticated": True}
    assert [s.id for s in offered_skills(project, signed_in)] == ["card_replace", "check_balance"]


def test_gates_fail_closed() -> None:
    broken = Condition("session.x.y ==", "f", (1, 1, 1, 1))  # type: ignore[arg-type]
    assert not holds(broken, {})

    def exploding(condition: Condition, memory: object) -> object:
        raise RuntimeError("cannot evaluate")

    assert not holds(Condition("anything", "f", None), {}, exploding)  # type: ignore[arg-type]
    assert holds(None, {}, exploding)


def test_prompt_filters_if_paragraphs_and_substitutes(project: Project) -> None:
    skill = project.skills["card_replace"]
    memory = {"project.customer_name": "Ada", "card_replace.reason": "stolen"}
    prompt = skill_prompt(skill, memory)
    assert prompt.startswith("Help Ada replace a card.")
    assert "must be blocked first" in prompt
    assert "keeps working" not in prompt
    assert "steps:" not in prompt
    unset = skill_prompt(skill, {})
    assert "@memory.project.customer_name" in unset
    assert "must be blocked first" not in unset and "keeps working" not in unset
    # the evaluator and the project are named: a project passed third was taken for the
    # evaluator, and every if: paragraph was dropped without a word
    with pytest.raises(TypeError):
        skill_prompt(skill, memory, project)  # type: ignore[misc]
    assert skill_prompt(skill, memory, project=project) == prompt


def test_substitute_pii_and_tool_tokens(project: Project) -> None:
    project.memory["customer_name"].pii = True
    try:
        text = substitute(
            "Hi @memory.project.customer_name, call `@tool.get_balance`.",
            {"project.customer_name": "Ada"},
            project,
        )
    finally:
        project.memory["customer_name"].pii = False
    assert text == "Hi [set], call get_balance."


def test_block_pointer_skips_filled_collects_in_order(project: Project) -> None:
    block = project.skills["card_replace"].blocks["order_card"]
    assert current_step("card_replace", block, None, {}).id == "load_cards"  # type: ignore[union-attr]
    assert current_step("card_replace", block, "pick_card", {}).id == "pick_card"  # type: ignore[union-attr]
    both = {"card_replace.card_id": "C-11", "card_replace.shipping": "express"}
    assert current_step("card_replace", block, "pick_card", both).id == "place_order"  # type: ignore[union-attr]
    # A later value never lets the pointer pass an earlier unsatisfied step.
    later_only = {"card_replace.shipping": "express"}
    assert current_step("card_replace", block, "pick_card", later_only).id == "pick_card"  # type: ignore[union-attr]
    block.steps[2].ask_before_filling = True
    try:
        assert current_step("card_replace", block, "pick_card", both).id == "pick_shipping"  # type: ignore[union-attr]
    finally:
        block.steps[2].ask_before_filling = False
    assert next_step_id(block, block.steps[-1], {}) == "END"


def test_tool_constraints_gate_visibility(project: Project) -> None:
    assert tool_constraint(project, "card_replace", "list_cards") is None
    assert not tool_allowed(
        project, "card_replace", "order_replacement", {"card_replace.card_id": "C-11"}
    )
    ready = {"card_replace.card_id": "C-11", "card_replace.shipping": "standard"}
    assert tool_allowed(project, "card_replace", "order_replacement", ready)
    names = [t.name for t in visible_tools(project, "card_replace", {})]
    assert names == ["list_cards"]


def test_response_variants_and_interpolation(project: Project) -> None:
    confirm = project.responses["utter_card_replace_confirm"]
    express = {"card_replace.shipping": "express", "card_replace.card_id": "C-11"}
    variant = select_variant(confirm, express)
    assert variant is not None and variant.text is not None
    assert render_response_text(variant.text, express, "card_replace") == (
        "Order an express replacement for card C-11 for 5.00?"
    )
    default = select_variant(confirm, {})
    assert default is confirm.default_variant
    greeting = project.responses["utter_welcome_back"].variants[0].text
    assert render_response_text(greeting or "", {}, None) == "Welcome back, {customer_name}."


def test_step_helpers_on_the_corpus_style_instructions(project: Project) -> None:
    from agentscript.mantle.queries import collect_key, step_satisfied

    block = project.skills["card_replace"].blocks["order_card"]
    assert collect_key("card_replace", block.steps[1]) == "card_replace.card_id"
    assert collect_key("card_replace", block.steps[0]) is None
    assert not step_satisfied("card_replace", block.steps[1], {})
    assert step_satisfied("card_replace", block.steps[1], {"card_replace.card_id": "C-11"})
    assert not step_satisfied("card_replace", block.steps[0], {"card_replace.card_id": "C-11"})


def test_is_mantle_project(tmp_path: Path) -> None:
    from agentscript.mantle import is_mantle_project

    assert is_mantle_project(EXAMPLE)
    assert not is_mantle_project(tmp_path)
    (tmp_path / "skills" / "x").mkdir(parents=True)
    assert not is_mantle_project(tmp_path)
