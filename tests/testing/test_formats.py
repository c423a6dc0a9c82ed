"""Every Salesforce format (A, B, C, both metadata XML files) is read and run against a local
agent, and the result JSON has Salesforce's shape, so documented JSONPaths evaluate on it."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import run_json, run_test

from agentscript.testing.jsonpath import compile_path
from fakes.llm_servers import FakeCall, OpenAIServer, Reply

ENV = {"OPENAI_API_KEY": "sk-test", "AGENTSCRIPT_CONFIG": "/nonexistent"}
STUBS = """x-agentscript:
  actions:
    get_delivery_date: {outputs: {delivery_date: "February 10, 2026"}}
    check_if_late: {outputs: {is_late: true}}
"""
ORDER_TURN = [Reply(calls=[FakeCall.of("go_to_orders", {})]), Reply(text="It comes Feb 10.")]


def test_format_A_example_spec_passes_with_salesforce_shaped_result(order_copy: Path) -> None:
    code, data = run_json(str(order_copy / "specs"))
    assert code == 0
    first = data["testCases"][0]
    assert first["status"] == "PASS"
    generated = first["generatedData"]
    assert generated["topic"] == "Order_Management"
    assert generated["actionsSequence"] == ["go_to_orders", "get_delivery_date", "check_if_late"]
    assert generated["invokedActions"][0][0]["function"] == {
        "name": "get_delivery_date",
        "input": {"order_ID": "1234"},
        "output": {"delivery_date": "February 10, 2026"},
    }
    assert "executionLatency" in generated["invokedActions"][0][0]
    path = compile_path(
        "$.generatedData.invokedActions[*][?(@.function.name == 'check_if_late')]"
        ".function.output.is_late"
    )
    assert path.find(first) == [True]
    names = {r["name"] for r in first["testResults"]}
    assert {"topic_sequence_match", "action_sequence_match"} <= names
    for result in first["testResults"]:
        assert set(result) >= {
            "name",
            "expectedValue",
            "actualValue",
            "score",
            "result",
            "metricScore",
            "metricExplainability",
        }
        assert result["result"] == "PASS"


def test_format_B_ngt_inputs_share_their_scorers(order_copy: Path) -> None:
    spec = order_copy / "ngt.yaml"
    spec.write_text(
        "name: NGT\nsubjectType: AGENT\nsubjectName: Order_Status\n"
        + STUBS
        + """
testCases:
  - inputs:
      - utterance: Where is my order?
        contextVariables: [{name: Id, value: "1234"}]
      - utterance: Status of my order please
        contextVariables: [{name: Id, value: "1234"}]
    scorers:
      - {name: topic_sequence_match, expected: Order_Management}
      - {name: action_sequence_match, expected: "['go_to_orders','get_delivery_date','check_if_late']"}
    x-agentscript:
      model: [{tool: go_to_orders}, {say: "February 10."}]
""",
        encoding="utf-8",
    )
    code, data = run_json(str(spec))
    assert code == 0
    assert [c["name"] for c in data["testCases"]] == ["Test Case #1.1", "Test Case #1.2"]
    assert all(len(c["testResults"]) == 2 for c in data["testCases"])


def _record_then_replay(spec: Path, script: list[Reply]) -> dict[str, object]:
    with OpenAIServer(script) as server:
        code, data = run_json(
            str(spec),
            "--record",
            "--model",
            "openai:gpt-test",
            "--base-url",
            server.base_url,
            env=ENV,
        )
        assert code == 0, json.dumps(data, indent=1)
    assert (spec.parent / (spec.name + ".replay.json")).is_file()
    code, replayed = run_json(str(spec), env=ENV)  # no server, no model: replayed answers
    assert code == 0, json.dumps(replayed, indent=1)
    return replayed


def test_format_C_run_eval_payload_runs_from_a_recording(order_copy: Path) -> None:
    _with_stubs(order_copy)
    spec = order_copy / "eval.json"
    spec.write_text(
        json.dumps(
            {
                "tests": [
                    {
                        "id": "where",
                        "steps": [
                            {
                                "type": "agent.create_session",
                                "id": "s",
                                "context_variables": {"Id": "1234"},
                            },
                            {
                                "type": "agent.send_message",
                                "id": "m1",
                                "session_id": "{s.session_id}",
                                "utterance": "Where is my order?",
                            },
                            {
                                "type": "evaluator.planner_topic_assertion",
                                "id": "topic",
                                "actual": "{m1.topic}",
                                "expected": "Order",
                                "operator": "contains",
                            },
                            {
                                "type": "evaluator.planner_actions_assertion",
                                "id": "acts",
                                "actual": "{m1.actions}",
                                "expected": "['get_delivery_date']",
                                "operator": "includes_items",
                            },
                            {
                                "type": "evaluator.string_assertion",
                                "id": "said",
                                "actual": "{m1.outcome}",
                                "expected": "Feb 10",
                                "operator": "contains",
                            },
                        ],
                    }
                ]
            }
        ),
        encoding="utf-8",
    )
    replayed = _record_then_replay(spec, list(ORDER_TURN))
    case = replayed["testCases"][0]  # type: ignore[index]
    assert [r["name"] for r in case["testResults"]] == ["topic", "acts", "said"]


EVALUATION_XML = """<?xml version="1.0" encoding="UTF-8"?>
<AiEvaluationDefinition xmlns="http://soap.sforce.com/2006/04/metadata">
    <subjectName>Order_Status</subjectName>
    <name>Order tests</name>
    <subjectType>AGENT</subjectType>
    <testCase>
        <expectation><name>topic_assertion</name><expectedValue>Order_Management</expectedValue></expectation>
        <inputs>
            <contextVariable><variableName>Id</variableName><variableValue>1234</variableValue></contextVariable>
            <utterance>Where is my order?</utterance>
        </inputs>
        <expectation><name>action_sequence_match</name><expectedValue>[&apos;go_to_orders&apos;,&apos;get_delivery_date&apos;,&apos;check_if_late&apos;]</expectedValue></expectation>
        <expectation>
            <name>string_comparison</name><label>order looked up</label>
            <parameter><name>operator</name><value>equals</value><isReference>false</isReference></parameter>
            <parameter><name>actual</name><value>$.generatedData.invokedActions[*][?(@.function.name == 'get_delivery_date')].function.input.order_ID</value><isReference>true</isReference></parameter>
            <parameter><name>expected</name><value>1234</value><isReference>false</isReference></parameter>
        </expectation>
        <number>1</number>
    </testCase>
</AiEvaluationDefinition>
"""


def _with_stubs(order_copy: Path) -> None:
    # The XML and JSON forms have no place for stubs: the actions get a Python backend instead.
    agent = order_copy / "order_status.agent"
    text = agent.read_text(encoding="utf-8")
    text = text.replace('"flow://Get_Delivery_Date"', '"python://orders_backend:delivery"')
    text = text.replace('"flow://Check_If_Late"', '"python://orders_backend:late"')
    agent.write_text(text, encoding="utf-8")
    (order_copy / "orders_backend.py").write_text(
        "def delivery(order_ID):\n    return {'delivery_date': 'February 10, 2026'}\n\n\n"
        "def late(order_ID, delivery_date):\n    return {'is_late': True}\n",
        encoding="utf-8",
    )


def test_aiEvaluationDefinition_xml_in_any_element_order(order_copy: Path) -> None:
    _with_stubs(order_copy)
    spec = order_copy / "Order.aiEvaluationDefinition-meta.xml"
    spec.write_text(EVALUATION_XML, encoding="utf-8")
    replayed = _record_then_replay(spec, list(ORDER_TURN))
    results = replayed["testCases"][0]["testResults"]  # type: ignore[index]
    assert [r["name"] for r in results] == [
        "topic_sequence_match",
        "action_sequence_match",
        "order looked up",
    ]
    assert all(r["result"] == "PASS" for r in results)


def test_aiTestingDefinition_xml_scorers(order_copy: Path) -> None:
    _with_stubs(order_copy)
    spec = order_copy / "Order.aiTestingDefinition-meta.xml"
    spec.write_text(
        """<AiTestingDefinition xmlns="http://soap.sforce.com/2006/04/metadata">
  <name>NGT</name><subjectName>Order_Status</subjectName><subjectType>AGENT</subjectType>
  <testCase><number>1</number>
    <inputs><utterance>Where is my order?</utterance>
      <contextVariable><variableName>Id</variableName><variableValue>1234</variableValue></contextVariable>
    </inputs>
    <scorer><name>topic_sequence_match</name><expectedValue>Order_Management</expectedValue></scorer>
    <scorer><name>action_sequence_match</name><expectedValue>go_to_orders</expectedValue><scorerType>OOTB</scorerType></scorer>
  </testCase>
</AiTestingDefinition>
""",
        encoding="utf-8",
    )
    with OpenAIServer(list(ORDER_TURN)) as server:
        code, out, _ = run_test(
            str(spec), "--model", "openai:gpt-test", "--base-url", server.base_url, env=ENV
        )
    # The scorer expects only the transition, and actions match exactly by default.
    assert code == 1
    assert "rule exact" in out
    with OpenAIServer(list(ORDER_TURN)) as server:
        code, out, _ = run_test(
            str(spec),
            "--model",
            "openai:gpt-test",
            "--base-url",
            server.base_url,
            "--action-match",
            "in_order",
            env=ENV,
        )
    assert code == 0, out


def test_metadata_xml_value_fields_keep_text_around_child_elements(order_copy: Path) -> None:
    # Markup inside a value field is read as the text it holds, with the text after each child
    # (its tail) kept: "Order_<b>Manage</b>ment" is Order_Management, not "Order_".
    _with_stubs(order_copy)
    spec = order_copy / "Mixed.aiEvaluationDefinition-meta.xml"
    spec.write_text(
        """<AiEvaluationDefinition xmlns="http://soap.sforce.com/2006/04/metadata">
  <name>Mixed</name><subjectName>Order_Status</subjectName><subjectType>AGENT</subjectType>
  <testCase><number>1</number>
    <inputs><utterance>Where is <i>my</i> order?</utterance>
      <contextVariable><variableName>Id</variableName><variableValue>12<b>3</b>4</variableValue></contextVariable>
    </inputs>
    <expectation><name>topic_assertion</name><expectedValue>Order_<b>Manage</b>ment</expectedValue></expectation>
    <expectation>
      <name>string_comparison</name><label>date <i>looked</i> up</label>
      <parameter><name>operator</name><value>equals</value><isReference>false</isReference></parameter>
      <parameter><name>actual</name><value>$.generatedData.invokedActions[*][?(@.function.name == 'get_delivery_date')].function.output.delivery_date</value><isReference>true</isReference></parameter>
      <parameter><name>expected</name><value>February <b>10</b>, <i>20<u>26</u></i></value><isReference>false</isReference></parameter>
    </expectation>
    <expectation>
      <name>string_comparison</name><label>order id</label>
      <parameter><name>operator</name><value>equals</value><isReference>false</isReference></parameter>
      <parameter><name>actual</name><value>$.generatedData.invokedActions[*][?(@.function.name == 'get_delivery_date')].function.input.order_ID</value><isReference>true</isReference></parameter>
      <parameter><name>expected</name><value>1234</value><isReference>false</isReference></parameter>
    </expectation>
  </testCase>
</AiEvaluationDefinition>
""",
        encoding="utf-8",
    )
    with OpenAIServer(list(ORDER_TURN)) as server:
        code, data = run_json(
            str(spec), "--model", "openai:gpt-test", "--base-url", server.base_url, env=ENV
        )
    case = data["testCases"][0]
    assert code == 0, json.dumps(case, indent=1)
    assert case["inputs"]["utterance"] == "Where is my order?"
    assert [(r["name"], r["expectedValue"], r["result"]) for r in case["testResults"]] == [
        ("topic_sequence_match", "Order_Management", "PASS"),
        ("date looked up", "February 10, 2026", "PASS"),
        ("order id", "1234", "PASS"),
    ]
