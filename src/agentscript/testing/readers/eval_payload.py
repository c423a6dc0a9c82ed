"""Format C: the ``sf agent test run-eval`` JSON payload ``{"tests": [{"id", "steps"}]}``.

Each test becomes one case: ``agent.create_session`` gives context variables,
each ``agent.send_message`` a turn, and each evaluator step a check on the turn of the step
its ``actual`` references (``{step_id.field}``), else of the latest message. Evaluators:
``planner_topic_assertion`` (operator ``contains`` by default, as Salesforce translates
``expectedTopic``, or ``equals``), ``planner_actions_assertion`` (``includes_items`` = subset,
``equals``/``exact`` = exact), ``bot_response_rating`` (``threshold`` a 1-5 rating),
``string_assertion``, ``numeric_assertion``.

References read the turn's ``generatedData`` (``{m1.outcome}``, ``{m1.topic}``, ...), and also
what Salesforce's own tools write (forcedotcom/agents ``yamlSpecTranslator``):
``{sm.response}`` is the reply text (``outcome``), and ``{gs.response.planner_response.
lastExecution.topic}`` / ``.invokedActions`` read the turn before an ``agent.get_state`` step
``gs``. Salesforce's normalizer silently drops fields it does not know; here an unknown field,
step type or operator is a spec error naming the JSON pointer, so a typo (``operatr``) is never
a check that silently does something else. So is what plain ``json.loads`` lets through
(:mod:`~agentscript.testing.readers.strict_json`): a key given twice, an integer longer than
Python reads, NaN or Infinity, a lone surrogate. An empty ``tests`` list, and a
``bot_response_rating`` without a text ``expected``, are refused as formats A and B refuse
theirs. One key of ours, ``x-agentscript``, may appear at the top (``agent``, ``actionMatch``,
``actions``) and on a test (``actions``): stub results, as in format A. A JSON file whose top
level has no ``tests`` is not a spec at all (:class:`NotASpec`), whatever else it holds.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agentscript.testing.errors import NotASpec, SpecError
from agentscript.testing.jsonpath import JsonPathError, compile_path
from agentscript.testing.judge import RATING_SCALE, rating_threshold
from agentscript.testing.readers.checks import (
    NUMERIC_OPERATORS,
    STRING_OPERATORS,
    parse_action_list,
)
from agentscript.testing.readers.fields import stub_results
from agentscript.testing.readers.salesforce_yaml import EXTENSION, match_rule
from agentscript.testing.readers.strict_json import JsonProblem, load_json
from agentscript.testing.spec import Case, Check, CheckKind, MatchRule, SpecFormat, Suite, TurnSpec

_REF = re.compile(r"^\{([A-Za-z0-9_-]+)\.([A-Za-z0-9_.\[\]*]+)\}$")
_ASSERTION_FIELDS = {"type", "id", "actual", "expected", "operator"}
# Per step type, the fields Salesforce's normalizer keeps (forcedotcom/agents evalNormalizer);
# bot_response_rating also carries the `utterance` its translator writes, and string/numeric
# assertions the `metric_name` its normalizer injects.
_FIELDS: dict[str, set[str]] = {
    "agent.create_session": {
        "type",
        "id",
        "agent_id",
        "agent_version_id",
        "use_agent_api",
        "planner_id",
        "state",
        "setupSessionContext",
        "context_variables",
    },
    "agent.send_message": {"type", "id", "session_id", "utterance"},
    "agent.get_state": {"type", "id", "session_id"},
    "evaluator.planner_topic_assertion": _ASSERTION_FIELDS,
    "evaluator.planner_actions_assertion": _ASSERTION_FIELDS,
    "evaluator.bot_response_rating": {"type", "id", "actual", "expected", "threshold", "utterance"},
    "evaluator.string_assertion": _ASSERTION_FIELDS | {"metric_name"},
    "evaluator.numeric_assertion": _ASSERTION_FIELDS | {"metric_name"},
}
_TOP = {"tests", EXTENSION}
_TEST = {"id", "steps", EXTENSION}
_TOP_EXTENSION = {"agent", "actionMatch", "actions"}
_TEST_EXTENSION = {"actions"}
_TOPIC_OPERATORS = {"contains", "equals"}
_ACTION_OPERATORS = {
    "includes_items": MatchRule.SUBSET,
    "equals": MatchRule.EXACT,
    "exact": MatchRule.EXACT,
}
# What a get_state step's `response.planner_response.lastExecution.<field>` reads in the
# turn's generatedData (the translator maps $.generatedData.invokedActions and
# .actionsSequence both to lastExecution.invokedActions; the state's own shape is not public).
_STATE_PREFIX = "response.planner_response.lastExecution."
_STATE_FIELDS = {"topic": "topic", "invokedActions": "invokedActions"}
Finder = Callable[[str], int | None]
_NOT_A_PAYLOAD = 'not a run-eval payload {"tests": [{"id": ..., "steps": [...]}]}'


def is_eval_payload(data: Any) -> bool:
    return isinstance(data, dict) and isinstance(data.get("tests"), list)


def _line_finder(text: str) -> Finder:
    def find(needle: str) -> int | None:
        at = text.find(needle)
        return text.count("\n", 0, at) + 1 if at >= 0 else None

    return find


def _load(text: str, path: Path) -> Any:
    try:
        # Duplicate keys, NaN, over-long integers and lone surrogates are refused, as the
        # YAML readers refuse theirs: a second "expected" never silently replaces the first.
        return load_json(text, finite=True, unicode=True)
    except JsonProblem as exc:
        if _other_json(text):
            raise NotASpec(path, 1, _NOT_A_PAYLOAD) from None
        raise SpecError(path, exc.line, exc.message) from None


def _other_json(text: str) -> bool:
    """Whether ``text`` is JSON to Python's lenient reader (the last of two keys kept, any
    integer, NaN, lone surrogates) but no payload: other JSON beside the specs (a fixture, a
    report) is skipped, whatever it holds."""
    try:
        data = json.loads(text, parse_int=len)  # the value of an integer does not matter here
    except (ValueError, RecursionError):
        return False
    return not (isinstance(data, dict) and "tests" in data)


def read_eval_payload(text: str, path: Path) -> Suite:
    data = _load(text, path)
    find = _line_finder(text)
    if not isinstance(data, dict) or "tests" not in data:
        # Fixtures, coverage reports and other JSON found beside the specs are skipped.
        raise NotASpec(path, 1, _NOT_A_PAYLOAD)
    if not isinstance(data["tests"], list):
        raise SpecError(path, find('"tests"'), "/tests must be a list of tests")
    if not data["tests"]:
        # As formats A and B: a spec that runs nothing would pass, and say nothing was tested.
        raise SpecError(path, find('"tests"'), "/tests: the spec has no test cases")
    _no_unknown(data, _TOP, "", path, find)
    ext = _extension(data, _TOP_EXTENSION, "", path, find)
    shared = stub_results(ext, path)
    cases = [
        _TestReader(path, find, f"/tests/{index}").read(test, index, shared)
        for index, test in enumerate(data["tests"])
    ]
    agent = ext.get("agent")
    if agent is not None and not isinstance(agent, str):
        raise SpecError(path, find('"agent"'), f"/{EXTENSION}/agent must be a path")
    rule = ext.get("actionMatch")
    return Suite(
        path=path,
        format=SpecFormat.SALESFORCE_EVAL,
        name=path.stem,
        cases=cases,
        agent_path=(path.parent / agent).resolve() if agent else None,
        match_rule=match_rule(None if rule is None else str(rule), path, find('"actionMatch"')),
    )


def _no_unknown(
    data: dict[str, Any],
    allowed: set[str],
    pointer: str,
    path: Path,
    find: Finder,
    of: str = "",
) -> None:
    """Refuse the first key of ``data`` outside ``allowed``, at the line ``find`` gives for it;
    ``of`` names what ``data`` is when its pointer does not (a step's type)."""
    owner = f" of {of}" if of else ""
    for key in data:
        if key not in allowed:
            raise SpecError(
                path,
                find(f'"{key}"'),
                f"{pointer}/{key}: unknown field {key!r}{owner}; "
                f"allowed: {', '.join(sorted(allowed))}",
            )


def _extension(
    data: dict[str, Any], allowed: set[str], pointer: str, path: Path, find: Finder
) -> dict[str, Any]:
    ext = data.get(EXTENSION)
    if ext is None:
        return {}
    if not isinstance(ext, dict):
        raise SpecError(path, find(f'"{EXTENSION}"'), f"{pointer}/{EXTENSION} must be an object")
    _no_unknown(ext, allowed, f"{pointer}/{EXTENSION}", path, find)
    return ext


class _TestReader:
    """One test's steps, in order: its turns, and the turn each step id refers to."""

    def __init__(self, path: Path, find: Finder, pointer: str) -> None:
        self.path = path
        self.find = find
        self.pointer = pointer
        self.turns: list[TurnSpec] = []
        self.message_turn: dict[str, TurnSpec] = {}  # send_message id -> its turn
        self.state_turn: dict[str, TurnSpec] = {}  # get_state id -> the turn it reads
        self.variables: dict[str, Any] = {}

    def fail(self, line: int | None, where: str, message: str) -> SpecError:
        return SpecError(self.path, line, f"{self.pointer}{where}: {message}")

    def read(self, test: Any, index: int, shared: dict[str, Any]) -> Case:
        if not isinstance(test, dict) or not isinstance(test.get("steps"), list):
            raise self.fail(None, "", "a test needs 'id' and a list of 'steps'")
        _no_unknown(test, _TEST, self.pointer, self.path, self.find)
        ext = _extension(test, _TEST_EXTENSION, self.pointer, self.path, self.find)
        test_id = str(test.get("id") or f"test-{index + 1}")
        line = self.find(f'"{test_id}"')
        for number, step in enumerate(test["steps"]):
            self._step(step, f"/steps/{number}", line)
        if not self.turns:
            raise self.fail(line, "", f"{test_id}: no agent.send_message step")
        return Case(
            test_id,
            self.turns,
            line=line,
            context_variables=self.variables,
            stubs={**shared, **stub_results(ext, self.path)},
        )

    def _step(self, step: Any, where: str, test_line: int | None) -> None:
        if not isinstance(step, dict) or not isinstance(step.get("type"), str):
            raise self.fail(test_line, where, "every step needs a 'type'")
        kind = step["type"]
        line = self.find(f'"{step["id"]}"') if isinstance(step.get("id"), str) else test_line
        if kind not in _FIELDS:
            raise self.fail(
                line, f"{where}/type", f"unknown step type {kind!r}; known: {sorted(_FIELDS)}"
            )
        # At the step's line: a key such as "operator" first appears in some other step.
        _no_unknown(step, _FIELDS[kind], self.pointer + where, self.path, lambda _: line, kind)
        _STEPS[kind](self, step, where, line)

    def _create_session(self, step: dict[str, Any], where: str, line: int | None) -> None:
        raw = step.get("context_variables") or {}
        if isinstance(raw, list):
            raw = self._variable_list(raw, f"{where}/context_variables", line)
        if not isinstance(raw, dict):
            raise self.fail(line, f"{where}/context_variables", "must be an object or a list")
        self.variables.update(raw)

    def _variable_list(self, raw: list[Any], where: str, line: int | None) -> dict[str, Any]:
        """``[{"name", "value"}]``: each entry named, no name twice (as formats A and B)."""
        found: dict[str, Any] = {}
        for index, entry in enumerate(raw):
            if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                raise self.fail(line, f"{where}/{index}", 'must be {"name": ..., "value": ...}')
            name = entry["name"]
            if name in found:
                raise self.fail(
                    line, f"{where}/{index}", f"context variable {name!r} is given twice"
                )
            found[name] = entry.get("value")
        return found

    def _send_message(self, step: dict[str, Any], where: str, line: int | None) -> None:
        utterance = step.get("utterance")
        if not isinstance(utterance, str):
            raise self.fail(line, f"{where}/utterance", "agent.send_message needs an 'utterance'")
        turn = TurnSpec(utterance, line=line)
        self.turns.append(turn)
        self.message_turn[str(step.get("id") or f"m{len(self.turns)}")] = turn

    def _get_state(self, step: dict[str, Any], where: str, line: int | None) -> None:
        if not self.turns:
            raise self.fail(line, where, "agent.get_state comes before any agent.send_message")
        if isinstance(step.get("id"), str):
            self.state_turn[step["id"]] = self.turns[-1]

    def _evaluator(self, step: dict[str, Any], where: str, line: int | None) -> None:
        kind = step["type"]
        if not self.turns:
            raise self.fail(line, where, f"{kind} comes before any agent.send_message")
        turn, field = self._reference(step.get("actual"), f"{where}/actual", line)
        name = str(step.get("id") or kind.removeprefix("evaluator."))
        check = _EVALUATORS[kind](self, step, name, field, where, line)
        turn.checks.append(check)

    def _reference(self, actual: Any, where: str, line: int | None) -> tuple[TurnSpec, str | None]:
        """The turn ``actual`` refers to and the generatedData field it reads (None: none
        named, or ``actual`` is a JSONPath)."""
        if actual is None:
            return self.turns[-1], None
        if not isinstance(actual, str):
            raise self.fail(line, where, "'actual' must be a JSONPath or a {step_id.field} text")
        match = _REF.match(actual.strip())
        if not match:
            return self.turns[-1], None
        step_id, field = match.groups()
        if step_id in self.message_turn:
            return self.message_turn[step_id], _message_field(field)
        if step_id in self.state_turn:
            return self.state_turn[step_id], self._state_field(field, where, line)
        raise self.fail(line, where, f"{actual!r} names no earlier send_message or get_state step")

    def _state_field(self, field: str, where: str, line: int | None) -> str:
        rest = field.removeprefix(_STATE_PREFIX)
        head, dot, tail = rest.partition(".")
        if not field.startswith(_STATE_PREFIX) or head not in _STATE_FIELDS:
            known = " or ".join(_STATE_PREFIX + name for name in _STATE_FIELDS)
            raise self.fail(line, where, f"a get_state reference reads {known}; got {field!r}")
        return _STATE_FIELDS[head] + dot + tail

    def _operator(self, step: dict[str, Any], default: str, allowed: Any, where: str) -> str:
        # Salesforce's normalizer lowercases operators; so does this reader.
        operator = str(step.get("operator") or default).lower()
        if operator not in allowed:
            line = self.find(f'"{step["operator"]}"')
            raise self.fail(
                line, f"{where}/operator", f"unknown operator {operator!r}; use {sorted(allowed)}"
            )
        return operator

    def _topic(
        self, step: dict[str, Any], name: str, field: str | None, where: str, line: int | None
    ) -> Check:
        operator = self._operator(step, "contains", _TOPIC_OPERATORS, where)
        expected = step.get("expected")
        if not isinstance(expected, str) or not expected:
            raise self.fail(line, f"{where}/expected", "the expected topic must be a name")
        return Check(CheckKind.TOPIC, name, expected, {"operator": operator}, line)

    def _actions(
        self, step: dict[str, Any], name: str, field: str | None, where: str, line: int | None
    ) -> Check:
        operator = self._operator(step, "includes_items", _ACTION_OPERATORS, where)
        actions = parse_action_list(step.get("expected"), self.path, line)
        rule = _ACTION_OPERATORS[operator]
        return Check(CheckKind.ACTIONS, name, actions, {"rule": rule}, line)

    def _rating(
        self, step: dict[str, Any], name: str, field: str | None, where: str, line: int | None
    ) -> Check:
        low, high = RATING_SCALE
        rating = step.get("threshold", 3.0)
        if (
            not isinstance(rating, int | float)
            or isinstance(rating, bool)
            or not low <= rating <= high
        ):
            raise self.fail(
                line, f"{where}/threshold", f"'threshold' must be a rating from {low:g} to {high:g}"
            )
        threshold = rating_threshold(float(rating))
        # As formats A and B (expectedOutcome, a bot_response_rating scorer): the meaning the
        # reply must have is a text; without one the judge would be asked about "None".
        expected = step.get("expected")
        if not isinstance(expected, str) or not expected:
            raise self.fail(
                line,
                f"{where}/expected",
                "evaluator.bot_response_rating needs 'expected': the meaning the reply must "
                "have, as a text",
            )
        return Check(CheckKind.OUTCOME, name, expected, {"threshold": threshold}, line)

    def _assertion(
        self, step: dict[str, Any], name: str, field: str | None, where: str, line: int | None
    ) -> Check:
        string = step["type"] == "evaluator.string_assertion"
        operator = self._operator(
            step, "equals", STRING_OPERATORS if string else NUMERIC_OPERATORS, where
        )
        if "expected" not in step:
            raise self.fail(line, where, f"{step['type']} needs 'expected'")
        actual = step.get("actual")
        try:
            where_actual = compile_path("$." + field if field else (actual or "$.outcome"))
        except JsonPathError as exc:
            raise self.fail(line, f"{where}/actual", str(exc)) from None
        kind = CheckKind.STRING if string else CheckKind.NUMERIC
        expected = step["expected"]
        params = {"operator": operator, "actual": where_actual, "expected": expected}
        return Check(kind, name, expected, params, line)


def _message_field(field: str) -> str:
    # Salesforce's tools write {sm.response} for the reply text (and older payloads
    # {sm.response.messages...}, which its normalizer reads as the response too).
    if field == "response" or field.startswith("response.messages"):
        return "outcome"
    return field


_StepReader = Callable[[_TestReader, dict[str, Any], str, int | None], None]
_CheckBuilder = Callable[[_TestReader, dict[str, Any], str, str | None, str, int | None], Check]
_STEPS: dict[str, _StepReader] = {
    "agent.create_session": _TestReader._create_session,
    "agent.send_message": _TestReader._send_message,
    "agent.get_state": _TestReader._get_state,
    **{kind: _TestReader._evaluator for kind in _FIELDS if kind.startswith("evaluator.")},
}
_EVALUATORS: dict[str, _CheckBuilder] = {
    "evaluator.planner_topic_assertion": _TestReader._topic,
    "evaluator.planner_actions_assertion": _TestReader._actions,
    "evaluator.bot_response_rating": _TestReader._rating,
    "evaluator.string_assertion": _TestReader._assertion,
    "evaluator.numeric_assertion": _TestReader._assertion,
}
