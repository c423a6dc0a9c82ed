"""Results of a run, and their Salesforce-shaped JSON.

A :class:`Verdict` is one expectation's outcome; a :class:`CaseResult` holds what each turn did
(:class:`TurnOutcome`, with the reply's trace) and the verdicts. :func:`generated_data` reads
the trace steps by kind to build Salesforce's ``generatedData`` (``topic``,
``actionsSequence``, ``invokedActions`` as a list of lists of ``{function: {name, input,
output}, executionLatency}``, ``outcome``, ``sessionId``), so JSONPath custom evaluations
written for Salesforce evaluate on it. Reporters read these records and never run anything.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

from agentscript.engine.session import Reply

RESULT_FORMAT = "agentscript-test-result/1"


class Status(enum.Enum):
    PASS = "PASS"
    FAILURE = "FAILURE"
    ERROR = "ERROR"


@dataclass
class Verdict:
    name: str
    expected: Any
    actual: Any
    passed: bool
    judged: bool = False
    score: float | None = None
    explanation: str = ""
    line: int | None = None
    turn: int = 1
    judge: dict[str, Any] | None = None  # prompt, model, score, threshold, reasoning, runs

    def to_json(self) -> dict[str, Any]:
        result = "PASS" if self.passed else "FAILURE"
        data: dict[str, Any] = {
            "name": self.name,
            "expectedValue": _text(self.expected),
            "actualValue": _text(self.actual),
            "score": self.score if self.score is not None else (1.0 if self.passed else 0.0),
            "result": result,
            "metricScore": "PASS" if self.passed else "FAILED",
            "metricExplainability": self.explanation,
            "status": "COMPLETED",
            "turn": self.turn,
            "judged": self.judged,
        }
        if self.line is not None:
            data["line"] = self.line
        if self.judge is not None:
            data["judge"] = self.judge
        return data


def _text(value: Any) -> Any:
    if isinstance(value, list):
        return "[" + ",".join(f"'{v}'" for v in value) + "]"
    return value


@dataclass
class TurnOutcome:
    utterance: str
    reply: Reply
    latency_ms: float

    @property
    def steps(self) -> list[dict[str, Any]]:
        """The turn's trace steps, then one ``BRANCH`` pseudo-step per ``if`` decided."""
        steps: list[dict[str, Any]] = self.reply.trace.get("planTrace", {}).get("steps", [])
        branches = [{"type": "BRANCH", **b} for b in self.reply.trace.get("branches", [])]
        return steps + branches if branches else steps


def invoked_actions(steps: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """One inner list per action that ran (ACTION_STEP), in order."""
    return [
        [
            {
                "function": {
                    "name": step.get("action") or step.get("name"),
                    "input": step.get("input") or {},
                    "output": step.get("output")
                    if step.get("error") is None
                    else {"error": step.get("error")},
                },
                "executionLatency": step.get("durationMs", 0),
            }
        ]
        for step in steps
        if step.get("type") == "ACTION_STEP"
    ]


def generated_data(turn: TurnOutcome) -> dict[str, Any]:
    reply = turn.reply
    return {
        "topic": reply.node,
        "actionsSequence": list(reply.actions),
        "invokedActions": invoked_actions(turn.steps),
        "outcome": reply.text,
        "sessionId": reply.trace.get("sessionId"),
    }


@dataclass
class CaseResult:
    suite: str
    spec_path: str
    case: str
    number: int
    turns: list[TurnOutcome] = field(default_factory=list)
    verdicts: list[Verdict] = field(default_factory=list)
    error: str | None = None
    duration_ms: float = 0.0
    transcript: list[dict[str, str]] = field(default_factory=list)

    def status(self, *, judged_blocking: bool = False) -> Status:
        if self.error is not None:
            return Status.ERROR
        for verdict in self.verdicts:
            if not verdict.passed and (judged_blocking or not verdict.judged):
                return Status.FAILURE
        return Status.PASS

    def to_json(self, *, judged_blocking: bool = False) -> dict[str, Any]:
        last = generated_data(self.turns[-1]) if self.turns else {}
        data: dict[str, Any] = {
            "testNumber": self.number,
            "name": self.case,
            "spec": self.spec_path,
            "status": self.status(judged_blocking=judged_blocking).value,
            "inputs": {"utterance": self.turns[-1].utterance if self.turns else ""},
            "generatedData": last,
            "testResults": [v.to_json() for v in self.verdicts],
            "durationMs": round(self.duration_ms, 3),
        }
        if len(self.turns) > 1:
            data["turns"] = [
                {"utterance": t.utterance, "generatedData": generated_data(t)} for t in self.turns
            ]
        if self.error is not None:
            data["errorMessage"] = self.error
        return data


@dataclass
class RunResult:
    cases: list[CaseResult] = field(default_factory=list)
    judged_blocking: bool = False
    stale: dict[str, str] = field(default_factory=dict)  # recorded call key -> prompt diff
    refreshed: dict[str, str] = field(default_factory=dict)  # re-recorded by --refresh-stale
    duration_ms: float = 0.0

    def counts(self) -> dict[Status, int]:
        counts = dict.fromkeys(Status, 0)
        for case in self.cases:
            counts[case.status(judged_blocking=self.judged_blocking)] += 1
        return counts

    @property
    def failed(self) -> bool:
        counts = self.counts()
        return bool(counts[Status.FAILURE] or counts[Status.ERROR])

    def to_json(self) -> dict[str, Any]:
        counts = self.counts()
        return {
            "format": RESULT_FORMAT,
            "status": "COMPLETED",
            "durationMs": round(self.duration_ms, 3),
            "summary": {status.value.lower(): n for status, n in counts.items()},
            "staleRecordings": self.stale,
            "refreshedRecordings": self.refreshed,
            "testCases": [c.to_json(judged_blocking=self.judged_blocking) for c in self.cases],
        }
