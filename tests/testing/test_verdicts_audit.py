"""Verdicts that used to pass when they should fail: an unmet ``response_contains``, a turn
that ended in an error, topics that only look alike, a Mantle slot that was never written,
and a custom evaluation whose JSONPath was compared as text."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import write_scenario
from helpers import LIVE_ENV, ORDER_STUBS, run_json, run_test

from agentscript.expectations import Expectations
from agentscript.testing.matchers import topic_matches
from fakes.llm_servers import FakeCall, OpenAIServer, Reply

# A conversation file beside a copy of the Order Status example; EXPECT is its turn's expect.
ORDER_TURN = """variables: {order_ID: "1234"}
actions:
  get_delivery_date: {outputs: {delivery_date: "February 10, 2026"}}
  check_if_late: {outputs: {is_late: true}}
turns:
  - user: Where is my order?
    model: [{tool: go_to_orders}, {say: "Your order 1234 is expected on February 10, 2026."}]
    expect: EXPECT
"""


def _conversation(folder: Path, expect: str, text: str = ORDER_TURN) -> Path:
    spec = folder / "conversation.yaml"
    spec.write_text(text.replace("EXPECT", expect), encoding="utf-8")
    return spec


def _results(spec: Path, *args: str) -> tuple[int, dict[str, Any]]:
    code, data = run_json(str(spec), "--verbose", *args)
    return code, {r["name"]: r for r in data["testCases"][0]["testResults"]}


# --- response_contains --------------------------------------------------------------------


def test_response_contains_missing_from_the_reply_fails(order_copy: Path) -> None:
    spec = _conversation(order_copy, '{response_contains: "NOT IN THE REPLY"}')
    code, results = _results(spec)
    assert code == 1
    failed = results["expect.response_contains"]
    assert failed["result"] == "FAILURE"
    assert 'expected it to contain "NOT IN THE REPLY"' in failed["metricExplainability"]


def test_response_contains_failure_leaves_a_right_response_passing(order_copy: Path) -> None:
    spec = _conversation(
        order_copy,
        '{response: "Your order 1234 is expected on February 10, 2026.", '
        'response_contains: "March"}',
    )
    code, results = _results(spec)
    assert code == 1
    assert results["expect.response"]["result"] == "PASS"
    assert results["expect.response_contains"]["result"] == "FAILURE"


def test_response_contains_in_the_reply_passes(order_copy: Path) -> None:
    spec = _conversation(order_copy, '{response_contains: "February 10", node: Order_Management}')
    code, results = _results(spec)
    assert code == 0, results
    assert results["expect.response_contains"]["result"] == "PASS"


def test_card_bank_conversation_with_changed_response_contains_fails(card_bank_copy: Path) -> None:
    project = card_bank_copy
    conversation = project / "conversations" / "rule1_interrupt_resume.yml"
    text = conversation.read_text(encoding="utf-8")
    right = '"Would you like to continue with Card Replace?"'
    assert right in text
    assert run_test(str(conversation))[0] == 0
    conversation.write_text(text.replace(right, '"Would you like a cup of tea?"'), "utf-8")
    code, out, _ = run_test(str(conversation))
    assert code == 1
    assert "FAIL expect.response_contains" in out


def test_an_expect_failure_no_key_claims_still_fails_the_case(
    order_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A failure worded for no key of the block (as `response_contains` once was) must not
    # vanish: here the whole block reports one that none of its keys reports alone.
    original = Expectations.check

    def with_a_block_failure(self: Expectations, reply: Any) -> list[str]:
        failures = original(self, reply)
        return [*failures, "mystery: worded for no key"] if len(self.spec) > 1 else failures

    monkeypatch.setattr(Expectations, "check", with_a_block_failure)
    spec = _conversation(order_copy, '{node: Order_Management, response_contains: "February"}')
    code, results = _results(spec)
    assert code == 1
    assert results["expect.node"]["result"] == "PASS"
    assert results["expect"]["result"] == "FAILURE"
    assert "mystery: worded for no key" in results["expect"]["metricExplainability"]


# --- a turn that ends in an error -----------------------------------------------------------

ERROR_TURN = ORDER_TURN.replace(
    'get_delivery_date: {outputs: {delivery_date: "February 10, 2026"}}',
    'get_delivery_date: {error: "service unavailable"}',
)


def test_turn_ending_in_an_error_fails_though_its_expectations_hold(order_copy: Path) -> None:
    spec = _conversation(order_copy, "{node: Order_Management}", ERROR_TURN)
    code, results = _results(spec)
    assert code == 1
    assert results["expect.node"]["result"] == "PASS"
    error = results["turn_error"]
    assert error["result"] == "FAILURE"
    assert error["actualValue"] == "service unavailable"
    assert "expect: {error: true}" in error["metricExplainability"]


@pytest.mark.parametrize("expect", ["{error: true}", '{error: "unavailable"}'])
def test_turn_error_the_turn_expects_passes(order_copy: Path, expect: str) -> None:
    spec = _conversation(order_copy, expect, ERROR_TURN)
    code, results = _results(spec)
    assert code == 0, results
    assert "turn_error" not in results


def test_turn_error_an_action_failed_assertion_expects_passes(order_copy: Path) -> None:
    text = ERROR_TURN.replace(
        "    expect: EXPECT\n",
        "    assert: [{action_failed: {action: get_delivery_date}}]\n",
    )
    spec = _conversation(order_copy, "", text)
    code, results = _results(spec)
    assert code == 0, results
    assert results["action_failed"]["result"] == "PASS"


def test_turn_error_from_an_injected_fault_is_expected(order_copy: Path) -> None:
    text = "faults:\n  get_delivery_date: {raise: service unavailable}\n" + ORDER_TURN.replace(
        '  get_delivery_date: {outputs: {delivery_date: "February 10, 2026"}}\n', ""
    )
    spec = _conversation(order_copy, "{node: Order_Management}", text)
    code, results = _results(spec)
    assert code == 0, results
    assert "turn_error" not in results


def test_turn_error_of_an_action_no_fault_injected_still_fails(order_copy: Path) -> None:
    # The case injects a fault into check_if_late, but it is get_delivery_date (stubbed to
    # fail) that ends the turn: that error is unexpected.
    text = "faults:\n  check_if_late: {raise: boom}\n" + ERROR_TURN.replace(
        "  check_if_late: {outputs: {is_late: true}}\n", ""
    )
    spec = _conversation(order_copy, "{node: Order_Management}", text)
    code, results = _results(spec)
    assert code == 1
    assert results["turn_error"]["actualValue"] == "service unavailable"


def test_salesforce_case_whose_turn_errors_fails(order_copy: Path) -> None:
    # The turn ends in an error (a stubbed flow action fails) that no expectation expects.
    payload = {
        "x-agentscript": {"actions": {"get_delivery_date": {"error": "service unavailable"}}},
        "tests": [
            {
                "id": "t1",
                "steps": [
                    {"type": "agent.send_message", "id": "m1", "utterance": "Where is my order?"},
                    {
                        "type": "evaluator.planner_topic_assertion",
                        "id": "topic",
                        "expected": "Order_Management",
                        "operator": "equals",
                    },
                ],
            }
        ],
    }
    spec = order_copy / "turn_error.json"
    spec.write_text(json.dumps(payload), encoding="utf-8")
    with OpenAIServer([Reply(calls=[FakeCall.of("go_to_orders", {})])]) as server:
        code, out, _ = run_test(
            str(spec),
            "--agent",
            str(order_copy / "order_status.agent"),
            "--model",
            "openai:m",
            "--base-url",
            server.base_url,
            env=LIVE_ENV,
        )
    assert code == 1
    assert "FAIL turn_error" in out


# --- topics ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expected", "actual"),
    [
        ("billing_disputes", "billing"),
        ("Order_Management_Escalated", "Order_Management"),
        ("ESCALATE_ORDER", "escalate_order"),
        ("Escalate_Order", "escalate_order"),
        ("order_management", "Order_Management"),
        ("p_16jPl000000GwEX_Order_Management", "Order"),
        ("Order_Management_16j9d687a53f890", "Order"),
        ("Order_Management_1A2b3C4d5E", "Order_Management"),  # no Salesforce Id: 10 chars
        ("Order_Management_abcdefghijklmno", "Order_Management"),  # 15 chars but no digit
    ],
)
def test_topic_equals_refuses_names_that_only_look_alike(expected: str, actual: str) -> None:
    assert not topic_matches(expected, actual)


@pytest.mark.parametrize(
    "expected",
    [
        "Order_Management",
        "p_0Xx000_Order_Management",
        "p_16jPl000000GwEX_Order_Management",
        "Order_Management_16j9d687a53f890",
        "Order_Management_16j9d687a53f890ABC",  # an 18-character Id
        "p_16jPl000000GwEX_Order_Management_16j8eeef13560aa",
    ],
)
def test_topic_equals_accepts_the_org_style_names(expected: str) -> None:
    assert topic_matches(expected, "Order_Management")


def test_topic_contains_is_expected_within_actual() -> None:
    assert topic_matches("Order", "Order_Management", "contains")
    assert topic_matches("Order_Management_16j9d687a53f890", "Order_Management", "contains")
    assert not topic_matches("escalate_order_to_supervisor", "escalate_order", "contains")
    assert not topic_matches("ORDER", "Order_Management", "contains")


def test_expected_topic_with_a_word_suffix_fails_the_case(order_copy: Path) -> None:
    spec = order_copy / "specs" / "Order_Status-testSpec.yaml"
    text = spec.read_text(encoding="utf-8")
    assert "expectedTopic: Order_Management\n" in text
    assert run_test(str(spec))[0] == 0
    spec.write_text(
        text.replace(
            "expectedTopic: Order_Management\n", "expectedTopic: Order_Management_Escalated\n"
        ),
        encoding="utf-8",
    )
    code, out, _ = run_test(str(spec))
    assert code == 1
    assert "expected 'Order_Management_Escalated', got 'Order_Management'" in out


# --- Mantle memory_was_set ------------------------------------------------------------------


def test_mantle_memory_was_set_needs_a_write_during_the_conversation(card_bank_copy: Path) -> None:
    project = card_bank_copy
    scenarios = write_scenario(
        project,
        "balance.yml",
        """scenario:
  name: Balance
  simulation_context: You are Ada, a verified customer, asking for your balance.
  max_turns: 2
  setup:
    memory: {project.authenticated: true, project.customer_id: "1001", project.customer_name: Ada}
  goals:
    assertions:
      - memory_was_set: {name: check_balance.balance}
      - memory_was_set: {name: check_balance.balance, value: 1250.75}
      - memory_was_set: {name: check_balance.balance, value: 3}
      - memory_was_set: {name: card_replace.reason}
      - memory_was_set: {name: project.customer_name}
""",
    ).parent
    script = [
        Reply(text="What's my balance?"),  # the simulated user
        Reply(calls=[FakeCall.of("activate_skill", {"skill": "check_balance"})]),
        Reply(calls=[FakeCall.of("get_balance", {})]),
        Reply(calls=[FakeCall.of("complete_skill", {})]),
        Reply(text="Your balance is 1250.75 EUR."),
        Reply(text="###STOP###"),
    ]
    with OpenAIServer(script) as server:
        code, data = run_json(
            str(scenarios), "--model", "openai:m", "--base-url", server.base_url, env=LIVE_ENV
        )
    case = data["testCases"][0]
    assert case["status"] != "ERROR", case
    verdicts = [(r["expectedValue"], r["result"]) for r in case["testResults"]]
    assert verdicts == [
        ({"name": "check_balance.balance"}, "PASS"),
        ({"name": "check_balance.balance", "value": 1250.75}, "PASS"),
        ({"name": "check_balance.balance", "value": 3}, "FAILURE"),
        ({"name": "card_replace.reason"}, "FAILURE"),  # declared, never written
        ({"name": "project.customer_name"}, "FAILURE"),  # only setup seeded it
    ]
    assert code == 1


def test_mantle_simulated_turn_ending_in_an_error_fails(
    tmp_path: Path, card_bank_copy: Path
) -> None:
    project = card_bank_copy
    scenarios = write_scenario(
        project,
        "cut_short.yml",
        """scenario:
  name: Cut short
  simulation_context: You are Ada, a verified customer, asking for your balance.
  max_turns: 1
  setup:
    memory: {project.authenticated: true, project.customer_id: "1001", project.customer_name: Ada}
  goals:
    assertions:
      - skill_activated: {skill_id: check_balance}
""",
    ).parent
    # One LLM call per turn: the agent's second call ends the turn in an error.
    config = tmp_path / "agentscript.toml"
    config.write_text("[limits]\nmax_llm_calls = 1\n", encoding="utf-8")
    script = [
        Reply(text="What's my balance?"),  # the simulated user
        Reply(calls=[FakeCall.of("activate_skill", {"skill": "check_balance"})]),
    ]
    with OpenAIServer(script) as server:
        code, data = run_json(
            str(scenarios),
            "--model",
            "openai:m",
            "--base-url",
            server.base_url,
            env={**LIVE_ENV, "AGENTSCRIPT_CONFIG": str(config)},
        )
    results = {r["name"]: r for r in data["testCases"][0]["testResults"]}
    assert code == 1, results
    assert results["skill_activated"]["result"] == "PASS"
    assert results["turn_error"]["result"] == "FAILURE"
    assert "max_llm_calls" in results["turn_error"]["actualValue"]


# --- custom evaluations ---------------------------------------------------------------------

NOREF = (
    "name: NoRef\nsubjectType: AGENT\nsubjectName: Order_Status\n"
    + ORDER_STUBS
    + """testCases:
  - utterance: I want a person
    customEvaluations:
      - label: delivery date was looked up
        name: string_comparison
        parameters:
          - {name: operator, value: contains}
          - name: actual
            value: "PATH"
          - {name: expected, value: get_delivery_date}
    x-agentscript:
      model: [{tool: go_to_escalation}, {tool: escalate}]
"""
)


@pytest.mark.parametrize(
    "path",
    [
        "$.generatedData.invokedActions[*][?(@.function.name == 'get_delivery_date')].function.name",
        "$['generatedData']",
    ],
)
def test_custom_evaluation_actual_path_without_is_reference_is_a_spec_error(
    order_copy: Path, path: str
) -> None:
    spec = order_copy / "noref.yaml"
    spec.write_text(NOREF.replace("PATH", path), encoding="utf-8")
    code, _, err = run_test(str(spec))
    assert code == 2
    assert f"{spec}:" in err and "isReference: true" in err


def test_custom_evaluation_literal_actual_is_compared_as_text(order_copy: Path) -> None:
    spec = order_copy / "literal.yaml"
    spec.write_text(NOREF.replace("PATH", "calls get_delivery_date"), encoding="utf-8")
    code, _, err = run_test(str(spec))
    assert code == 0, err
