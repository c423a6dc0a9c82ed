"""Bad specs get one clear error naming the file and line (exit 2), never a traceback."""

from __future__ import annotations

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
