"""Bad specs get one clear error naming the file and line (exit 2), never a traceback."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers import run_test

HEADER = "name: T\nsubjectType: AGENT\nsubjectName: Order_Status\ntestCases:\n"


@pytest.mark.parametrize(
    ("body", "line", "message"),
    [
        ("  - utterance: hi\n    expectedTopc: x\n", 6, "unknown field 'expectedTopc'"),
        ("  - utterance: hi\n    expectedActions: 5\n", 6, "list of names"),
        ("  - utterance: [a, b]\n", 5, "'utterance' must be a text"),
        ("  - utterance: hi\n    metrics: [politeness]\n", 6, "unknown metric 'politeness'"),
        (
            "  - utterance: hi\n    customEvaluations:\n      - name: string_comparison\n"
            "        parameters:\n          - {name: operator, value: equals}\n"
            "          - {name: actual, value: '$.a[?(@.b ==', isReference: true}\n"
            "          - {name: expected, value: x}\n",
            7,
            "JSONPath",
        ),
        (
            "  - utterance: hi\n    conversationHistory:\n      - {role: agent, message: x}\n",
            7,
            "needs 'topic'",
        ),
        ("  - utterance: hi\n  bad: [\n", 6, "invalid YAML"),
        # The YAML budgets of agentscript.reading: a duplicate key, an alias bomb.
        ("  - utterance: hi\n    utterance: again\n", 6, "duplicate key 'utterance'"),
        (
            "  - utterance: hi\n    x-agentscript:\n      a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]\n"
            + "".join(
                f"      {n}: &{n} [{', '.join([f'*{p}'] * 10)}]\n"
                for p, n in zip("abcde", "bcdef", strict=True)
            ),
            12,
            "alias bomb is refused",
        ),
        # A scalar Python cannot convert: a spec error at its line, not a traceback.
        (
            "  - utterance: hi\n  - utterance: " + "9" * 5_000 + "\n",
            6,
            "a number of 5000 digits is longer than Python reads",
        ),
        ("  - utterance: 2024-13-45\n", 5, "the timestamp '2024-13-45' cannot be read"),
        # A custom evaluation's parameter given twice: the second must not replace the first.
        (
            "  - utterance: hi\n    customEvaluations:\n      - name: string_comparison\n"
            "        parameters:\n          - {name: operator, value: equals}\n"
            "          - {name: operator, value: contains}\n"
            "          - {name: actual, value: $.outcome, isReference: true}\n"
            "          - {name: expected, value: x}\n",
            10,
            "parameter 'operator' is given twice",
        ),
    ],
)
def test_bad_spec_names_file_and_line(order_copy: Path, body: str, line: int, message: str) -> None:
    spec = order_copy / "bad.yaml"
    spec.write_text(HEADER + body, encoding="utf-8")
    code, out, err = run_test(str(spec))
    assert code == 2
    assert f"{spec}:{line}:" in err
    assert message in err
    assert "Traceback" not in err + out


def test_subject_name_matching_no_agent_is_an_error(order_copy: Path) -> None:
    spec = order_copy / "other.yaml"
    spec.write_text(HEADER.replace("Order_Status", "Nope") + "  - utterance: hi\n", "utf-8")
    code, _, err = run_test(str(spec))
    assert code == 2
    assert "subjectName 'Nope' matches no .agent file" in err


def test_unknown_xml_element_names_its_line(order_copy: Path) -> None:
    spec = order_copy / "x.aiEvaluationDefinition-meta.xml"
    spec.write_text(
        "<AiEvaluationDefinition>\n<subjectName>Order_Status</subjectName>\n"
        "<testCase>\n<inputs><utterance>hi</utterance></inputs>\n<expectaton/>\n</testCase>\n"
        "</AiEvaluationDefinition>\n",
        encoding="utf-8",
    )
    code, _, err = run_test(str(spec))
    assert code == 2
    assert f"{spec}:5:" in err and "<expectaton>" in err


def test_unknown_run_eval_step_type(order_copy: Path) -> None:
    spec = order_copy / "c.json"
    spec.write_text('{"tests": [{"id": "t",\n "steps": [{"type": "agent.dance", "id": "d"}]}]}')
    code, _, err = run_test(str(spec))
    assert code == 2
    assert f"{spec}:2:" in err and "unknown step type 'agent.dance'" in err


# Format C, one step a line: STEPS replaced by the steps after the first send_message.
RUN_EVAL = (
    '{"tests": [{"id": "t", "steps": [\n'
    '{"type": "agent.send_message", "id": "m1", "utterance": "hi"}STEPS]}]}\n'
)
RATING = ',\n{"type": "evaluator.bot_response_rating", "id": "r", "actual": "{m1.response}"'
NUMERIC = ',\n{"type": "evaluator.numeric_assertion", "id": "n", "actual": "{m1.outcome}"'


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        # An integer longer than Python converts, in a spec and in any JSON value.
        (
            RUN_EVAL.replace("STEPS", NUMERIC + ', "expected": ' + "9" * 5_000 + "}"),
            3,
            "invalid JSON: an integer of 5000 digits is longer than Python reads",
        ),
        # Nothing to run is refused, as formats A and B refuse an empty testCases.
        ('{"tests": []}\n', 1, "/tests: the spec has no test cases"),
        # A rating needs the meaning the reply must have, as a text (formats A and B too).
        (RUN_EVAL.replace("STEPS", RATING + "}"), 3, "/tests/0/steps/1/expected: "),
        (RUN_EVAL.replace("STEPS", RATING + ', "expected": [1]}'), 3, "needs 'expected'"),
        (RUN_EVAL.replace("STEPS", RATING + ', "expected": ""}'), 3, "needs 'expected'"),
        # A key given twice: the second must not silently replace the first.
        (
            RUN_EVAL.replace('"hi"}', '"hi", "utterance": "bye"}').replace("STEPS", ""),
            2,
            "invalid JSON: an object gives the key 'utterance' twice; keep one",
        ),
        (
            RUN_EVAL.replace(
                "STEPS",
                ',\n{"type": "agent.create_session", "context_variables": '
                '[{"name": "Id", "value": "1"}, {"name": "Id", "value": "2"}]}',
            ),
            1,  # a step without an id is reported at its test's line
            "/tests/0/steps/1/context_variables/1: context variable 'Id' is given twice",
        ),
        # A lone surrogate is no text: the YAML readers refuse it, and so does this one.
        (
            RUN_EVAL.replace('"hi"', '"hi \\udfff"').replace("STEPS", ""),
            2,
            "/tests/0/steps/0/utterance: the string holds a lone surrogate (\\udfff)",
        ),
        (
            RUN_EVAL.replace("STEPS", NUMERIC + ', "expected": 1, "\\uD800": 2}'),
            3,
            "/tests/0/steps/1/\\ud800: the key holds a lone surrogate",
        ),
    ],
)
def test_bad_run_eval_payload_names_file_and_line(
    order_copy: Path, text: str, line: int, message: str
) -> None:
    spec = order_copy / "c.json"
    spec.write_text(text, encoding="utf-8")
    code, out, err = run_test(str(spec), "--agent", str(order_copy / "order_status.agent"))
    assert code == 2, out + err
    assert f"{spec}:{line}: " in err
    assert message in err
    assert "Traceback" not in err + out


def test_run_eval_payload_reads_a_surrogate_pair_as_its_character(tmp_path: Path) -> None:
    from agentscript.testing.readers import read_spec

    spec = tmp_path / "c.json"
    spec.write_text(RUN_EVAL.replace('"hi"', '"hi \\ud83d\\ude00"').replace("STEPS", ""))
    assert read_spec(spec).cases[0].turns[0].utterance == "hi \U0001f600"


XML_CASE = """<AiEvaluationDefinition xmlns="http://soap.sforce.com/2006/04/metadata">
<subjectName>Order_Status</subjectName>
<testCase>
<inputs>
<utterance>Where is my order?</utterance>
INPUTS</inputs>
<expectation><name>topic_sequence_match</name>
<expectedValue>Order_Management</expectedValue>
EXPECTATION</expectation>
CASE</testCase>
</AiEvaluationDefinition>
"""


@pytest.mark.parametrize(
    ("part", "added", "line", "message"),
    [
        ("INPUTS", "<utterance>Something else</utterance>\n", 6, "<utterance> is given twice"),
        ("EXPECTATION", "<expectedValue>escalate</expectedValue>\n", 9, "(first at line 8)"),
        ("CASE", "<inputs><utterance>Hi</utterance></inputs>\n", 10, "<inputs> is given twice"),
        ("CASE", "<number>1</number>\n<number>2</number>\n", 11, "<number> is given twice"),
        (
            "INPUTS",
            "<contextVariable><variableName>Id</variableName></contextVariable>\n" * 2,
            7,
            "context variable 'Id' is given twice",
        ),
        (
            "INPUTS",
            "<contextVariable><variableName>Id</variableName>\n"
            "<variableValue>1</variableValue><variableValue>2</variableValue>"
            "</contextVariable>\n",
            7,
            "<variableValue> is given twice in <contextVariable>",
        ),
    ],
)
def test_xml_field_given_twice_names_its_line(
    order_copy: Path, part: str, added: str, line: int, message: str
) -> None:
    # Only Salesforce's lists repeat (testCase, expectation, scorer, contextVariable,
    # conversationHistory, parameter): a second value of any other field is never dropped.
    spec = order_copy / "x.aiEvaluationDefinition-meta.xml"
    text = XML_CASE.replace(part, added)
    spec.write_text(re.sub("INPUTS|EXPECTATION|CASE", "", text), encoding="utf-8")
    code, out, err = run_test(str(spec))
    assert code == 2, out + err
    assert f"{spec}:{line}: " in err and message in err
    assert "Traceback" not in err + out


def test_xml_custom_parameter_given_twice_names_its_line(order_copy: Path) -> None:
    spec = order_copy / "x.aiEvaluationDefinition-meta.xml"
    parameters = "".join(
        f"<parameter><name>{name}</name><value>{value}</value></parameter>\n"
        for name, value in [("operator", "equals"), ("operator", "contains"), ("expected", "x")]
    )
    custom = f"<expectation><name>string_comparison</name>\n{parameters}</expectation>\n"
    text = XML_CASE.replace("CASE", custom)
    spec.write_text(re.sub("INPUTS|EXPECTATION", "", text), encoding="utf-8")
    code, out, err = run_test(str(spec))
    assert code == 2, out + err
    assert f"{spec}:12: <parameter> 'operator' is given twice" in err


def test_xml_lists_still_repeat(tmp_path: Path) -> None:
    from agentscript.testing.readers import read_spec

    spec = tmp_path / "x.aiEvaluationDefinition-meta.xml"
    text = XML_CASE.replace(
        "INPUTS",
        "<contextVariable><variableName>A</variableName><variableValue>1</variableValue>"
        "</contextVariable>\n<contextVariable><variableName>B</variableName>"
        "<variableValue>2</variableValue></contextVariable>\n",
    ).replace(
        "CASE",
        "<expectation><name>coherence</name></expectation>\n</testCase>\n<testCase>\n"
        "<inputs><utterance>Hi</utterance></inputs>\n",
    )
    spec.write_text(text.replace("EXPECTATION", ""), encoding="utf-8")
    suite = read_spec(spec)
    assert [c.turns[0].utterance for c in suite.cases] == ["Where is my order?", "Hi"]
    assert suite.cases[0].context_variables == {"A": "1", "B": "2"}
    assert [check.name for check in suite.cases[0].turns[0].checks] == [
        "topic_sequence_match",
        "coherence",
    ]


def test_fifos_are_never_opened_as_agents_or_specs(tmp_path: Path) -> None:
    # Opening a FIFO blocks until a writer comes: the agent search and the spec reader only
    # ever open regular files.
    import os

    from agentscript.testing.discovery import agent_files
    from agentscript.testing.errors import SpecError
    from agentscript.testing.readers import read_spec

    os.mkfifo(tmp_path / "pipe.agent")
    os.mkfifo(tmp_path / "pipe.yaml")
    (tmp_path / "real.agent").write_text("# not an agent\n", encoding="utf-8")
    assert agent_files(tmp_path, 2) == [tmp_path / "real.agent"]
    with pytest.raises(SpecError, match="not a regular file"):
        read_spec(tmp_path / "pipe.yaml")


def test_subject_name_prefers_the_agent_nearest_the_spec(order_copy: Path) -> None:
    # Another agent with the same developer_name elsewhere in the project is not picked.
    (order_copy / ".git").mkdir()
    elsewhere = order_copy / "aa_other"  # sorts before the real one by name
    elsewhere.mkdir()
    text = (order_copy / "order_status.agent").read_text(encoding="utf-8")
    broken = text.replace(
        "go_to_orders: @utils.transition to @subagent.Order_Management",
        "go_to_orders: @utils.transition to @subagent.escalate_order",
    )
    (elsewhere / "copy.agent").write_text(broken, encoding="utf-8")
    code, out, _ = run_test(str(order_copy / "specs"), "--verbose")
    assert code == 0, out


CARD_BANK = Path(__file__).resolve().parents[2] / "examples" / "card_bank"
SCENARIO = "scenario:\n  name: S\n  simulation_context: You are a customer.\n"


@pytest.mark.parametrize(
    ("body", "line", "message"),
    [
        # Wrong types where a mapping goes: a clear error, never a traceback or an empty value.
        ("  setup: {memory: abc}\n", 4, "memory must be a mapping"),
        ("  setup: {initial_slots: [1]}\n", 4, "initial_slots must be a mapping"),
        ("  setup: 0\n", 4, "setup must be a mapping"),
        ("  goals: false\n", 4, "goals must be a mapping"),
        ('  x-agentscript: ""\n', 4, "x-agentscript must be a mapping"),
        # Stubs are checked when the spec is read, as in the other formats.
        (
            "  x-agentscript: {actions: {block_card: {error: [1, 2]}}}\n",
            4,
            "block_card: stub 'error' must be the failure's text, got a list",
        ),
        # Rasa compiles text_matches as a regular expression: a bad one is refused on reading.
        (
            "  goals:\n    assertions:\n      - bot_uttered: {text_matches: '(card'}\n",
            6,
            "bot_uttered: text_matches '(card' is not a regular expression (missing )",
        ),
        (
            "  goals:\n    assertions:\n      - bot_uttered: {text_matches: 3}\n",
            6,
            "text_matches is a regular expression, as a text",
        ),
    ],
)
def test_bad_mantle_scenario_names_file_and_line(
    tmp_path: Path, body: str, line: int, message: str
) -> None:
    spec = tmp_path / "bad.yml"
    spec.write_text(SCENARIO + body, encoding="utf-8")
    code, out, err = run_test(str(spec), "--agent", str(CARD_BANK))
    assert code == 2, out + err
    assert f"{spec}:{line}:" in err
    assert message in err
    assert "Traceback" not in err + out


@pytest.mark.parametrize("value", ["0", "false", '""'])
def test_a_falsy_x_agentscript_is_an_error_not_an_empty_one(order_copy: Path, value: str) -> None:
    spec = order_copy / "bad.yaml"
    spec.write_text(f"{HEADER}  - utterance: hi\n    x-agentscript: {value}\n", encoding="utf-8")
    code, out, err = run_test(str(spec))
    assert code == 2
    assert f"{spec}:6: x-agentscript must be a mapping" in err
    assert "Traceback" not in err + out
