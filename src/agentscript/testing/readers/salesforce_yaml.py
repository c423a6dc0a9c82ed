"""Salesforce test spec YAML: format A (legacy ``testCases`` with ``utterance`` and
``expected*``) and format B (NGT ``testCases`` with ``inputs`` and ``scorers``).

Both are read unchanged. One optional extension key, ``x-agentscript``, may appear at the top
(``agent``: path of the ``.agent`` file, ``actionMatch``: exact|in_order|subset|superset,
``actions``: stub results as in conversation files) and on a case (``actions``, and ``model``:
scripted moves for the utterance, so a spec can run without a model or recording).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentscript.models.scripted import Move, MoveError, parse_move
from agentscript.testing.errors import SpecError
from agentscript.testing.faults import parse_faults
from agentscript.testing.matchers import topic_matches
from agentscript.testing.readers.checks import (
    KNOWN_NAMES,
    METRICS,
    custom_check,
    standard_check,
)
from agentscript.testing.readers.fields import (
    listing,
    mapping,
    no_unknown,
    optional_mapping,
    stub_results,
    text,
)
from agentscript.testing.spec import (
    Case,
    Check,
    HistoryTurn,
    MatchRule,
    SpecFormat,
    Suite,
    TurnSpec,
)
from agentscript.testing.whitebox import AgentNames, parse_assertions, unknown_name
from agentscript.testing.yamlmarks import line_of

EXTENSION = "x-agentscript"
_TOP = {
    "name",
    "description",
    "subjectType",
    "subjectName",
    "subjectVersion",
    "testCases",
    EXTENSION,
}
_LEGACY_CASE = {
    "utterance",
    "expectedTopic",
    "expectedActions",
    "expectedOutcome",
    "metrics",
    "contextVariables",
    "conversationHistory",
    "customEvaluations",
    EXTENSION,
}
_NGT_CASE = {"inputs", "scorers", EXTENSION}
_NGT_INPUT = {"utterance", "contextVariables", "conversationHistory"}
_TOP_EXTENSION = {"agent", "actionMatch", "actions"}
_CASE_EXTENSION = {"actions", "model", "name", "assert", "faults"}


def is_salesforce_yaml(data: Any) -> bool:
    return isinstance(data, dict) and "testCases" in data


def read_salesforce_yaml(data: dict[str, Any], path: Path) -> Suite:
    no_unknown(data, _TOP, path, "the test spec")
    subject_type = text(data, "subjectType", path)
    if subject_type is not None and subject_type != "AGENT":
        raise SpecError(path, line_of(data, "subjectType"), "subjectType must be AGENT")
    name = text(data, "name", path) or path.stem
    subject = text(data, "subjectName", path)
    top_ext = optional_mapping(data.get(EXTENSION), path, line_of(data, EXTENSION), EXTENSION)
    no_unknown(top_ext, _TOP_EXTENSION, path, EXTENSION)
    raw_cases = listing(data.get("testCases"), path, line_of(data, "testCases"), "testCases")
    if not raw_cases:
        raise SpecError(path, line_of(data, "testCases"), "the spec has no test cases")
    ngt = any(isinstance(c, dict) and ("inputs" in c or "scorers" in c) for c in raw_cases)
    shared_stubs = stub_results(top_ext, path)
    cases: list[Case] = []
    for index, raw in enumerate(raw_cases, start=1):
        at = line_of(raw_cases, index - 1)
        item = mapping(raw, path, at, f"test case #{index}")
        if ngt:
            cases.extend(_ngt_case(item, index, path, shared_stubs))
        else:
            cases.append(_legacy_case(item, index, path, shared_stubs))
    agent = text(top_ext, "agent", path)
    rule = text(top_ext, "actionMatch", path)
    return Suite(
        path=path,
        format=SpecFormat.SALESFORCE_NGT if ngt else SpecFormat.SALESFORCE_LEGACY,
        name=name,
        cases=cases,
        subject_name=subject,
        agent_path=(path.parent / agent).resolve() if agent else None,
        match_rule=match_rule(rule, path, line_of(top_ext, "actionMatch")),
    )


def match_rule(value: str | None, path: Path, line: int | None) -> MatchRule | None:
    if value is None:
        return None
    try:
        return MatchRule(value)
    except ValueError:
        names = ", ".join(r.value for r in MatchRule)
        raise SpecError(path, line, f"unknown action match rule {value!r}; use {names}") from None


def _case_extension(item: dict[str, Any], path: Path) -> tuple[dict[str, Any], list[Move] | None]:
    ext = optional_mapping(item.get(EXTENSION), path, line_of(item, EXTENSION), EXTENSION)
    no_unknown(ext, _CASE_EXTENSION, path, EXTENSION)
    moves: list[Move] | None = None
    if "model" in ext:
        raw_moves = listing(ext["model"], path, line_of(ext, "model"), "model")
        try:
            moves = [
                parse_move(m, f"{path}:{line_of(raw_moves, i)}") for i, m in enumerate(raw_moves)
            ]
        except MoveError as exc:
            raise SpecError(None, None, str(exc)) from None
    return ext, moves


def context_variables(value: Any, path: Path, line: int | None) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for i, raw in enumerate(listing(value, path, line, "contextVariables")):
        at = line_of(value, i)
        entry = mapping(raw, path, at, "a context variable")
        no_unknown(entry, {"name", "value"}, path, "a context variable")
        name = text(entry, "name", path, required=True)
        assert name is not None
        if name in found:
            raise SpecError(path, at, f"context variable {name!r} is given twice")
        found[name] = entry.get("value")
    return found


def history(value: Any, path: Path, line: int | None) -> list[HistoryTurn]:
    turns: list[HistoryTurn] = []
    raw_turns = listing(value, path, line, "conversationHistory")
    indexed = [isinstance(t, dict) and "index" in t for t in raw_turns]
    if any(indexed) and not all(indexed):
        raise SpecError(path, line, "conversationHistory: give 'index' on every turn or none")
    for i, raw in enumerate(raw_turns):
        at = line_of(raw_turns, i)
        entry = mapping(raw, path, at, "a conversationHistory turn")
        no_unknown(entry, {"role", "message", "topic", "index"}, path, "a history turn")
        role = text(entry, "role", path, required=True)
        if role not in ("user", "agent"):
            raise SpecError(path, line_of(entry, "role"), "role must be 'user' or 'agent'")
        if role == "agent" and entry.get("topic") is None:
            raise SpecError(path, at, "an agent turn in conversationHistory needs 'topic'")
        message = text(entry, "message", path, required=True) or ""
        turns.append(HistoryTurn(role or "user", message, text(entry, "topic", path)))
    return turns


def _legacy_case(item: dict[str, Any], index: int, path: Path, stubs: dict[str, Any]) -> Case:
    no_unknown(item, _LEGACY_CASE, path, f"test case #{index}")
    utterance = text(item, "utterance", path, required=True) or ""
    ext, moves = _case_extension(item, path)
    checks: list[Check] = []
    for key, name in (
        ("expectedTopic", "topic_sequence_match"),
        ("expectedActions", "action_sequence_match"),
        ("expectedOutcome", "bot_response_rating"),
    ):
        if key in item:
            value = item[key]
            if key == "expectedActions" and value is None:
                value = []
            checks.append(standard_check(name, value, path, line_of(item, key)))
    for i, raw in enumerate(
        listing(item.get("customEvaluations"), path, line_of(item), "customEvaluations")
    ):
        checks.append(_custom(raw, path, line_of(item.get("customEvaluations"), i)))
    for i, metric in enumerate(listing(item.get("metrics"), path, line_of(item), "metrics")):
        at = line_of(item.get("metrics"), i)
        if not isinstance(metric, str):  # a list or mapping here is unhashable, not a name
            raise SpecError(path, at, f"a metric is a name, e.g. coherence; got {metric!r}")
        if metric not in METRICS and metric != "output_latency_milliseconds":
            raise SpecError(path, at, f"unknown metric {metric!r}")
        checks.append(standard_check(str(metric), None, path, at))
    checks += parse_assertions(ext.get("assert"), path, line_of(ext, "assert"))
    return Case(
        name=str(ext.get("name") or f"Test Case #{index}"),
        faults=parse_faults(ext.get("faults"), path, line_of(ext, "faults")),
        turns=[TurnSpec(utterance, checks, moves=moves, line=line_of(item, "utterance"))],
        line=line_of(item),
        context_variables=context_variables(item.get("contextVariables"), path, line_of(item)),
        history=history(item.get("conversationHistory"), path, line_of(item)),
        stubs={**stubs, **stub_results(ext, path)},
    )


def _custom(raw: Any, path: Path, line: int | None) -> Check:
    entry = mapping(raw, path, line, "a custom evaluation")
    no_unknown(entry, {"label", "name", "parameters"}, path, "a custom evaluation")
    name = text(entry, "name", path, required=True) or ""
    params: dict[str, tuple[Any, bool]] = {}
    raw_params = listing(entry.get("parameters"), path, line, "parameters")
    for i, p in enumerate(raw_params):
        at = line_of(raw_params, i)
        param = mapping(p, path, at, "a parameter")
        no_unknown(param, {"name", "value", "isReference"}, path, "a parameter")
        pname = text(param, "name", path, required=True) or ""
        if pname in params:  # the second would silently replace the first
            raise SpecError(path, at, f"parameter {pname!r} is given twice; keep one")
        reference = param.get("isReference", False)
        if not isinstance(reference, bool):
            raise SpecError(path, line_of(param, "isReference"), "isReference must be true/false")
        params[pname] = (param.get("value"), reference)
    return custom_check(name, text(entry, "label", path), params, path, line_of(entry))


def _ngt_case(item: dict[str, Any], index: int, path: Path, stubs: dict[str, Any]) -> list[Case]:
    no_unknown(item, _NGT_CASE, path, f"test case #{index}")
    ext, moves = _case_extension(item, path)
    inputs = listing(item.get("inputs"), path, line_of(item), "inputs")
    scorers = listing(item.get("scorers"), path, line_of(item), "scorers")
    if not inputs:
        raise SpecError(path, line_of(item), f"test case #{index} needs at least one input")
    if not scorers:
        raise SpecError(path, line_of(item), f"test case #{index} needs at least one scorer")
    checks: list[Check] = []
    for i, raw in enumerate(scorers):
        at = line_of(scorers, i)
        scorer = mapping(raw, path, at, "a scorer")
        no_unknown(scorer, {"name", "expected"}, path, "a scorer")
        name = text(scorer, "name", path, required=True) or ""
        if name not in KNOWN_NAMES:
            raise SpecError(path, at, f"unknown scorer {name!r}; known: {sorted(KNOWN_NAMES)}")
        checks.append(standard_check(name, scorer.get("expected"), path, at))
    checks += parse_assertions(ext.get("assert"), path, line_of(ext, "assert"))
    faults = parse_faults(ext.get("faults"), path, line_of(ext, "faults"))
    cases: list[Case] = []
    for j, raw in enumerate(inputs, start=1):
        at = line_of(inputs, j - 1)
        entry = mapping(raw, path, at, "an input")
        no_unknown(entry, _NGT_INPUT, path, "an input")
        utterance = text(entry, "utterance", path, required=True) or ""
        label = f"Test Case #{index}" if len(inputs) == 1 else f"Test Case #{index}.{j}"
        cases.append(
            Case(
                name=str(ext.get("name") or label),
                turns=[TurnSpec(utterance, list(checks), moves=moves, line=at)],
                line=at,
                context_variables=context_variables(entry.get("contextVariables"), path, at),
                history=history(entry.get("conversationHistory"), path, at),
                stubs={**stubs, **stub_results(ext, path)},
                faults=faults,
            )
        )
    return cases


def bind_history(case: Case, names: AgentNames, path: Path, agent: str) -> None:
    """Each ``conversationHistory`` topic becomes the subagent it names. Org-style names
    (``p_<id>_Name``, ``_<hash>``) are accepted as the topic expectation accepts them; a topic
    that names no subagent is the spec's mistake, refused before the case restores a session
    in a subagent that does not exist."""
    if names.nodes is None:
        return
    for turn in case.history:
        if turn.topic is None:
            continue
        node = next((n for n in sorted(names.nodes) if topic_matches(turn.topic, n)), None)
        if node is None:
            what = f"a subagent of the agent {agent} (conversationHistory topic)"
            raise unknown_name(path, case.line, what, turn.topic, names.nodes)
        turn.topic = node
