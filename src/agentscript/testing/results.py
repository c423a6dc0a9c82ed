"""Results of a run, and their Salesforce-shaped JSON.

A :class:`Verdict` is one expectation's outcome; a :class:`CaseResult` holds what each turn did
(:class:`TurnOutcome`, with the reply's trace) and the verdicts. :func:`generated_data` reads
the trace steps by kind to build Salesforce's ``generatedData`` (``topic``,
``actionsSequence``, ``invokedActions`` as a list of lists of ``{function: {name, input,
output}, executionLatency}``, ``outcome``, ``sessionId``), so JSONPath custom evaluations
written for Salesforce evaluate on it. Reporters read these records and never run anything.

Each invoked action also says what answered it (:class:`HowRan`, ``howRan``, with the trace's
``ranTarget``): the case's own stub or fault, the ``python://`` target ``[actions.targets]``
mapped the agent's to, or the agent's own target. The trace says each of a stub (the
ACTION_STEP's ``stubbed``) and a mapped call (``ranTarget``), and :meth:`Answers.how_ran` reads
it; the case's names (:class:`Answers`) decide only what the trace cannot say: a stub in a
trace older than ``stubbed``, and a fault, which is a function the case gives the action
runner (code, to the trace). The runner answers every call of a stubbed or faulted name from
the case before it looks at any target (``actions/registry.py``), so the name is enough.
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


class HowRan(enum.Enum):
    """What answered one action call."""

    STUB = "stub"  # the case's (or its conversation file's) stub: ``actions:``
    FAULT = "fault"  # the case's ``faults:`` entry
    MAPPED = "mapped"  # the python:// target [actions.targets] ran instead (``ranTarget``)
    RAN = "ran"  # the agent's own target


@dataclass(frozen=True)
class Answers:
    """The action calls a case answers itself, by the name the action runner looks them up
    by: the action's (an ACTION_STEP's ``action``) in Agent Script, the tool's (its ``name``)
    in Mantle (``by_tool``)."""

    stubbed: frozenset[str] = frozenset()
    faulted: frozenset[str] = frozenset()
    by_tool: bool = False

    def name_of(self, step: dict[str, Any]) -> str:
        """The name the action runner was asked by for ACTION_STEP ``step``."""
        return str((step.get("name") if self.by_tool else step.get("action")) or step.get("name"))

    def how_ran(self, step: dict[str, Any]) -> HowRan | None:
        """What answered the call of ACTION_STEP ``step``; None when nothing was run (a
        variable write, a button payload, an action with no target)."""
        name = self.name_of(step)
        # The trace says so itself since session 29 (``stubbed``); older traces by the name.
        if step.get("stubbed", name in self.stubbed):
            return HowRan.STUB
        if name in self.faulted:
            return HowRan.FAULT
        if step.get("ranTarget"):
            return HowRan.MAPPED
        if step.get("target"):
            return HowRan.RAN
        return None


NO_ANSWERS = Answers()


@dataclass(frozen=True)
class ActionRun:
    """One action call of a turn, as the reporters list it."""

    name: str
    how: HowRan
    ran_target: str | None  # the trace's ``ranTarget``: set when ``how`` is MAPPED

    @property
    def label(self) -> str:
        """``how`` as one phrase: ``stub``, ``fault``, ``mapped python://m:f`` or ``ran``."""
        if self.how is HowRan.MAPPED:
            return f"mapped {self.ran_target}"
        return str(self.how.value)


@dataclass
class TurnOutcome:
    utterance: str
    reply: Reply
    latency_ms: float
    # The case's stubs and faults, to say what answered each action call (``howRan``).
    answers: Answers = NO_ANSWERS

    @property
    def steps(self) -> list[dict[str, Any]]:
        """The turn's trace steps, then one ``BRANCH`` pseudo-step per ``if`` decided."""
        steps: list[dict[str, Any]] = self.reply.trace.get("planTrace", {}).get("steps", [])
        branches = [{"type": "BRANCH", **b} for b in self.reply.trace.get("branches", [])]
        return steps + branches if branches else steps


def invoked_actions(
    steps: list[dict[str, Any]], answers: Answers = NO_ANSWERS
) -> list[list[dict[str, Any]]]:
    """One inner list per action that ran (ACTION_STEP), in order. Besides Salesforce's keys,
    ``howRan`` (a :class:`HowRan` value, null when nothing was run) and ``ranTarget``."""
    result = []
    for step in steps:
        if step.get("type") != "ACTION_STEP":
            continue
        how = answers.how_ran(step)
        result.append(
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
                    "howRan": how.value if how is not None else None,
                    "ranTarget": step.get("ranTarget"),
                }
            ]
        )
    return result


def action_runs(turn: TurnOutcome) -> list[ActionRun]:
    """The turn's action calls in order (ACTION_STEPs that ran something: not a variable
    write), each with what answered it."""
    runs = []
    for step in turn.steps:
        if step.get("type") != "ACTION_STEP":
            continue
        how = turn.answers.how_ran(step)
        if how is not None:
            runs.append(ActionRun(turn.answers.name_of(step), how, step.get("ranTarget")))
    return runs


def generated_data(turn: TurnOutcome) -> dict[str, Any]:
    reply = turn.reply
    return {
        "topic": reply.node,
        "actionsSequence": list(reply.actions),
        "invokedActions": invoked_actions(turn.steps, turn.answers),
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
