"""What a test spec says, whatever file format it came from.

Readers build these records; the runner and matchers only ever see them. A :class:`Suite` is
one spec file; its :class:`Case` items each run in a fresh session; a case has
:class:`TurnSpec` items (one user message each, possibly with scripted model moves) and each
turn carries :class:`Check` items. Every record keeps the line it came from, so a failure
can point at the spec.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentscript.expectations import Expectations
from agentscript.models.scripted import Move


class SpecFormat(enum.Enum):
    SALESFORCE_LEGACY = "salesforce-legacy"  # format A: testCases with utterance/expected*
    SALESFORCE_NGT = "salesforce-ngt"  # format B: testCases with inputs/scorers
    SALESFORCE_EVAL = "salesforce-eval"  # format C: run-eval JSON payload
    EVALUATION_XML = "aiEvaluationDefinition"
    TESTING_XML = "aiTestingDefinition"
    MANTLE_SCENARIO = "mantle-scenario"
    CONVERSATION = "conversation"


class CheckKind(enum.Enum):
    """One kind of expectation; ``judged`` kinds need the LLM judge."""

    TOPIC = "topic_sequence_match"
    ACTIONS = "action_sequence_match"
    HANDOFF = "agent_handoff_match"
    OUTCOME = "bot_response_rating"
    RESPONSE_MATCH = "response_match"
    METRIC = "metric"  # coherence, completeness, conciseness, ... (judged) or latency
    LATENCY = "output_latency_milliseconds"
    STRING = "string_comparison"
    NUMERIC = "numeric_comparison"
    JSON = "json_assertion"
    CRITERION = "criterion"  # a Mantle goal criterion (judged)
    EXPECT = "expect"  # a conversation file's `expect:` block
    MANTLE = "mantle_assertion"  # a Mantle goal assertion (skill_completed, ...)
    WHITEBOX = "whitebox"  # what the model was shown (instructions, tools, variables, calls)

    @property
    def judged(self) -> bool:
        return self in _JUDGED


_JUDGED = {CheckKind.OUTCOME, CheckKind.RESPONSE_MATCH, CheckKind.METRIC, CheckKind.CRITERION}


class MatchRule(enum.Enum):
    """How an expected action list is compared with the actions that ran (docs/testing.md)."""

    EXACT = "exact"  # the same actions, in the same order
    IN_ORDER = "in_order"  # the expected ones appear in this order, others may interleave
    SUBSET = "subset"  # every expected action ran, any order, others allowed
    SUPERSET = "superset"  # every action that ran was expected (some may not run)


@dataclass
class Check:
    kind: CheckKind
    name: str  # the expectation's name as the spec says it (shown in reports)
    expected: Any = None
    params: dict[str, Any] = field(default_factory=dict)
    line: int | None = None
    label: str | None = None


@dataclass
class HistoryTurn:
    role: str  # "user" or "agent"
    message: str
    topic: str | None = None


@dataclass
class TurnSpec:
    utterance: str
    checks: list[Check] = field(default_factory=list)
    moves: list[Move] | None = None  # scripted model moves (conversation files)
    expect: Expectations | None = None
    line: int | None = None


@dataclass
class Simulation:
    """A Mantle scenario's simulated user: a model plays ``context`` for up to ``max_turns``."""

    context: str
    max_turns: int = 6


@dataclass
class Case:
    name: str
    turns: list[TurnSpec]
    line: int | None = None
    context_variables: dict[str, Any] = field(default_factory=dict)
    history: list[HistoryTurn] = field(default_factory=list)
    stubs: dict[str, Any] = field(default_factory=dict)
    faults: dict[str, dict[str, Any]] = field(default_factory=dict)  # see faults.py
    simulation: Simulation | None = None
    # Checks over the whole case (Mantle goals, judged after the last turn).
    final_checks: list[Check] = field(default_factory=list)

    @property
    def all_checks(self) -> list[Check]:
        """Every check of the case: each turn's, then the final ones."""
        return [c for turn in self.turns for c in turn.checks] + self.final_checks


@dataclass
class Suite:
    path: Path
    format: SpecFormat
    name: str
    cases: list[Case]
    subject_name: str | None = None  # Salesforce subjectName (agent developer_name)
    agent_path: Path | None = None  # set when the format names the agent's file
    match_rule: MatchRule | None = None  # per spec: `x-agentscript-action-match`
    extra: dict[str, Any] = field(default_factory=dict)
