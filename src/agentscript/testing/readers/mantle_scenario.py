"""Mantle evaluation scenarios (``eval/scenarios/*.yml``).

```yaml
scenario:                      # the wrapper is optional
  name: Replace a damaged card
  simulation_context: You are a customer whose card is damaged ...
  max_turns: 6                 # ours: bound on simulated user turns (default 6)
  setup:
    memory: {project.authenticated: true}   # or initial_slots:
  goals:
    criteria: [The agent confirms the replacement order.]
    assertions:
      - skill_completed: {skill_id: card_replace}
      - tool_executed: {tool_name: order_replacement}
      - memory_was_set: {name: card_replace.reason, value: damaged}
      - bot_uttered: {text_matches: "replacement"}
  x-agentscript: {actions: {...}}   # stub results, as in conversation files
```

Assertion kinds: ``skill_activated``, ``skill_completed``, ``skill_cancelled``,
``skill_interrupted``, ``skill_resumed`` (``skill_id``, optional ``step_id``),
``tool_executed`` (``tool_name``), ``tool_not_executed``, ``memory_was_set`` (``name``,
optional ``value``), ``bot_uttered`` (``text_matches``: a regular expression, searched in
each message the agent said, as Rasa reads it). A check passes when at
least one recorded event matches (``tool_not_executed``: when none does).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from agentscript.testing.errors import SpecError
from agentscript.testing.readers.fields import (
    listing,
    mapping,
    no_unknown,
    optional_mapping,
    stub_results,
    text,
)
from agentscript.testing.spec import Case, Check, CheckKind, Simulation, SpecFormat, Suite
from agentscript.testing.whitebox import AgentNames
from agentscript.testing.yamlmarks import line_of

_KEYS = {
    "name",
    "type",
    "description",
    "simulation_context",
    "setup",
    "goals",
    "max_turns",
    "x-agentscript",
}
ASSERTIONS: dict[str, set[str]] = {
    "skill_activated": {"skill_id", "step_id"},
    "skill_completed": {"skill_id", "step_id"},
    "skill_cancelled": {"skill_id", "step_id"},
    "skill_interrupted": {"skill_id", "step_id"},
    "skill_resumed": {"skill_id", "step_id"},
    "tool_executed": {"tool_name"},
    "tool_not_executed": {"tool_name"},
    "memory_was_set": {"name", "value"},
    "bot_uttered": {"text_matches"},
}
_REQUIRED = {"skill_id", "tool_name", "name", "text_matches"}


def is_mantle_scenario(data: Any) -> bool:
    body = data.get("scenario") if isinstance(data, dict) else None
    return isinstance(body, dict) or (isinstance(data, dict) and "simulation_context" in data)


def read_mantle_scenario(data: dict[str, Any], path: Path) -> Suite:
    body = data["scenario"] if isinstance(data.get("scenario"), dict) else data
    if body is not data:
        no_unknown(data, {"scenario"}, path, "the scenario file")
    no_unknown(body, _KEYS, path, "the scenario")
    context = text(body, "simulation_context", path, required=True) or ""
    max_turns = body.get("max_turns", 6)
    if not isinstance(max_turns, int) or isinstance(max_turns, bool) or not 1 <= max_turns <= 50:
        raise SpecError(path, line_of(body, "max_turns"), "max_turns must be a number 1..50")
    setup = optional_mapping(body.get("setup"), path, line_of(body, "setup"), "setup")
    no_unknown(setup, {"memory", "initial_slots"}, path, "setup")
    memory = {
        **optional_mapping(
            setup.get("initial_slots"), path, line_of(setup, "initial_slots"), "initial_slots"
        ),
        **optional_mapping(setup.get("memory"), path, line_of(setup, "memory"), "memory"),
    }
    goals = optional_mapping(body.get("goals"), path, line_of(body, "goals"), "goals")
    no_unknown(goals, {"criteria", "assertions"}, path, "goals")
    checks: list[Check] = []
    criteria = listing(goals.get("criteria"), path, line_of(goals, "criteria"), "criteria")
    for i, criterion in enumerate(criteria):
        if not isinstance(criterion, str):
            raise SpecError(path, line_of(criteria, i), "a criterion is one sentence of text")
        checks.append(Check(CheckKind.CRITERION, "criterion", criterion, line=line_of(criteria, i)))
    assertions = listing(goals.get("assertions"), path, line_of(goals, "assertions"), "assertions")
    for i, raw in enumerate(assertions):
        at = line_of(assertions, i)
        entry = mapping(raw, path, at, "an assertion")
        if len(entry) != 1:
            raise SpecError(path, at, "an assertion is one kind: {skill_completed: {...}}")
        kind, params = next(iter(entry.items()))
        if kind not in ASSERTIONS:
            raise SpecError(path, at, f"unknown assertion {kind!r}; known: {sorted(ASSERTIONS)}")
        params = mapping(params, path, at, kind)
        no_unknown(params, ASSERTIONS[kind], path, kind)
        missing = sorted((ASSERTIONS[kind] & _REQUIRED) - set(params))
        if missing:
            raise SpecError(path, at, f"{kind} needs {missing}")
        if kind == "bot_uttered":
            _pattern(params["text_matches"], path, at)
        checks.append(Check(CheckKind.MANTLE, kind, dict(params), params=dict(params), line=at))
    ext = optional_mapping(
        body.get("x-agentscript"), path, line_of(body, "x-agentscript"), "x-agentscript"
    )
    no_unknown(ext, {"actions"}, path, "x-agentscript")
    name = text(body, "name", path) or path.stem
    case = Case(
        name=name,
        turns=[],
        line=line_of(body),
        context_variables=dict(memory),
        stubs=stub_results(ext, path),
        simulation=Simulation(context, max_turns),
        final_checks=checks,
    )
    return Suite(path=path, format=SpecFormat.MANTLE_SCENARIO, name=name, cases=[case])


def _pattern(value: Any, path: Path, at: int | None) -> None:
    """``text_matches`` as Rasa takes it: a regular expression, refused here when it is not one
    (rather than failing its check after the whole conversation ran)."""
    if not isinstance(value, str):
        raise SpecError(path, at, "bot_uttered: text_matches is a regular expression, as a text")
    try:
        re.compile(value)
    except re.error as exc:
        raise SpecError(
            path,
            at,
            f"bot_uttered: text_matches {value[:80]!r} is not a regular expression ({exc}); "
            "fix it, or escape special characters with \\",
        ) from None


def bind_names(check: Check, names: AgentNames, path: Path, agent: str) -> None:
    """Refuse an assertion naming a tool or memory entry the project lacks: with a typo,
    ``tool_not_executed`` would always hold (and ``tool_executed`` never)."""
    if "tool_name" in check.params:
        names.action(str(check.params["tool_name"]), path, check.line, agent)
    if check.name == "memory_was_set":
        names.variable(str(check.params["name"]), path, check.line, agent)
