"""A judge model that cannot answer (unreachable, refused, timed out, no recorded answer) is no
verdict on the agent: the case could not be evaluated, so it is an ERROR and the run fails,
whether judged verdicts block or not. A judge that answered badly is still a failed judged run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import JUDGED_SPEC, JudgeDouble, run_command, run_json

from agentscript.commands import ExitCode
from agentscript.models.base import ModelError

DOWN = "openai:judge: cannot reach https://judge.example/v1 (connection refused)"


def _run(
    order_copy: Path, double: JudgeDouble, result_format: str, *, blocking: bool = False
) -> tuple[ExitCode, str]:
    spec = order_copy / "judge.yaml"
    spec.write_text(JUDGED_SPEC, encoding="utf-8")
    return run_command(spec, double, result_format, blocking=blocking)


@pytest.mark.parametrize("blocking", [False, True])
def test_unreachable_judge_makes_the_case_an_error(order_copy: Path, blocking: bool) -> None:
    double = JudgeDouble(error=ModelError(DOWN))
    code, out = _run(order_copy, double, "json", blocking=blocking)
    assert code is ExitCode.FAILED
    data = json.loads(out)
    case = data["testCases"][0]
    assert case["status"] == "ERROR"
    assert data["summary"] == {"pass": 0, "failure": 0, "error": 1}
    assert case["errorMessage"] == (
        f"the judge of bot_response_rating (line 9) could not answer: {DOWN}"
    )
    assert not any(r["judged"] for r in case["testResults"])


def test_unreachable_judge_error_is_one_line_in_every_reporter(order_copy: Path) -> None:
    double = JudgeDouble(error=ModelError(DOWN + "\nsecond line of detail"))
    code, human = _run(order_copy, double, "human")
    assert code is ExitCode.FAILED
    assert "ERROR   " in human and "fail (judged)" not in human
    assert f"    error: the judge of bot_response_rating (line 9) could not answer: {DOWN}\n" in (
        human
    )
    assert "second line" not in human
    _, junit = _run(order_copy, double, "junit")
    assert 'errors="1"' in junit and '<error message="the judge of bot_response_rating' in junit
    _, tap = _run(order_copy, double, "tap")
    assert "not ok 1 Test Case #1.run\n" in tap
    assert "could not answer" in tap and "# TODO" not in tap


def test_judge_that_answers_badly_is_still_a_non_blocking_judged_failure(
    order_copy: Path,
) -> None:
    code, out = _run(order_copy, JudgeDouble(answer="looks fine to me"), "json")
    assert code is ExitCode.OK
    case = json.loads(out)["testCases"][0]
    assert case["status"] == "PASS" and "errorMessage" not in case
    verdict = next(r for r in case["testResults"] if r["judged"])
    assert verdict["result"] == "FAILURE"
    assert "did not answer with JSON" in verdict["metricExplainability"]


def test_judged_check_with_no_judge_and_no_recording_is_an_error(order_copy: Path) -> None:
    spec = order_copy / "judge.yaml"
    spec.write_text(JUDGED_SPEC, encoding="utf-8")
    code, data = run_json(str(spec), env={"AGENTSCRIPT_CONFIG": "/nonexistent"})
    assert code == ExitCode.FAILED
    case = data["testCases"][0]
    assert case["status"] == "ERROR"
    assert case["errorMessage"].startswith(
        "the judge of bot_response_rating (line 9) could not answer: no recorded answer for call"
    )
