"""``agent_handoff_match`` (format B): Salesforce's scorer names the agent a multi-agent bot
hands the conversation to; locally, a subagent the turn entered by a transition (a Mantle skill
started or resumed). The node a turn starts in is on ``reply.path`` without any handoff, so
expecting the start agent held on every turn."""

from __future__ import annotations

from pathlib import Path

from helpers import run_json

NGT = """name: Handoffs
subjectType: AGENT
subjectName: Order_Status
x-agentscript:
  actions:
    get_delivery_date: {outputs: {delivery_date: "Feb"}}
    check_if_late: {outputs: {is_late: true}}
testCases:
  - inputs:
      - utterance: "Hello"
    scorers:
      - {name: agent_handoff_match, expected: %s}
    x-agentscript:
      name: stays
      model:
        - say: "Hi, how can I help?"
  - inputs:
      - utterance: "Where is my order?"
        contextVariables: [{name: Id, value: "1234"}]
    scorers:
      - {name: agent_handoff_match, expected: %s}
    x-agentscript:
      name: routed
      model:
        - tool: go_to_orders
        - say: "Feb."
"""


def _verdicts(spec: Path) -> dict[str, tuple[bool, str]]:
    """Per case name: whether its handoff check held, and the handoffs it saw."""
    _, data = run_json(str(spec))
    found = {}
    for case in data["testCases"]:
        (result,) = case["testResults"]
        found[case["name"]] = (result["result"] == "PASS", result["actualValue"])
    return found


def test_the_start_agent_is_no_handoff(order_copy: Path) -> None:
    spec = order_copy / "ngt.yaml"
    spec.write_text(NGT % ("router", "router"), encoding="utf-8")
    verdicts = _verdicts(spec)
    # Both turns start in the router; neither hands the conversation to it.
    assert verdicts["stays"] == (False, "[]")
    assert verdicts["routed"] == (False, "['Order_Management']")


def test_the_subagent_a_transition_entered_is_the_handoff(order_copy: Path) -> None:
    spec = order_copy / "ngt.yaml"
    spec.write_text(NGT % ("Order_Management", "Order_Management"), encoding="utf-8")
    verdicts = _verdicts(spec)
    assert verdicts["stays"][0] is False
    assert verdicts["routed"][0] is True


def test_a_mantle_skill_started_in_the_turn_is_a_handoff(card_bank_copy: Path) -> None:
    project = card_bank_copy
    spec = project / "ngt.yaml"
    spec.write_text(
        """name: MantleHandoffs
subjectType: AGENT
subjectName: card_bank
x-agentscript: {agent: .}
testCases:
  - inputs:
      - utterance: "I lost my card C-11"
        contextVariables: [{name: project.authenticated, value: true}]
    scorers:
      - {name: agent_handoff_match, expected: card_replace}
    x-agentscript:
      name: started
      model: [{tool: activate_skill, args: {skill: card_replace}}, {say: "Sorry."}]
  - inputs:
      - utterance: "Hello"
    scorers:
      - {name: agent_handoff_match, expected: card_replace}
    x-agentscript:
      name: not started
      model: [{say: "Hi."}]
""",
        encoding="utf-8",
    )
    verdicts = _verdicts(spec)
    assert verdicts["started"][0] is True
    assert verdicts["not started"][0] is False
