"""The LLM judge: scores a reply (or a whole transcript) against an expectation.

The judge asks its model for JSON ``{"score": 0..1, "reasoning": "..."}``. A run passes when
``score >= threshold``; with ``runs = k`` the judge asks k times and the verdict passes when at
least half the runs pass; the pass rate is reported. Everything is saved with the verdict:
prompt, model, every score and reasoning, threshold, pass rate. A reply that is not that JSON
is a failed run with the reason, never a crash.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from agentscript.models.base import Message, ModelError, ModelRequest, ModelResponse
from agentscript.testing.results import Verdict
from agentscript.testing.spec import Check, CheckKind

JUDGE_SYSTEM = (
    "You are a strict evaluator of a conversational agent. Read the conversation and the "
    "expectation, then answer with one JSON object and nothing else: "
    '{"score": <number from 0 to 1>, "reasoning": "<one or two sentences>"}. '
    "1 means the expectation is fully met, 0 means not at all."
)
_METRIC_TEXT = {
    "coherence": "The reply is easy to understand and free of grammatical errors.",
    "completeness": "The reply contains all the essential information the user needs.",
    "conciseness": "The reply is brief but comprehensive.",
    "instruction_following": "The reply follows the agent's instructions.",
    "factuality": "The reply states only facts supported by the conversation.",
    "task_resolution": "The user's task is resolved by the end of the conversation.",
}
Ask = Callable[[str, ModelRequest], Awaitable[ModelResponse]]
_JSON = re.compile(r"\{.*\}", re.DOTALL)


@dataclass
class JudgeSettings:
    threshold: float = 0.6
    runs: int = 1
    # Format C's bot_response_rating threshold is on a 1-5 scale; 3.0 there is 0.5 here.
    scale_max: float = 1.0


def expectation_text(check: Check) -> str:
    if check.kind is CheckKind.METRIC:
        return _METRIC_TEXT.get(check.name, check.name)
    if check.kind is CheckKind.CRITERION:
        return str(check.expected)
    return f"The agent's last reply has this meaning: {check.expected}"


def build_prompt(check: Check, transcript: list[dict[str, str]]) -> ModelRequest:
    lines = [f"{m['role']}: {m['text']}" for m in transcript]
    body = "Conversation:\n" + "\n".join(lines) + f"\n\nExpectation: {expectation_text(check)}"
    return ModelRequest(
        system=JUDGE_SYSTEM,
        instructions="",
        messages=[Message("user", body)],
        tools=[],
        node=f"judge:{check.name}",
    )


def parse_score(text: str | None) -> tuple[float | None, str]:
    match = _JSON.search(text or "")
    if not match:
        return None, f"the judge did not answer with JSON: {text!r}"
    try:
        data = json.loads(match.group())
        score = float(data["score"])
    except (json.JSONDecodeError, KeyError, TypeError, ValueError, RecursionError):
        return None, f"the judge's JSON has no numeric 'score': {match.group()!r}"
    return max(0.0, min(1.0, score)), str(data.get("reasoning", ""))


async def judge(
    check: Check,
    transcript: list[dict[str, str]],
    ask: Ask,
    settings: JudgeSettings,
    model_name: str,
    turn: int,
) -> Verdict:
    request = build_prompt(check, transcript)
    threshold = float(check.params.get("threshold", settings.threshold))
    if threshold > 1.0:  # a 1-5 scale threshold (format C): map onto 0..1
        threshold = (threshold - 1.0) / 4.0
    runs: list[dict[str, Any]] = []
    for index in range(settings.runs):
        try:
            response = await ask(f"{check.name}#{check.line or 0}|{index}", request)
            score, reasoning = parse_score(response.text)
        except ModelError as exc:
            score, reasoning = None, f"the judge failed: {exc}"
        runs.append(
            {
                "score": score,
                "reasoning": reasoning,
                "passed": score is not None and score >= threshold,
            }
        )
    passes = sum(1 for r in runs if r["passed"])
    rate = passes / len(runs)
    scores = [r["score"] for r in runs if r["score"] is not None]
    mean = sum(scores) / len(scores) if scores else None
    passed = rate >= 0.5
    record = {
        "model": model_name,
        "prompt": {"system": request.system, "user": request.messages[0].content},
        "threshold": threshold,
        "runs": runs,
        "passRate": rate,
        "score": mean,
        "reasoning": runs[-1]["reasoning"],
    }
    actual = transcript[-1]["text"] if transcript else ""
    return Verdict(
        check.label or check.name,
        check.expected if check.kind is not CheckKind.METRIC else threshold,
        actual if check.kind is not CheckKind.METRIC else mean,
        passed,
        judged=True,
        score=mean,
        explanation=f"pass rate {passes}/{len(runs)}: {runs[-1]['reasoning']}",
        line=check.line,
        turn=turn,
        judge=record,
    )
