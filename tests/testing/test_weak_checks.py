"""Checks that hold whatever the agent does get a warning naming the file, the line (or the
turn) and the case: legal specs, so never an error, but a passing run must not hide them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import run_test

from agentscript.testing.command import weak_checks
from agentscript.testing.readers import read_spec

STUBS = """x-agentscript:
  actions:
    get_delivery_date: {outputs: {delivery_date: "February 10, 2026"}}
    check_if_late: {outputs: {is_late: true}}
"""
# Format A, one case: line 8 is the case, the x-agentscript assertions start at line 12.
CASE_A = (
    "name: A\nsubjectName: Order_Status\n"
    + STUBS
    + """testCases:
  - utterance: Where is my order?
    expectedTopic: Order_Management
    x-agentscript:
      assert:
        - %s
      model:
        - tool: go_to_orders
        - say: "Feb 10."
"""
)


def _warnings(spec: Path) -> list[str]:
    return weak_checks(read_spec(spec), None)


@pytest.mark.parametrize(
    ("assertion", "warning"),
    [
        (
            "instructions_contain: {text: ''}",
            "instructions_contain: an empty text is in any instructions (it checks only that "
            "an LLM call was made); give the text",
        ),
        (
            "tools_hidden: {tools: []}",
            "tools_hidden: an empty tool list holds at any LLM call (it checks only that one "
            "was made); list the tools",
        ),
        (
            "tools_offered: {tools: []}",
            "tools_offered: an empty tool list holds at any LLM call (it checks only that one "
            "was made); list the tools",
        ),
        (
            "variables_after: {}",
            "variables_after: an empty mapping holds whatever the variables are; list some",
        ),
        (
            "variables_before: {}",
            "variables_before: an empty mapping holds whatever the variables are; list some",
        ),
        (
            "action_variables: {action: check_if_late}",
            "action_variables: without before or after it checks only that 'check_if_late' "
            "ran; give before or after",
        ),
        (
            "action_variables: {action: check_if_late, before: {}, after: null}",
            "action_variables: without before or after it checks only that 'check_if_late' "
            "ran; give before or after",
        ),
    ],
)
def test_a_whitebox_check_that_cannot_fail_is_warned_about(
    tmp_path: Path, assertion: str, warning: str
) -> None:
    spec = tmp_path / "a.yaml"
    spec.write_text(CASE_A % assertion, encoding="utf-8")
    assert _warnings(spec) == [f"{spec}:12: case 'Test Case #1': {warning}"]


@pytest.mark.parametrize(
    "assertion",
    [
        "instructions_contain: {text: 'order'}",
        "instructions_equal: {text: ''}",
        "tools_hidden: {tools: [go_to_orders]}",
        "tools_offered: {tools: [go_to_orders]}",
        "variables_after: {is_late: true}",
        "action_variables: {action: check_if_late, after: {is_late: true}}",
        "action_failed: {action: check_if_late, error_contains: ''}",
    ],
)
def test_a_whitebox_check_that_can_fail_is_not_warned_about(tmp_path: Path, assertion: str) -> None:
    spec = tmp_path / "a.yaml"
    spec.write_text(CASE_A % assertion, encoding="utf-8")
    assert _warnings(spec) == []


def _custom(operator: str, expected: str) -> str:
    return (
        "name: A\nsubjectName: Order_Status\ntestCases:\n"
        "  - utterance: Where is my order?\n"
        "    customEvaluations:\n"
        "      - label: said something\n"
        "        name: string_comparison\n"
        "        parameters:\n"
        f"          - {{name: operator, value: {operator}, isReference: false}}\n"
        "          - {name: actual, value: '$.generatedData.outcome', isReference: true}\n"
        f"          - {{name: expected, value: {json.dumps(expected)}, isReference: false}}\n"
    )


@pytest.mark.parametrize("operator", ["contains", "startswith", "endswith"])
def test_format_a_custom_comparison_with_an_empty_text_is_warned_about(
    tmp_path: Path, operator: str
) -> None:
    spec = tmp_path / "a.yaml"
    spec.write_text(_custom(operator, ""), encoding="utf-8")
    assert _warnings(spec) == [
        f"{spec}:6: case 'Test Case #1': said something: {operator} an empty text holds for "
        "any value (it fails only when 'actual' matches nothing); give the expected text"
    ]
    spec.write_text(_custom(operator, "Feb"), encoding="utf-8")
    assert _warnings(spec) == []
    spec.write_text(_custom("equals", ""), encoding="utf-8")  # "the value is empty": a check
    assert _warnings(spec) == []


def test_format_c_string_assertions_with_an_empty_text_are_warned_about(tmp_path: Path) -> None:
    steps = [
        {"type": "agent.create_session", "id": "cs"},
        {"type": "agent.send_message", "id": "sm", "utterance": "hi"},
        *(
            {
                "type": "evaluator.string_assertion",
                "id": operator,
                "actual": "{sm.response}",
                "expected": "",
                "operator": operator,
            }
            for operator in ("startswith", "endswith", "contains", "equals")
        ),
    ]
    spec = tmp_path / "eval.json"
    spec.write_text(json.dumps({"tests": [{"id": "t1", "steps": steps}]}, indent=1), "utf-8")
    warnings = _warnings(spec)
    assert [w.split(": ")[2] for w in warnings] == ["startswith", "endswith", "contains"]
    assert warnings[0] == (
        f"{spec}:17: case 't1': startswith: startswith an empty text holds for any value (it "
        "fails only when 'actual' matches nothing); give the expected text"
    )


def test_mantle_bot_uttered_with_an_empty_text_is_warned_about(tmp_path: Path) -> None:
    spec = tmp_path / "s.yml"
    body = "scenario:\n  name: Says anything\n  simulation_context: You are Ada.\n"
    spec.write_text(
        body + "  goals:\n    assertions:\n      - bot_uttered: {text_matches: ''}\n", "utf-8"
    )
    assert _warnings(spec) == [
        f"{spec}:6: case 'Says anything': bot_uttered: an empty text_matches holds for any "
        "reply; give what must be said"
    ]
    spec.write_text(
        body + "  goals:\n    assertions:\n      - bot_uttered: {text_matches: card}\n", "utf-8"
    )
    assert _warnings(spec) == []


CONVERSATION = """variables: {order_ID: "1234"}
actions:
  get_delivery_date: {outputs: {delivery_date: "February 10, 2026"}}
  check_if_late: {outputs: {is_late: true}}
turns:
  - user: "Where is my order?"
    model: [{tool: go_to_orders}, {say: "Feb 10."}]
    expect: {response_contains: ""}
  - user: "thanks"
    model: [{say: "bye"}]
    expect: {variables: {}, error: ""}
  - user: "bye"
    model: [{say: "bye"}]
    expect: {response_contains: "bye", variables: {is_late: true}, error: false}
"""


def test_conversation_expectations_that_cannot_fail_are_warned_about_by_turn(
    tmp_path: Path,
) -> None:
    spec = tmp_path / "conv.yaml"
    spec.write_text(CONVERSATION, encoding="utf-8")
    assert _warnings(spec) == [
        f"{spec}: case 'conv', turn 1: expect.response_contains: an empty text holds for any "
        "reply; give the text",
        f"{spec}: case 'conv', turn 2: expect.variables: an empty mapping holds whatever the "
        "variables are; list some",
        f"{spec}: case 'conv', turn 2: expect.error: an empty text holds whether or not the "
        "turn fails (and excuses its error); use true, false, or a text the error contains",
    ]


def test_the_run_passes_and_prints_the_warnings(order_copy: Path) -> None:
    # Beside the order_status example, so the conversation file finds its agent.
    spec = order_copy / "conv.yaml"
    spec.write_text(CONVERSATION, encoding="utf-8")
    code, out, err = run_test(str(spec))
    assert code == 0, out + err  # a warning, never an error
    assert err.count("warning:") == 3
    assert f"warning: {spec}: case 'conv', turn 1: expect.response_contains:" in err
