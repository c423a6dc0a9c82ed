"""Fault injection for actions: per case, an action returns values, raises, times out,
returns malformed output or answers late, so a test can assert that the agent's error path ran.

```yaml
faults:
  get_delivery_date: {raise: "service unavailable"}
  check_if_late: {timeout: true}                  # hangs past its limit (timeout_s, default 0.05)
  lookup: {malformed: "not a mapping"}            # returns something that is not a dict
  slow: {latency_ms: 30, return: {ok: true}}      # answers late, then returns
```

A fault names an action by its definition name or by the name of a tool that runs it (the
name the model sees), as expected actions do; before a run :func:`bind_faults` keys each
fault by its action and refuses any other name (a fault on a typo would never fire).
Faults are per-action callables passed to ``agent.session(actions=...)`` plus a per-action
timeout added to the agent's :class:`agentscript.Limits`; a faulted action is never stubbed
in the same case.
"""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from typing import Any

from agentscript.actions.registry import ActionFunction
from agentscript.testing.errors import SpecError
from agentscript.testing.spec import Case
from agentscript.testing.whitebox import AgentNames, unknown_name
from agentscript.testing.yamlmarks import Marked, line_of

_KEYS = {"raise", "timeout", "timeout_s", "malformed", "latency_ms", "return"}
DEFAULT_TIMEOUT_S = 0.05


def parse_faults(raw: Any, path: Path, line: int | None) -> dict[str, dict[str, Any]]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise SpecError(path, line_of(raw) or line, "'faults' maps action names to a fault")
    # Each name keeps its line: discovery.bind_to_agent refuses a name the agent lacks there.
    faults = Marked()
    faults.line = line or 0
    faults.key_lines = {}
    for name, fault in raw.items():
        at = line_of(raw, name) or line
        if not isinstance(fault, dict) or not fault:
            raise SpecError(path, at, f"fault of {name!r} must be a mapping, e.g. {{raise: msg}}")
        unknown = sorted(set(fault) - _KEYS)
        if unknown:
            raise SpecError(path, at, f"fault of {name!r}: unknown {unknown}; use {sorted(_KEYS)}")
        if "return" in fault and not isinstance(fault["return"], dict):
            raise SpecError(path, at, f"fault of {name!r}: 'return' must be a mapping")
        for key in ("timeout_s", "latency_ms"):
            # Read as numbers when the case runs: refuse anything else now, not mid-run.
            number = fault.get(key, 0)
            if (
                not isinstance(number, int | float)
                or isinstance(number, bool)
                or not math.isfinite(number)
                or number < 0
            ):
                raise SpecError(path, at, f"fault of {name!r}: {key!r} must be a number >= 0")
        faults[str(name)] = dict(fault)
        faults.key_lines[str(name)] = at or 0
    return faults


def fault_function(name: str, fault: dict[str, Any]) -> ActionFunction:
    async def action(**inputs: Any) -> Any:
        if "latency_ms" in fault:
            await asyncio.sleep(float(fault["latency_ms"]) / 1000)
        if fault.get("timeout"):
            await asyncio.sleep(3600)  # cut short by the action's timeout
        if "raise" in fault:
            raise RuntimeError(str(fault["raise"]))
        if "malformed" in fault:
            return fault["malformed"]
        return dict(fault.get("return") or {})

    action.__name__ = f"fault_{name}"
    return action


def fault_timeouts(faults: dict[str, dict[str, Any]]) -> dict[str, float]:
    return {
        name: float(fault.get("timeout_s", DEFAULT_TIMEOUT_S))
        for name, fault in faults.items()
        if fault.get("timeout")
    }


def fault_targets(names: AgentNames) -> dict[str, str]:
    """Each name a fault may use, with the action it replaces (an action call is named after
    its action, so that is the name the runner keys the fault by).

    Agent Script: an action definition by its own name, or a tool by its name when it runs an
    action; a transition or another tool that runs no action has nothing to fault. A name
    that is both a tool's and the definition name of an action some tool runs means that
    action (the name ``action_failed`` and the trace's ``action`` use). Mantle: every tool is
    its own action."""
    if names.nodes is None:  # Mantle (AgentNames.of): a tool call is an action call
        return {tool: tool for tool in names.tools}
    targets = {tool: action for action, tools in names.tools_of_action.items() for tool in tools}
    # ``actions`` holds the tool names as well: those of no action definition are dropped.
    targets.update({action: action for action in names.actions - names.tools})
    targets.update({action: action for action in names.tools_of_action})
    return targets


def bind_faults(case: Case, names: AgentNames, path: Path, agent: str) -> None:
    """Key ``case.faults`` by action name, refusing a name that is no action of ``agent`` nor
    a tool running one: the fault would never fire and the case would test the real action
    (or its stub) while claiming to test the error path. Two names of one action are
    refused too (which fault would win is not written anywhere)."""
    targets = fault_targets(names)
    bound: dict[str, dict[str, Any]] = {}
    spelt: dict[str, str] = {}
    for name, fault in case.faults.items():
        line = line_of(case.faults, name) or case.line
        action = targets.get(name)
        if action is None:
            why = "; it is a tool that runs no action" if name in names.tools else ""
            what = (
                f"an action of the agent {agent} nor a tool that runs one "
                f"(a fault of case {case.name!r}{why})"
            )
            raise unknown_name(path, line, what, name, targets)
        if action in bound:
            raise SpecError(
                path,
                line,
                f"faults {spelt[action]!r} and {name!r} of case {case.name!r} both name the "
                f"action {action!r}; keep one",
            )
        bound[action] = fault
        spelt[action] = name
    case.faults = bound
