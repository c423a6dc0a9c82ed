"""A hostile or broken judge: a score that is not a finite number from 0 to 1 is a failed judge
run (never a pass), a huge answer is parsed in bounded time, and the stored reasoning is cut."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import JUDGED_SPEC, run_json
from helpers import LIVE_ENV as ENV

from agentscript.testing.judge import MAX_REASONING_CHARS, parse_score
from fakes.llm_servers import OpenAIServer, Reply


def _judged(order_copy: Path, answer: str) -> tuple[int, dict[str, object]]:
    spec = order_copy / "judge.yaml"
    spec.write_text(JUDGED_SPEC, encoding="utf-8")
    with OpenAIServer([Reply(text=answer)]) as server:
        code, data = run_json(
            str(spec),
            "--judge",
            "openai:j",
            "--base-url",
            server.base_url,
            "--judge-blocking",
            env=ENV,
        )
    cases = data["testCases"]
    assert isinstance(cases, list)
    verdict: dict[str, object] = next(r for r in cases[0]["testResults"] if r["judged"])
    return code, verdict


@pytest.mark.parametrize(
    "answer",
    [
        '{"score": NaN, "reasoning": "x"}',
        '{"score": "NaN", "reasoning": "x"}',
        '{"score": true, "reasoning": "x"}',
        '{"score": 7, "reasoning": "x"}',
        '{"score": 1e400, "reasoning": "x"}',
        '{"score": -0.5, "reasoning": "x"}',
        '{"score": Infinity}',
        '{"score": null}',
    ],
)
def test_judge_score_outside_0_to_1_fails_the_run_with_the_reason(
    order_copy: Path, answer: str
) -> None:
    code, verdict = _judged(order_copy, answer)
    assert code == 1
    assert verdict["result"] == "FAILURE"
    judge = verdict["judge"]
    assert isinstance(judge, dict)
    assert judge["runs"][0]["score"] is None and judge["runs"][0]["passed"] is False
    assert "not a number from 0 to 1" in judge["runs"][0]["reasoning"]


def test_judge_score_in_range_still_passes(order_copy: Path) -> None:
    code, verdict = _judged(order_copy, 'Sure. {"score": 0.9, "reasoning": "date given"}')
    assert code == 0 and verdict["result"] == "PASS"


@pytest.mark.parametrize(
    ("answer", "score"),
    [
        ('{"score": 0}', 0.0),
        ('{"score": 1}', 1.0),
        ('{"score": "0.75"}', 0.75),
        ('note {not json} then {"score": 0.4, "reasoning": "r"}', 0.4),
        # An inner object belongs to the outer answer: it is not taken as the judge's score.
        ('{"details": {"score": 1}} {"score": 0.2}', 0.2),
    ],
)
def test_parse_score_reads_a_score_from_0_to_1(answer: str, score: float) -> None:
    assert parse_score(answer)[0] == score


def test_parse_score_refuses_bools_and_out_of_range_numbers() -> None:
    for raw in ("true", "false", "1.0000001", "-0.1", "NaN", "-Infinity", "1e400", '"x"', "[1]"):
        assert parse_score(f'{{"score": {raw}}}')[0] is None, raw


def test_huge_brace_answer_is_parsed_and_rejected_in_bounded_time() -> None:
    # 400,000 '{' took ~30 s with the old quadratic regex; the bound here is only termination.
    score, why = parse_score("{" * 400_000)
    assert score is None and "did not answer with JSON" in why
    assert len(why) < 1_000


def test_judge_reasoning_is_truncated_in_the_report() -> None:
    score, why = parse_score(json.dumps({"score": 0.9, "reasoning": "r" * 15_000}))
    assert score == 0.9
    assert len(why) <= MAX_REASONING_CHARS + 20 and why.endswith("[truncated]")


def test_score_after_a_long_preamble_is_not_searched_past_the_cap() -> None:
    # Only the head of the answer is examined: a score buried after megabytes of text is
    # a failed run, not a search through everything.
    score, why = parse_score("x" * 2_000_000 + '{"score": 1}')
    assert score is None and len(why) < 1_000
