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
