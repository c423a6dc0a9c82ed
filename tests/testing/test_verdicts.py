"""Verdicts and exit codes: a broken agent fails the example spec with messages naming the
expectation, the expected and the actual value; junit and tap carry one entry per expectation;
failed assertions exit 1 unless opted out; action match rules are named when they fail."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import run_json, run_test

from agentscript.testing.matchers import actions_match, topic_matches
from agentscript.testing.spec import MatchRule


def _break(order_copy: Path) -> None:
    # The deliberately broken copy: the router sends order questions to escalation.
    agent = order_copy / "order_status.agent"
    text = agent.read_text(encoding="utf-8")
    agent.write_text(
        text.replace(
            "go_to_orders: @utils.transition to @subagent.Order_Management",
            "go_to_orders: @utils.transition to @subagent.escalate_order",
        ),
        encoding="utf-8",
    )


def test_broken_agent_fails_with_expectation_expected_and_actual(order_copy: Path) -> None:
    _break(order_copy)
    code, out, _ = run_test(str(order_copy / "specs"))
    assert code == 1
    assert "FAILURE" in out
    assert "FAIL topic_sequence_match (line 14)" in out
    assert 'expected: "Order_Management"' in out
    assert 'actual:   "escalate_order"' in out
    assert "rule exact" in out


def test_no_fail_on_assertion_keeps_exit_zero(order_copy: Path) -> None:
    _break(order_copy)
    code, _, _ = run_test(str(order_copy / "specs"), "--no-fail-on-assertion")
    assert code == 0


def test_junit_has_a_testcase_per_expectation(order_copy: Path) -> None:
    _break(order_copy)
    code, out, _ = run_test(str(order_copy / "specs"), "--result-format", "junit")
    assert code == 1
    assert out.count("<testcase ") == 6
    assert out.count("<failure ") >= 2
    assert 'name="turn1.topic_sequence_match"' in out


def test_tap_version_14_one_line_per_expectation(order_copy: Path) -> None:
    _break(order_copy)
    _, out, _ = run_test(str(order_copy / "specs"), "--result-format", "tap")
    lines = out.splitlines()
    assert lines[0] == "TAP version 14"
    assert lines[-1] == "1..6"
    assert "not ok 1 Test Case #1.topic_sequence_match" in lines
    assert '  expected: "Order_Management"' in lines


def test_k_selects_cases_and_output_dir_writes_the_result(order_copy: Path, tmp_path: Path) -> None:
    out_dir = tmp_path / "results"
    code, data = run_json(str(order_copy / "specs"), "-k", "person", "--output-dir", str(out_dir))
    assert code == 0
    assert [c["name"] for c in data["testCases"]] == ["Test Case #2"]
    assert (out_dir / "test-result.json").is_file()


def test_fail_fast_stops_after_the_first_failing_case(order_copy: Path) -> None:
    _break(order_copy)
    _, data = run_json(str(order_copy / "specs"), "--fail-fast")
    assert len(data["testCases"]) == 1


@pytest.mark.parametrize(
    ("rule", "expected", "actual", "ok"),
    [
        (MatchRule.EXACT, ["a", "b"], ["a", "b"], True),
        (MatchRule.EXACT, ["a", "b"], ["b", "a"], False),
        (MatchRule.IN_ORDER, ["a", "c"], ["a", "b", "c"], True),
        (MatchRule.IN_ORDER, ["c", "a"], ["a", "b", "c"], False),
        (MatchRule.SUBSET, ["c", "a"], ["a", "b", "c"], True),
        (MatchRule.SUBSET, ["a", "a"], ["a"], False),
        (MatchRule.SUPERSET, ["a", "b", "c"], ["a"], True),
        (MatchRule.SUPERSET, ["a"], ["a", "b"], False),
    ],
)
def test_action_match_rules(
    rule: MatchRule, expected: list[str], actual: list[str], ok: bool
) -> None:
    assert actions_match(expected, actual, rule) is ok


def test_topic_accepts_org_style_prefixed_and_hashed_names() -> None:
    # The org's runtime suffix is a 15- or 18-character Salesforce Id (16j9d687a53f890).
    assert topic_matches("p_16jABC_local_events_16j9d687a53f890", "local_events")
    assert not topic_matches("local_weather", "local_events")
    assert topic_matches("Order", "Order_Management", "contains")


def test_every_example_agent_passes_its_specs() -> None:
    from conftest import ROOT

    # Every example agent is a folder (examples/ also holds scripts such as serve_demo.py).
    examples = sorted(p for p in (ROOT / "examples").iterdir() if p.is_dir())
    assert examples
    for example in examples:
        code, data = run_json(str(example))
        assert code == 0, (example, data)
        assert data["testCases"], example


def test_parallel_jobs_give_the_same_verdicts(order_copy: Path) -> None:
    _break(order_copy)
    _, one = run_json(str(order_copy / "specs"))
    _, two = run_json(str(order_copy / "specs"), "-j", "2")

    def verdicts(data: dict[str, object]) -> list[tuple[str, str, str]]:
        return [
            (case["name"], r["name"], r["result"])
            for case in data["testCases"]  # type: ignore[attr-defined]
            for r in case["testResults"]
        ]

    assert verdicts(one) == verdicts(two)


def test_expected_actions_may_use_definition_or_tool_names(tmp_path: Path) -> None:
    import shutil

    from conftest import ROOT

    folder = tmp_path / "security_gate"
    shutil.copytree(ROOT / "examples" / "security_gate", folder)
    spec = folder / "specs" / "Security_Gate-testSpec.yaml"
    text = spec.read_text(encoding="utf-8")
    spec.write_text(
        text.replace(
            "expectedActions: [go_account, verify, update_account]",
            "expectedActions: [go_account, verify_identity, update_account_info]",
        ),
        encoding="utf-8",
    )
    assert "update_account_info]" in spec.read_text(encoding="utf-8")
    code, data = run_json(str(spec))
    assert code == 0, data
