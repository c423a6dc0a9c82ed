"""What answered each action call, in every report of ``agentscript test``: the case's stub,
its fault, the ``python://`` target ``[actions.targets]`` mapped the agent's to (the trace's
``ranTarget``), or the agent's own target. The JSON adds ``howRan`` and ``ranTarget`` to each
invoked action, the JUnit report one ``<property>`` per call, the terminal one line per call."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from helpers import run_json, run_test

from fakes.card_bank import card_bank_balance_conversation

# No agentscript.toml of the machine's (a Mantle project here has none of its own).
NO_CONFIG = {"AGENTSCRIPT_CONFIG": "/nonexistent"}
MAPPED = "python://orders_backend:get_delivery_date"
# Two cases of the Order Status example whose check_if_late targets python:// itself: the
# first runs both actions (get_delivery_date through [actions.targets]) and passes; the second
# answers them from the case (a stub, a fault) and fails its topic.
SPEC = """name: Answers
x-agentscript: {agent: order_status.agent}
testCases:
  - utterance: "Where is my order?"
    expectedTopic: Order_Management
    contextVariables: [{name: Id, value: "1234"}]
    customEvaluations:
      - label: the mapped call
        name: string_comparison
        parameters:
          - {name: operator, value: contains}
          - name: actual
            value: "$.generatedData.invokedActions[*][?(@.howRan == 'mapped')].ranTarget"
            isReference: true
          - {name: expected, value: "orders_backend:get_delivery_date"}
    x-agentscript:
      name: targets
      model: [{tool: go_to_orders}, {say: "Feb."}]
  - utterance: "Where is my order?"
    expectedTopic: Somewhere_Else
    contextVariables: [{name: Id, value: "1234"}]
    x-agentscript:
      name: answered
      actions:
        get_delivery_date: {outputs: {delivery_date: "Feb"}}
      faults:
        check_if_late: {return: {is_late: false}}
      model: [{tool: go_to_orders}, {say: "Feb."}]
"""


def _env(order_copy: Path) -> dict[str, str]:
    """The copy's own agentscript.toml as the configuration (never the machine's)."""
    return {"AGENTSCRIPT_CONFIG": str(order_copy / "agentscript.toml")}


def _spec(order_copy: Path) -> Path:
    """The spec beside a copy of the example whose check_if_late runs its own python://
    target (its [actions.targets] entry removed)."""
    agent = order_copy / "order_status.agent"
    agent.write_text(
        agent.read_text(encoding="utf-8").replace(
            '"flow://Check_If_Late"', '"python://orders_backend:check_if_late"'
        ),
        encoding="utf-8",
    )
    toml = order_copy / "agentscript.toml"
    toml.write_text(
        "".join(
            line
            for line in toml.read_text(encoding="utf-8").splitlines(keepends=True)
            if "Check_If_Late" not in line
        ),
        encoding="utf-8",
    )
    spec = order_copy / "answers.yaml"
    spec.write_text(SPEC, encoding="utf-8")
    return spec


def _calls(case: dict[str, Any]) -> list[tuple[str, str | None, str | None]]:
    return [
        (call["function"]["name"], call["howRan"], call["ranTarget"])
        for (call,) in case["generatedData"]["invokedActions"]
    ]


def test_json_invoked_actions_say_whether_a_stub_a_fault_a_mapping_or_the_target_answered(
    order_copy: Path,
) -> None:
    code, data = run_json(str(_spec(order_copy)), env=_env(order_copy))
    assert code == 1  # the second case's topic
    targets, answered = data["testCases"]
    assert _calls(targets) == [
        ("get_delivery_date", "mapped", MAPPED),
        ("check_if_late", "ran", None),
    ]
    assert _calls(answered) == [
        ("get_delivery_date", "stub", None),
        ("check_if_late", "fault", None),
    ]
    # Salesforce's keys are as they were: the two new ones are added beside them.
    (first,) = targets["generatedData"]["invokedActions"][0]
    assert set(first) == {"function", "executionLatency", "howRan", "ranTarget"}
    assert first["function"] == {
        "name": "get_delivery_date",
        "input": {"order_ID": "1234"},
        "output": {"delivery_date": "February 10, 2026"},
    }
    # A custom evaluation's JSONPath can pick calls by how they ran.
    assert [r["result"] for r in targets["testResults"]] == ["PASS", "PASS"]


def test_junit_lists_each_action_call_and_what_answered_it_as_suite_properties(
    order_copy: Path,
) -> None:
    code, out, err = run_test(
        str(_spec(order_copy)), "--result-format", "junit", env=_env(order_copy)
    )
    assert code == 1, err
    root = ET.fromstring(out.split("\n", 1)[1])
    found = {}
    for suite in root.iter("testsuite"):
        # The schema puts <properties> before the test cases.
        assert suite[0].tag == "properties"
        found[suite.get("name")] = [(p.get("name"), p.get("value")) for p in suite[0]]
    assert found == {
        "Answers.targets": [
            ("turn1.action1", f"get_delivery_date: mapped {MAPPED}"),
            ("turn1.action2", "check_if_late: ran"),
        ],
        "Answers.answered": [
            ("turn1.action1", "get_delivery_date: stub"),
            ("turn1.action2", "check_if_late: fault"),
        ],
    }
    # The test cases are unchanged: two of the first case, one failure in the second.
    assert root.get("tests") == "3" and root.get("failures") == "1"


def test_terminal_lists_the_calls_of_a_case_that_failed_and_of_every_case_with_verbose(
    order_copy: Path,
) -> None:
    spec = str(_spec(order_copy))
    code, out, err = run_test(spec, env=_env(order_copy))
    assert code == 1, err
    # A case that passed says nothing more without --verbose; the totals line ends it.
    assert out.splitlines()[:-1] == [
        f"PASS    {spec} :: targets",
        f"FAILURE {spec} :: answered",
        "    FAIL topic_sequence_match (line 20)",
        '        expected: "Somewhere_Else"',
        '        actual:   "Order_Management"',
        "        why:      topic (equals): expected 'Somewhere_Else', got 'Order_Management'",
        "    action get_delivery_date (turn 1): stub",
        "    action check_if_late (turn 1): fault",
    ]
    _, verbose, _ = run_test(spec, "--verbose", env=_env(order_copy))
    assert f"    action get_delivery_date (turn 1): mapped {MAPPED}" in verbose.splitlines()
    assert "    action check_if_late (turn 1): ran" in verbose.splitlines()


def test_a_mantle_tool_stubbed_by_its_name_is_reported_as_a_stub(card_bank_copy: Path) -> None:
    """A Mantle project's runner looks stubs up by the tool's name (the step's ``name``; its
    ``action`` is the function's file and name)."""
    project = card_bank_copy
    conversation = project / "balance.yml"
    conversation.write_text(card_bank_balance_conversation(expect=True), encoding="utf-8")
    code, data = run_json(str(conversation), "--agent", str(project), env=NO_CONFIG)
    assert code == 0, json.dumps(data)
    (case,) = data["testCases"]
    assert [_calls(turn) for turn in case["turns"]] == [
        [(str(project / "skills/check_balance/tools.py:get_balance"), "stub", None)],
        [(str(project / "skills/card_replace/tools.py:list_cards"), "ran", None)],
    ]
    _, out, _ = run_test(str(conversation), "--agent", str(project), "--verbose", env=NO_CONFIG)
    assert "    action get_balance (turn 1): stub" in out.splitlines()
    assert "    action list_cards (turn 2): ran" in out.splitlines()


def test_a_step_that_ran_nothing_says_so_and_a_stub_wins_over_a_mapping() -> None:
    from agentscript.testing.results import Answers, HowRan

    answers = Answers(frozenset({"lookup"}))
    write = {"type": "ACTION_STEP", "name": "set", "action": "@utils.setVariables"}
    assert answers.how_ran({**write, "target": None, "ranTarget": None}) is None
    # A stub is answered before any target is looked at: its step never has a ranTarget, and
    # the case's stub decides even if a trace said otherwise.
    stubbed = {"type": "ACTION_STEP", "name": "t", "action": "lookup", "target": "flow://L"}
    assert answers.how_ran({**stubbed, "ranTarget": MAPPED}) is HowRan.STUB
    assert Answers().how_ran({**stubbed, "ranTarget": MAPPED}) is HowRan.MAPPED
    assert Answers().how_ran({**stubbed, "ranTarget": None}) is HowRan.RAN
