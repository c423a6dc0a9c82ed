"""Every public project in the conformance corpus loads with only the expected diagnostics."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentscript.diagnostics import Severity
from agentscript.mantle import is_mantle_project, load_project

CORPUS = Path("/work/shared/conformance/mantle")
PREFIX = "RasaHQ__rasa-community-resources__"

# The README of the corpus lists the tools defined in the Python files it left out.
MVA = {
    "cancel_booking",
    "get_booking",
    "get_flight_status",
    "list_bookings",
    "load_customer_profile",
    "submit_baggage_report",
    "verify_traveler_pin",
}
UNRESOLVED: dict[str, set[str]] = {
    "maestro-voice-agent": MVA,
    "rasa-voice-agent-tutorial": MVA,
    "maestro-voice-appointment-skills": {
        "confirm_appointment_booking",
        "create_handoff_ticket",
        "delete_contact",
        "get_contacts",
        "load_customer_profile",
        "query_available_slots",
        "save_contact",
    },
    "maestro-voice-banking-skills": {
        "add_payee",
        "block_card",
        "check_balance",
        "check_payee_exists",
        "create_handoff_ticket",
        "get_payees",
        "list_accounts",
        "list_cards",
        "load_customer_profile",
        "order_replacement_card",
        "process_transfer",
        "remove_payee",
        "schedule_transfer",
    },
    "maestro-voice-car-purchase-skills": {
        "book_appointment",
        "calculate_affordability",
        "calculate_financing",
        "check_availability",
        "check_balance",
        "create_handoff_ticket",
        "finalize_reservation",
        "find_similar_cars",
        "get_credit_score",
        "list_accounts",
        "list_dealers",
        "list_existing_loans",
        "load_customer_profile",
        "query_available_slots",
        "recommend_cars",
        "search_cars",
        "validate_identity",
    },
    "maestro-voice-insurance-skills": {
        "book_inspection",
        "create_handoff_ticket",
        "get_claim_status",
        "list_policies",
        "load_customer_profile",
        "submit_claim",
    },
    "maestro-voice-telco-skills": {
        "create_support_ticket",
        "factory_reset_router",
        "get_bill_summary",
        "list_routers",
        "load_customer_profile",
        "run_speed_test",
    },
    # These two name their tools only in prose, so the diagnostics are warnings.
    "chandratechblog-hrassistant": {
        "lookup_attendance",
        "check_leave_balance",
        "submit_leave_request",
        "create_ticket",
        "track_ticket",
    },
    "ElarbiB-terra-energy": {
        "get_solar_data",
        "get_wind_data",
        "get_site_score",
        "get_weather_data",
        "compare_weather_sources",
        "list_weather_sources",
        "compare_locations",
        "compare_sites_weather_quality",
    },
}
PROSE_ONLY = {"chandratechblog-hrassistant", "ElarbiB-terra-energy"}
SKILL_COUNTS = {
    "maestro-voice-agent": 10,
    "maestro-voice-appointment-skills": 9,
    "maestro-voice-banking-skills": 11,
    "maestro-voice-car-purchase-skills": 13,
    "maestro-voice-insurance-skills": 10,
    "maestro-voice-telco-skills": 10,
    "rasa-voice-agent-tutorial": 10,
    "chandratechblog-hrassistant": 5,
    "ElarbiB-terra-energy": 2,
}

pytestmark = pytest.mark.skipif(not CORPUS.is_dir(), reason="conformance corpus not present")


def _tool_name(message: str) -> str:
    return message.split("'")[1]


@pytest.mark.parametrize("name", sorted(UNRESOLVED))
def test_only_the_readme_unresolved_tools_are_reported(name: str) -> None:
    root = CORPUS / (PREFIX + name)
    assert is_mantle_project(root)
    project, diagnostics = load_project(root)
    assert project is not None
    assert len(project.skills) == SKILL_COUNTS[name]
    assert {d.code for d in diagnostics} == {"mantle-unresolved-tool"}
    assert {_tool_name(d.message) for d in diagnostics} == UNRESOLVED[name]
    expected = Severity.WARNING if name in PROSE_ONLY else Severity.ERROR
    assert {d.severity for d in diagnostics} == {expected}
    for d in diagnostics:
        assert d.file is not None and d.file.endswith("skill.md")
        assert d.span.line >= 2


@pytest.mark.parametrize("name", sorted(UNRESOLVED))
def test_stubs_leave_no_error(name: str) -> None:
    project, diagnostics = load_project(CORPUS / (PREFIX + name), stub_missing_tools=True)
    assert project is not None
    assert not [d for d in diagnostics if d.severity is not Severity.INFO]
    stubbed = {d.message.split("'")[1] for d in diagnostics if d.code == "mantle-tool-stubbed"}
    assert stubbed == UNRESOLVED[name]
    stubs = {t.name for s in project.skills.values() for t in s.tools.values() if t.is_stub}
    assert stubs == UNRESOLVED[name]


def test_maestro_layout_details_are_read() -> None:
    project, _ = load_project(CORPUS / (PREFIX + "maestro-voice-banking-skills"))
    assert project is not None
    assert project.agent.maestro_layout
    assert project.agent.rules[0] == "Be polite, clear, and security-conscious."
    assert project.memory["username"].initial_value == "John Smith"
    assert project.memory["username"].write_once
    block = project.skills["block_card"]
    assert [s.id for s in block.blocks["pick_card"].steps] == ["fetch_cards", "select_card"]
    constraint = block.tool_constraints["block_card"]
    assert constraint.requires is not None
    assert constraint.requires.text == "session.block_card.selected_card_id"
    assert constraint.requires.span.line == 9
    assert constraint.requires_confirmation is not None
    assert constraint.requires_confirmation.utter_for_confirmation == "utter_confirm_block_card"
    session_start = project.skills["default_session_start"]
    assert session_start.engine_managed is True
    assert session_start.body_is_single_block
    assert session_start.blocks["main"].name == "default_session_start"


def test_current_layout_top_level_rules() -> None:
    project, _ = load_project(CORPUS / (PREFIX + "chandratechblog-hrassistant"))
    assert project is not None
    assert not project.agent.maestro_layout
    assert len(project.agent.rules) == 7
    assert project.agent.id == "20260821-143652-loud-title"
    policies = project.skills["hr_policies"]
    marked = [p for p in policies.paragraphs if p.condition is not None]
    assert len(marked) == 7
    assert marked[0].condition is not None
    assert marked[0].condition.expr is not None  # single quotes are accepted


def test_folded_complete_when_on_a_step_is_one_condition() -> None:
    project, _ = load_project(CORPUS / (PREFIX + "maestro-voice-insurance-skills"))
    assert project is not None
    step = project.skills["file_claim"].blocks["collect_details"].step("collect_auto_fields")
    assert step is not None and step.complete_when is not None
    assert step.complete_when.text == (
        '(session.file_claim.policy_name == "Homeowner") or '
        "(session.file_claim.incident_time and session.file_claim.incident_location)"
    )
    assert step.complete_when.expr is not None


def test_execute_tool_parameters_are_expressions() -> None:
    project, _ = load_project(CORPUS / (PREFIX + "maestro-voice-car-purchase-skills"))
    assert project is not None
    step = project.skills["reserve_car"].blocks["pick_vehicle"].step("confirm_stock")
    assert step is not None
    param = step.parameters["model"]
    assert getattr(param, "text", None) == "session.reserve_car.requested_model"
