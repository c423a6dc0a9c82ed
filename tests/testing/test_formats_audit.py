"""Spec formats, white-box names, discovery and reporters: checks that could not fail, payloads
Salesforce's own tools write, non-spec files found beside specs, and reports that crashed."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest
from conftest import ROOT, write_scenario
from helpers import LIVE_ENV, JudgeDouble, run_command, run_json, run_test

from agentscript.models.base import ModelRequest, ModelResponse
from agentscript.testing.errors import SpecError
from agentscript.testing.judge import JudgeSettings, judge
from agentscript.testing.readers import read_spec
from fakes.llm_servers import FakeCall, OpenAIServer, Reply

ORDER_STUBS = {
    "get_delivery_date": {"outputs": {"delivery_date": "Feb 10, 2026"}},
    "check_if_late": {"outputs": {"is_late": False}},
}
ORDER_TURN = [Reply(calls=[FakeCall.of("go_to_orders", {})]), Reply(text="It comes Feb 10, 2026.")]


@pytest.fixture
def gate_copy(tmp_path: Path) -> Path:
    target = tmp_path / "security_gate"
    shutil.copytree(ROOT / "examples" / "security_gate", target)
    return target


def _gate_spec(folder: Path, assertions: str) -> Path:
    """A one-case Security Gate spec whose third LLM call offers `verify` and `update_account`."""
    spec = folder / "wb.yaml"
    spec.write_text(
        """name: WB
subjectName: Security_Gate
x-agentscript:
  actions:
    verify_identity: {outputs: {verified: true, email: ann@example.com}}
    update_account_info: {outputs: {updated: true}}
testCases:
  - utterance: My email is ann@example.com, change my address to 1 Main St
    expectedTopic: account
    x-agentscript:
      model:
        - tool: go_account
        - {tool: verify, args: {email: ann@example.com}}
        - {tool: update_account, args: {field: address, value: 1 Main St}}
        - say: Done.
      assert:
"""
        + assertions,
        encoding="utf-8",
    )
    return spec


# --- 5: white-box names the agent does not have -------------------------------------------


def test_tools_hidden_by_action_definition_name_fails_when_its_tool_is_offered(
    gate_copy: Path,
) -> None:
    # update_account runs the action update_account_info: both spellings name the same tool.
    spec = _gate_spec(
        gate_copy, "        - tools_hidden: {tools: [update_account_info], call: 3}\n"
    )
    code, out, _ = run_test(str(spec))
    assert code == 1
    assert "FAIL tools_hidden (line 17)" in out
    assert "were offered (expected hidden)" in out


def test_tools_offered_by_action_definition_name_holds(gate_copy: Path) -> None:
    spec = _gate_spec(
        gate_copy, "        - tools_offered: {tools: [update_account_info], call: 3}\n"
    )
    code, out, err = run_test(str(spec))
    assert code == 0, out + err


@pytest.mark.parametrize(
    ("assertion", "message"),
    [
        (
            "- tools_hidden: {tools: [update_acount], call: 3}",
            "'update_acount' is not a tool of the agent Security_Gate; "
            "did you mean 'update_account'?",
        ),
        (
            "- variables_after: {is_verifed: null}",
            "'is_verifed' is not a variable of the agent Security_Gate; "
            "did you mean 'is_verified'?",
        ),
        (
            "- action_variables: {action: verify, after: {emial: x}}",
            "'emial' is not a variable of the agent Security_Gate; did you mean 'email'?",
        ),
        ("- tools_offered: {tools: [go_acount], node: acount}", "did you mean 'go_account'?"),
        ("- instructions_contain: {text: x, node: acount}", "not a subagent of the agent"),
        ("- llm_calls: {}", "llm_calls is a number or {min: N, max: M}"),
        ("- llm_calls: {min: 3, max: 1}", "llm_calls: min 3 is above max 1"),
    ],
)
def test_whitebox_assertion_that_cannot_fail_is_a_spec_error(
    gate_copy: Path, assertion: str, message: str
) -> None:
    spec = _gate_spec(gate_copy, f"        {assertion}\n")
    code, out, err = run_test(str(spec))
    assert code == 2, out
    assert f"{spec}:17: " in err
    assert message in err


def test_mantle_tool_not_executed_with_a_typo_is_a_spec_error(card_bank_copy: Path) -> None:
    scenario = write_scenario(
        card_bank_copy,
        "typo.yml",
        """scenario:
  name: Typo
  simulation_context: You are Ada.
  goals:
    assertions:
      - tool_not_executed: {tool_name: blok_card}
""",
    )
    code, _, err = run_test(str(scenario))
    assert code == 2
    assert f"{scenario}:6: 'blok_card' is not a tool or action" in err
    assert "did you mean 'block_card'?" in err


# --- 6: run-eval payloads as Salesforce's tools write them --------------------------------


def _payload(folder: Path, steps: list[dict[str, object]], **top: object) -> Path:
    spec = folder / "eval.json"
    spec.write_text(
        json.dumps({**top, "tests": [{"id": "t1", "steps": steps}]}, indent=1), encoding="utf-8"
    )
    return spec


SESSION = {"type": "agent.create_session", "id": "cs", "context_variables": {"Id": "1234"}}
MESSAGE = {"type": "agent.send_message", "id": "sm", "utterance": "Where is my order?"}


def _run_live(spec: Path) -> tuple[int, dict[str, object]]:
    with OpenAIServer(list(ORDER_TURN)) as server:
        return run_json(
            str(spec), "--model", "openai:gpt-test", "--base-url", server.base_url, env=LIVE_ENV
        )


def test_run_eval_reads_salesforce_translator_references_and_stubs(order_copy: Path) -> None:
    spec = _payload(
        order_copy,
        [
            SESSION,
            MESSAGE,
            {"type": "agent.get_state", "id": "gs", "session_id": "{cs.session_id}"},
            {
                "type": "evaluator.planner_topic_assertion",
                "id": "topic",
                "expected": "Order_Management",
                "actual": "{gs.response.planner_response.lastExecution.topic}",
                "operator": "contains",
            },
            {
                "type": "evaluator.string_assertion",
                "id": "acts",
                "actual": "{gs.response.planner_response.lastExecution.invokedActions}",
                "expected": "check_if_late",
                "operator": "contains",
            },
            {
                "type": "evaluator.string_assertion",
                "id": "said",
                "actual": "{sm.response}",
                "expected": "Feb 10",
                "operator": "CONTAINS",
            },
        ],
        **{"x-agentscript": {"actions": ORDER_STUBS}},
    )
    code, data = _run_live(spec)
    assert code == 0, json.dumps(data, indent=1)
    results = {r["name"]: r for r in data["testCases"][0]["testResults"]}  # type: ignore[index]
    assert results["said"]["actualValue"] == "It comes Feb 10, 2026."
    assert results["topic"]["actualValue"] == "Order_Management"


def test_run_eval_response_reference_fails_on_a_wrong_reply(order_copy: Path) -> None:
    spec = _payload(
        order_copy,
        [
            SESSION,
            MESSAGE,
            {
                "type": "evaluator.string_assertion",
                "id": "said",
                "actual": "{sm.response}",
                "expected": "March",
                "operator": "contains",
            },
        ],
        **{"x-agentscript": {"actions": ORDER_STUBS}},
    )
    code, data = _run_live(spec)
    assert code == 1
    failed = data["testCases"][0]["testResults"][0]  # type: ignore[index]
    assert failed["result"] == "FAILURE"
    assert failed["actualValue"] == "It comes Feb 10, 2026."


@pytest.mark.parametrize(
    ("step", "message"),
    [
        (
            {
                "type": "evaluator.string_assertion",
                "id": "typo_key",
                "actual": "{sm.outcome}",
                "expectd": "zzz",
            },
            "/tests/0/steps/2/expectd: unknown field 'expectd' of evaluator.string_assertion",
        ),
        (
            {
                "type": "evaluator.planner_topic_assertion",
                "id": "bad_op",
                "expected": "Order_Management",
                "operator": "not_a_real_operator",
            },
            "/tests/0/steps/2/operator: unknown operator 'not_a_real_operator'",
        ),
        (
            {
                "type": "evaluator.planner_actions_assertion",
                "id": "bad_op",
                "expected": "['go_to_orders']",
                "operator": "include_items",
            },
            "/tests/0/steps/2/operator: unknown operator 'include_items'",
        ),
        (
            {"type": "evaluator.string_assertion", "id": "no_expected", "actual": "{sm.outcome}"},
            "/tests/0/steps/2: evaluator.string_assertion needs 'expected'",
        ),
        (
            {
                "type": "evaluator.planner_topic_assertion",
                "id": "state_field",
                "expected": "Order_Management",
                "actual": "{gs.response.planner_response.topic}",
            },
            "a get_state reference reads response.planner_response.lastExecution.topic",
        ),
        (
            {"type": "evaluator.bot_response_rating", "id": "r", "expected": "x", "threshold": 0.5},
            "/tests/0/steps/2/threshold: 'threshold' must be a rating from 1 to 5",
        ),
    ],
)
def test_run_eval_unknown_key_or_operator_is_a_spec_error(
    order_copy: Path, step: dict[str, object], message: str
) -> None:
    steps: list[dict[str, object]] = [SESSION, MESSAGE, step]
    if "gs." in str(step.get("actual")):
        steps = [SESSION, MESSAGE, {"type": "agent.get_state", "id": "gs"}, step]
        message = message.replace("/steps/2", "/steps/3")
    spec = _payload(order_copy, steps)
    code, out, err = run_test(str(spec))
    assert code == 2, out
    assert message in err


def test_run_eval_unknown_step_field_is_reported_at_its_step_line(tmp_path: Path) -> None:
    # "threshold" is a field of the rating step (line 3), not of the string assertion (from
    # line 4): the error names the step's line, not the first "threshold" of the file.
    spec = tmp_path / "c.json"
    spec.write_text(
        '{"tests": [{"id": "t", "steps": [\n'
        ' {"type": "agent.send_message", "id": "m1", "utterance": "hi"},\n'
        ' {"type": "evaluator.bot_response_rating", "id": "r", "expected": "x", "threshold": 3},\n'
        ' {"type": "evaluator.string_assertion", "id": "s",\n'
        '  "expected": "x", "threshold": 3}]}]}\n',
        encoding="utf-8",
    )
    with pytest.raises(SpecError) as caught:
        read_spec(spec)
    assert caught.value.line == 4
    assert caught.value.message.startswith(
        "/tests/0/steps/2/threshold: unknown field 'threshold' of evaluator.string_assertion; "
    )


def test_run_eval_docs_example_passes_against_order_status(order_copy: Path) -> None:
    # The format C example of docs/testing.md (stubs under x-agentscript), answered live.
    spec = order_copy / "where.json"
    spec.write_text(
        """{"x-agentscript": {"actions": {
   "get_delivery_date": {"outputs": {"delivery_date": "February 10, 2026"}},
   "check_if_late": {"outputs": {"is_late": false}}}},
 "tests": [{"id": "where", "steps": [
  {"type": "agent.create_session", "id": "s", "context_variables": {"Id": "1234"}},
  {"type": "agent.send_message", "id": "m1", "utterance": "Where is my order?"},
  {"type": "evaluator.planner_topic_assertion", "id": "topic", "actual": "{m1.topic}",
   "expected": "Order", "operator": "contains"},
  {"type": "evaluator.planner_actions_assertion", "id": "acts",
   "expected": "['get_delivery_date']", "operator": "includes_items"},
  {"type": "evaluator.string_assertion", "id": "said", "actual": "{m1.response}",
   "expected": "Feb 10", "operator": "contains"}]}]}
""",
        encoding="utf-8",
    )
    code, data = _run_live(spec)
    assert code == 0, json.dumps(data, indent=1)
    assert data["testCases"][0]["status"] == "PASS"  # type: ignore[index]


# --- 15: a format C threshold is a 1-5 rating ---------------------------------------------


@pytest.mark.parametrize(
    ("rating", "score", "passes"),
    [(1.0, 0.0, True), (1.01, 0.0, False), (3.0, 0.5, True), (3.0, 0.49, False), (5, 0.99, False)],
)
def test_run_eval_threshold_is_always_a_1_to_5_rating(
    order_copy: Path, rating: float, score: float, passes: bool
) -> None:
    rating_step = {"type": "evaluator.bot_response_rating", "id": "r", "expected": "A date",
                   "threshold": rating}  # fmt: skip
    spec = _payload(order_copy, [SESSION, MESSAGE, rating_step])
    check = read_spec(spec).cases[0].turns[0].checks[0]

    async def ask(key: str, request: ModelRequest) -> ModelResponse:
        return ModelResponse(text=json.dumps({"score": score, "reasoning": "r"}))

    transcript = [{"role": "user", "text": "Where?"}, {"role": "agent", "text": "Feb 10."}]
    verdict = asyncio.run(judge(check, transcript, ask, JudgeSettings(), "double", 1))
    assert verdict.passed is passes
    assert verdict.judge is not None
    assert verdict.judge["threshold"] == pytest.approx((rating - 1) / 4)


# --- 7: the converter's empty action list --------------------------------------------------


def test_xml_empty_expected_actions_is_no_check(order_copy: Path) -> None:
    spec = order_copy / "Where.aiEvaluationDefinition-meta.xml"
    spec.write_text(
        """<AiEvaluationDefinition xmlns="http://soap.sforce.com/2006/04/metadata">
  <name>Where</name><subjectName>Order_Status</subjectName><subjectType>AGENT</subjectType>
  <testCase><number>1</number>
    <inputs><utterance>Where is my order?</utterance>
      <contextVariable><variableName>Id</variableName><variableValue>1234</variableValue></contextVariable>
    </inputs>
    <expectation><name>topic_sequence_match</name><expectedValue>Order_Management</expectedValue></expectation>
    <expectation><name>action_sequence_match</name><expectedValue>[]</expectedValue></expectation>
    <expectation><name>bot_response_rating</name></expectation>
  </testCase>
</AiEvaluationDefinition>
""",
        encoding="utf-8",
    )
    # Stubs come from a Python backend: the XML has no place for them.
    agent = order_copy / "order_status.agent"
    text = agent.read_text(encoding="utf-8")
    text = text.replace('"flow://Get_Delivery_Date"', '"python://orders_backend:delivery"')
    agent.write_text(text.replace('"flow://Check_If_Late"', '"python://orders_backend:late"'))
    (order_copy / "orders_backend.py").write_text(
        "def delivery(order_ID):\n    return {'delivery_date': 'Feb 10'}\n\n\n"
        "def late(order_ID, delivery_date):\n    return {'is_late': False}\n",
        encoding="utf-8",
    )
    code, data = _run_live(spec)
    assert code == 0, json.dumps(data, indent=1)
    names = [r["name"] for r in data["testCases"][0]["testResults"]]  # type: ignore[index]
    assert "action_sequence_match" not in names


# --- 9: lone surrogates in the json report --------------------------------------------------


def test_json_report_escapes_a_lone_surrogate(order_copy: Path) -> None:
    # A spec cannot hold one (the readers refuse it), but a model's answer can: JSON gives
    # "\ud800" as a lone surrogate, which the report must write as its escape.
    spec = _payload(
        order_copy,
        [
            MESSAGE,
            {
                "type": "evaluator.string_assertion",
                "id": "said",
                "actual": "{sm.response}",
                "expected": "x",
            },
        ],
        **{"x-agentscript": {"actions": ORDER_STUBS}},
    )
    answers = [ORDER_TURN[0], Reply(text="It comes \ud800 soon.")]
    with OpenAIServer(answers) as server:
        code, out, err = run_test(
            str(spec),
            "--agent",
            str(order_copy / "order_status.agent"),
            "--model",
            "openai:m",
            "--base-url",
            server.base_url,
            "--result-format",
            "json",
            env=LIVE_ENV,
        )
    assert code == 1, err
    assert "\\ud800" in out
    result = json.loads(out)["testCases"][0]["testResults"][0]
    assert result["actualValue"] == "It comes \ud800 soon."


# --- 10: JSON that is not a spec, found in a spec folder -------------------------------------


def test_non_spec_json_in_a_spec_folder_is_skipped(order_copy: Path) -> None:
    data = order_copy / "tests" / "data"
    data.mkdir(parents=True)
    (data / "fixture.json").write_text('{"orders": [1, 2]}', encoding="utf-8")
    (order_copy / "specs" / "list.json").write_text("[1, 2]", encoding="utf-8")
    code, out, err = run_test("--agent", str(order_copy / "order_status.agent"))
    assert code == 0, out + err
    assert "2 cases: 2 passed" in out


@pytest.mark.parametrize(
    "text",
    [
        '{"orders": [1], "orders": [2]}',  # a key twice
        '{"name": "bad \\udfff"}',  # a lone surrogate
        '{"total": NaN}',
        '{"big": ' + "9" * 5_000 + "}",  # longer than Python reads
    ],
)
def test_non_spec_json_in_a_spec_folder_is_skipped_whatever_it_holds(
    order_copy: Path, text: str
) -> None:
    # What a run-eval payload may not hold is refused in payloads only: other JSON beside
    # the specs (fixtures, reports) is not a spec, whatever it holds.
    (order_copy / "specs" / "fixture.json").write_text(text, encoding="utf-8")
    code, out, err = run_test("--agent", str(order_copy / "order_status.agent"))
    assert code == 0, out + err
    assert "2 cases: 2 passed" in out


def test_coverage_json_written_in_specs_does_not_break_the_next_run(
    order_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(order_copy)
    code, _, err = run_test("--coverage-json", "specs/cov.json")
    assert code == 0, err
    assert (order_copy / "specs" / "cov.json").is_file()
    code, out, err = run_test()
    assert code == 0, out + err
    # Spec paths are shown relative to the current folder, as when PATH is given.
    assert "PASS    specs/Order_Status-testSpec.yaml :: Test Case #1" in out


def test_non_spec_json_named_explicitly_is_an_error(order_copy: Path) -> None:
    fixture = order_copy / "fixture.json"
    fixture.write_text('{"orders": []}', encoding="utf-8")
    code, _, err = run_test(str(fixture))
    assert code == 2
    assert f"{fixture}:1: not a run-eval payload" in err


# --- 11: checks that hold whatever the agent does -------------------------------------------


def test_case_without_expectation_is_warned_about(order_copy: Path) -> None:
    spec = order_copy / "noexp.yaml"
    spec.write_text(
        "name: NoExp\nsubjectName: Order_Status\ntestCases:\n"
        "  - utterance: hi\n    x-agentscript: {model: [{say: hello}]}\n",
        encoding="utf-8",
    )
    code, _, err = run_test(str(spec))
    assert code == 0
    assert err.count("warning:") == 1
    assert f"warning: {spec}:4: case 'Test Case #1' has no expectation" in err


def test_mantle_scenario_without_goals_is_warned_about(card_bank_copy: Path) -> None:
    scenario = write_scenario(
        card_bank_copy,
        "nogoals.yml",
        "scenario:\n  name: No goals\n  simulation_context: You are Ada.\n",
    )
    _, _, err = run_test(str(scenario))
    assert "case 'No goals' has no expectation" in err


@pytest.mark.parametrize(
    ("rule", "warned"),
    [("subset", True), ("in_order", True), ("exact", False), ("superset", False)],
)
def test_empty_expected_actions_under_a_rule_any_run_satisfies_is_warned_about(
    order_copy: Path, rule: str, warned: bool
) -> None:
    spec = order_copy / "empty.yaml"
    spec.write_text(
        f"name: E\nsubjectName: Order_Status\nx-agentscript: {{actionMatch: {rule}}}\n"
        "testCases:\n  - utterance: hi\n    expectedActions: []\n"
        "    x-agentscript: {model: [{say: hello}]}\n",
        encoding="utf-8",
    )
    _, _, err = run_test(str(spec))
    assert ("an empty action list under rule" in err) is warned, err
    if warned:
        assert f"warning: {spec}:6: case 'Test Case #1': action_sequence_match" in err


def test_run_eval_empty_includes_items_is_warned_about(order_copy: Path) -> None:
    step = {"type": "evaluator.planner_actions_assertion", "id": "acts", "expected": "[]"}
    spec = _payload(order_copy, [SESSION, MESSAGE, step])
    _, _, err = run_test(str(spec))
    assert "acts: an empty action list under rule subset" in err


# --- 12: TAP's expected failure --------------------------------------------------------------


def test_tap_writes_a_non_blocking_judged_failure_as_not_ok_todo(order_copy: Path) -> None:
    spec = order_copy / "judged.yaml"
    spec.write_text(
        """name: J
subjectName: Order_Status
x-agentscript:
  actions:
    get_delivery_date: {outputs: {delivery_date: "Feb"}}
    check_if_late: {outputs: {is_late: true}}
testCases:
  - utterance: Where is my order?
    expectedOutcome: The agent gives a date
    contextVariables: [{name: Id, value: "1234"}]
    x-agentscript:
      model: [{tool: go_to_orders}, {say: "Your order arrives Feb."}]
""",
        encoding="utf-8",
    )
    judge = JudgeDouble(answer='{"score": 0, "reasoning": "no"}')
    code, text = run_command(spec, judge, result_format="tap")
    assert code == 0
    assert "\nnot ok 1 Test Case #1.bot_response_rating # TODO judged, not blocking\n" in text


# --- 13: spec mistakes found when the spec is read ------------------------------------------


def test_latency_limit_that_is_not_a_number_is_a_spec_error(order_copy: Path) -> None:
    spec = order_copy / "ngt.yaml"
    spec.write_text(
        """name: NGT
subjectName: Order_Status
testCases:
  - inputs:
      - utterance: Where is my order?
    scorers:
      - {name: output_latency_milliseconds, expected: "fast"}
""",
        encoding="utf-8",
    )
    code, _, err = run_test(str(spec))
    assert code == 2
    assert f"{spec}:7: output_latency_milliseconds: the limit must be milliseconds" in err


@pytest.mark.parametrize(
    ("topic", "code"),
    [
        ("p_16jPl000000GwEX_Order_Management_16j8eeef13560aa", 0),
        ("Order_Management", 0),
        ("Nope_Topic", 2),
    ],
)
def test_history_topic_must_name_a_subagent(order_copy: Path, topic: str, code: int) -> None:
    spec = order_copy / "hist.yaml"
    spec.write_text(
        f"""name: Hist
subjectName: Order_Status
x-agentscript:
  actions:
    get_delivery_date: {{outputs: {{delivery_date: "Feb"}}}}
    check_if_late: {{outputs: {{is_late: true}}}}
testCases:
  - utterance: And when will it arrive?
    expectedTopic: router
    contextVariables: [{{name: Id, value: "1234"}}]
    conversationHistory:
      - {{role: user, message: Hi}}
      - {{role: agent, message: Hello, topic: {topic}}}
    x-agentscript:
      model: [{{say: Feb}}]
""",
        encoding="utf-8",
    )
    # The session restores in the subagent the topic names (before: an org-style name, or a
    # wrong one, made the case an ERROR "cannot restore the session"); the turn itself starts
    # at start_agent again (S1).
    got, out, err = run_test(str(spec))
    assert got == code, out + err
    if code == 2:
        assert f"{spec}:8: 'Nope_Topic' is not a subagent of the agent Order_Status" in err


@pytest.mark.parametrize("value", [0, False, ""])
def test_run_eval_a_falsy_x_agentscript_is_a_spec_error_not_an_empty_one(
    order_copy: Path, value: object
) -> None:
    spec = _payload(order_copy, [SESSION, MESSAGE], **{"x-agentscript": value})
    code, out, err = run_test(str(spec))
    assert code == 2, out
    assert "/x-agentscript must be an object" in err
