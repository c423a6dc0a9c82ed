"""Salesforce expectation names (and their older aliases) to :class:`Check` records.

Shared by the YAML (formats A and B), XML and run-eval readers so one name always means the
same check. Custom evaluations get their JSONPath compiled here, so a path that does not parse
is reported when the spec is read, with its line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentscript.testing.errors import SpecError
from agentscript.testing.jsonpath import JsonPathError, compile_path
from agentscript.testing.readers.fields import latency_limit
from agentscript.testing.spec import Check, CheckKind

ALIASES = {
    "topic_assertion": "topic_sequence_match",
    "actions_assertion": "action_sequence_match",
    "output_validation": "bot_response_rating",
}
METRICS = {
    "coherence",
    "completeness",
    "conciseness",
    "instruction_following",
    "factuality",
    "task_resolution",
}
STRING_OPERATORS = {"equals", "contains", "startswith", "endswith"}
NUMERIC_OPERATORS = {
    "equals",
    "greater_than_or_equal",
    "greater_than",
    "less_than",
    "less_than_or_equal",
}
_STANDARD = {
    "topic_sequence_match": CheckKind.TOPIC,
    "action_sequence_match": CheckKind.ACTIONS,
    "agent_handoff_match": CheckKind.HANDOFF,
    "bot_response_rating": CheckKind.OUTCOME,
    "response_match": CheckKind.RESPONSE_MATCH,
    "output_latency_milliseconds": CheckKind.LATENCY,
}
NEEDS_EXPECTED = {
    "topic_sequence_match",
    "action_sequence_match",
    "agent_handoff_match",
    "bot_response_rating",
    "response_match",
}
KNOWN_NAMES = set(_STANDARD) | METRICS | set(ALIASES)


def parse_action_list(value: Any, path: Path, line: int | None) -> list[str]:
    """``['A','B']`` (Salesforce writes a Python-style list string), a YAML list, or ``A``."""
    if isinstance(value, list):
        if not all(isinstance(v, str) for v in value):
            raise SpecError(path, line, "expected actions must be a list of action names")
        return list(value)
    if not isinstance(value, str):
        raise SpecError(path, line, "expected actions must be a list of names or '['A','B']'")
    text = value.strip()
    if not text.startswith("["):
        return [text] if text else []
    try:
        parsed = json.loads(text.replace("'", '"'))
    except (json.JSONDecodeError, RecursionError):
        raise SpecError(
            path, line, f"cannot read the action list {value!r}; write ['A','B']"
        ) from None
    if not isinstance(parsed, list) or not all(isinstance(v, str) for v in parsed):
        raise SpecError(path, line, f"the action list {value!r} must hold names only")
    return parsed


def standard_check(name: str, expected: Any, path: Path, line: int | None) -> Check:
    """One named expectation/scorer (``topic_sequence_match``, ``coherence``, ...)."""
    canonical = ALIASES.get(name, name)
    if canonical in METRICS:
        return Check(CheckKind.METRIC, canonical, expected, line=line)
    kind = _STANDARD.get(canonical)
    if kind is None:
        known = ", ".join(sorted(KNOWN_NAMES))
        raise SpecError(path, line, f"unknown expectation {name!r}; known: {known}")
    if canonical in NEEDS_EXPECTED and (expected is None or expected == ""):
        raise SpecError(path, line, f"{name!r} needs an expected value")
    if kind is CheckKind.ACTIONS:
        expected = parse_action_list(expected, path, line)
    elif expected is not None and not isinstance(expected, str):
        raise SpecError(path, line, f"the expected value of {name!r} must be a text")
    if kind is CheckKind.LATENCY:
        # Checked here, not as "could not convert string to float" in the middle of a run.
        expected = latency_limit(expected, path, line)
    return Check(kind, canonical, expected, line=line)


def custom_check(
    name: str,
    label: str | None,
    parameters: dict[str, tuple[Any, bool]],
    path: Path,
    line: int | None,
) -> Check:
    """A ``string_comparison`` / ``numeric_comparison`` with operator, actual and expected.

    ``parameters`` maps a parameter name to (value, isReference)."""
    if name not in ("string_comparison", "numeric_comparison"):
        raise SpecError(
            path,
            line,
            f"unknown custom evaluation {name!r}; use string_comparison or numeric_comparison",
        )
    missing = [p for p in ("operator", "actual", "expected") if p not in parameters]
    if missing:
        raise SpecError(path, line, f"{name} needs the parameter(s) {missing}")
    extra = sorted(set(parameters) - {"operator", "actual", "expected"})
    if extra:
        raise SpecError(path, line, f"{name}: unknown parameter(s) {extra}")
    operator = str(parameters["operator"][0])
    allowed = STRING_OPERATORS if name == "string_comparison" else NUMERIC_OPERATORS
    if operator not in allowed:
        raise SpecError(path, line, f"{name}: unknown operator {operator!r}; use {sorted(allowed)}")
    _refuse_unmarked_path(name, *parameters["actual"], path, line)
    params: dict[str, Any] = {"operator": operator}
    for role in ("actual", "expected"):
        value, is_reference = parameters[role]
        if is_reference:
            try:
                params[role] = compile_path(str(value))
            except JsonPathError as exc:
                raise SpecError(path, line, str(exc)) from None
        else:
            params[role] = value
    kind = CheckKind.STRING if name == "string_comparison" else CheckKind.NUMERIC
    return Check(kind, name, params.get("expected"), params=params, line=line, label=label)


def _refuse_unmarked_path(
    name: str, value: Any, is_reference: bool, path: Path, line: int | None
) -> None:
    """An ``actual`` written as a JSONPath but not marked ``isReference: true`` would be
    compared as the path's own text, so ``contains`` passes whenever the path names the
    expected value: refused rather than silently passing."""
    if not is_reference and isinstance(value, str) and value.lstrip().startswith(("$.", "$[")):
        raise SpecError(
            path,
            line,
            f"{name}: 'actual' {value!r} is a JSONPath but would be compared as text; "
            "add isReference: true to that parameter",
        )
