"""Fault injection for actions: per case, an action returns values, raises, times out,
returns malformed output or answers late, so a test can assert that the agent's error path ran.

```yaml
faults:
  get_delivery_date: {raise: "service unavailable"}
  check_if_late: {timeout: true}                  # hangs past its limit (timeout_s, default 0.05)
  lookup: {malformed: "not a mapping"}            # returns something that is not a dict
  slow: {latency_ms: 30, return: {ok: true}}      # answers late, then returns
```

Faults are per-action callables passed to ``agent.session(actions=...)`` plus a per-action
timeout in :class:`agentscript.Limits`; a faulted action is never stubbed in the same case.
"""

from __future__ import annotations

import asyncio
import math
from pathlib import Path
from typing import Any

from agentscript.actions.registry import ActionFunction
from agentscript.testing.errors import SpecError
from agentscript.testing.yamlmarks import line_of

_KEYS = {"raise", "timeout", "timeout_s", "malformed", "latency_ms", "return"}
DEFAULT_TIMEOUT_S = 0.05


def parse_faults(raw: Any, path: Path, line: int | None) -> dict[str, dict[str, Any]]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise SpecError(path, line_of(raw) or line, "'faults' maps action names to a fault")
    faults: dict[str, dict[str, Any]] = {}
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
