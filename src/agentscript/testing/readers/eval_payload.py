"""Format C: the ``sf agent test run-eval`` JSON payload ``{"tests": [{"id", "steps"}]}``.

Each test becomes one case: ``agent.create_session`` gives context variables,
each ``agent.send_message`` a turn, and each evaluator step a check on the turn of the message
it references (``{step_id.field}``, or the latest message when it names none). Evaluators:
``planner_topic_assertion`` (operator ``contains`` by default, as Salesforce translates
``expectedTopic``), ``planner_actions_assertion`` (``includes_items`` = subset),
``bot_response_rating``, ``string_assertion``, ``numeric_assertion``. A reference
``{m1.response}`` reads field ``response`` of the turn's result (see docs/testing.md).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from agentscript.testing.errors import SpecError
from agentscript.testing.jsonpath import JsonPathError, compile_path
from agentscript.testing.readers.checks import (
    NUMERIC_OPERATORS,
    STRING_OPERATORS,
    parse_action_list,
)
from agentscript.testing.spec import Case, Check, CheckKind, MatchRule, SpecFormat, Suite, TurnSpec

_REF = re.compile(r"^\{([A-Za-z0-9_-]+)\.([A-Za-z0-9_.\[\]*]+)\}$")
_EVALUATORS = {
    "evaluator.planner_topic_assertion",
    "evaluator.planner_actions_assertion",
    "evaluator.bot_response_rating",
    "evaluator.string_assertion",
    "evaluator.numeric_assertion",
}


def is_eval_payload(data: Any) -> bool:
    return isinstance(data, dict) and isinstance(data.get("tests"), list)


def _line_finder(text: str) -> Any:
    def find(needle: str) -> int | None:
        at = text.find(needle)
        return text.count("\n", 0, at) + 1 if at >= 0 else None

    return find


class _NotJsonNumber(ValueError):
    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


def _refuse_constant(name: str) -> Any:
    # Python's json reads NaN/Infinity/-Infinity, which JSON does not have: an expected value
    # of NaN never compares equal, and it would be copied into a report that is not JSON.
    raise _NotJsonNumber(name)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e400 overflows to infinity
        raise _NotJsonNumber(text)
    return value


def read_eval_payload(text: str, path: Path) -> Suite:
    try:
        data = json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
    except json.JSONDecodeError as exc:
        raise SpecError(path, exc.lineno, f"invalid JSON: {exc.msg}") from None
    except _NotJsonNumber as exc:
        at = _line_finder(text)(exc.name)
        raise SpecError(path, at, f"invalid JSON: {exc.name} is not a finite JSON number") from None
    except RecursionError:
        raise SpecError(path, 1, "invalid JSON: nested too deeply") from None
    find = _line_finder(text)
    if not is_eval_payload(data):
        raise SpecError(path, 1, 'a run-eval payload is {"tests": [{"id": ..., "steps": [...]}]}')
    unknown = sorted(set(data) - {"tests"})
    if unknown:
        raise SpecError(path, find(f'"{unknown[0]}"'), f"unknown field(s) {unknown}")
    cases: list[Case] = []
    for index, test in enumerate(data["tests"], start=1):
        if not isinstance(test, dict) or not isinstance(test.get("steps"), list):
            raise SpecError(path, None, f"test #{index} needs 'id' and a list of 'steps'")
        test_id = str(test.get("id") or f"test-{index}")
        line = find(f'"{test_id}"')
        variables: dict[str, Any] = {}
        turns: list[TurnSpec] = []
        turn_of: dict[str, TurnSpec] = {}
        for step in test["steps"]:
            if not isinstance(step, dict) or not isinstance(step.get("type"), str):
                raise SpecError(path, line, f"{test_id}: every step needs a 'type'")
            kind = step["type"]
            step_line = find(f'"{step.get("id")}"') if step.get("id") else line
            if kind == "agent.create_session":
                raw = step.get("context_variables") or {}
                if isinstance(raw, list):
                    raw = {str(v.get("name")): v.get("value") for v in raw if isinstance(v, dict)}
                if not isinstance(raw, dict):
                    raise SpecError(path, step_line, "context_variables must be a mapping or list")
                variables.update(raw)
            elif kind == "agent.send_message":
                utterance = step.get("utterance")
                if not isinstance(utterance, str):
                    raise SpecError(path, step_line, "agent.send_message needs an 'utterance'")
                turn = TurnSpec(utterance, line=step_line)
                turns.append(turn)
                turn_of[str(step.get("id") or f"m{len(turns)}")] = turn
            elif kind == "agent.get_state":
                continue
            elif kind in _EVALUATORS:
                turn, check = _evaluator(step, kind, turns, turn_of, path, step_line)
                turn.checks.append(check)
            else:
                raise SpecError(path, step_line, f"unknown step type {kind!r}")
        if not turns:
            raise SpecError(path, line, f"{test_id}: no agent.send_message step")
        cases.append(Case(test_id, turns, line=line, context_variables=variables))
    return Suite(path=path, format=SpecFormat.SALESFORCE_EVAL, name=path.stem, cases=cases)


def _evaluator(
    step: dict[str, Any],
    kind: str,
    turns: list[TurnSpec],
    turn_of: dict[str, TurnSpec],
    path: Path,
    line: int | None,
) -> tuple[TurnSpec, Check]:
    if not turns:
        raise SpecError(path, line, f"{kind} comes before any agent.send_message")
    turn = turns[-1]
    actual = step.get("actual")
    if actual is not None and not isinstance(actual, str):
        # It is a JSONPath or a ``{step.field}`` reference, both texts.
        raise SpecError(path, line, f"{kind}: 'actual' must be a JSONPath or {{step.field}} text")
    field = None
    if isinstance(actual, str):
        match = _REF.match(actual.strip())
        if match:
            if match.group(1) not in turn_of:
                raise SpecError(path, line, f"{actual!r} names no earlier send_message step")
            turn, field = turn_of[match.group(1)], match.group(2)
    name = str(step.get("id") or kind.removeprefix("evaluator."))
    expected = step.get("expected")
    if kind == "evaluator.planner_topic_assertion":
        operator = str(step.get("operator") or "contains")
        return turn, Check(CheckKind.TOPIC, name, expected, {"operator": operator}, line)
    if kind == "evaluator.planner_actions_assertion":
        operator = str(step.get("operator") or "includes_items")
        rule = MatchRule.SUBSET if operator == "includes_items" else MatchRule.EXACT
        actions = parse_action_list(expected, path, line)
        return turn, Check(CheckKind.ACTIONS, name, actions, {"rule": rule}, line)
    if kind == "evaluator.bot_response_rating":
        threshold = step.get("threshold", 3.0)
        # On Salesforce's 1-5 rating scale (a value up to 1 is read as 0..1 by the judge).
        if (
            not isinstance(threshold, int | float)
            or isinstance(threshold, bool)
            or not 0 <= threshold <= 5
        ):
            raise SpecError(path, line, f"{kind}: 'threshold' must be a number from 0 to 5")
        return turn, Check(CheckKind.OUTCOME, name, expected, {"threshold": threshold}, line)
    operator = str(step.get("operator") or "equals")
    allowed = STRING_OPERATORS if kind == "evaluator.string_assertion" else NUMERIC_OPERATORS
    if operator not in allowed:
        raise SpecError(path, line, f"{kind}: unknown operator {operator!r}")
    try:
        where = compile_path("$." + field if field else (actual or "$.outcome"))
    except JsonPathError as exc:
        raise SpecError(path, line, str(exc)) from None
    check_kind = CheckKind.STRING if kind == "evaluator.string_assertion" else CheckKind.NUMERIC
    params = {"operator": operator, "actual": where, "expected": expected}
    return turn, Check(check_kind, name, expected, params, line)
