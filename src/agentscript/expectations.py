"""Per-turn expectations in conversation files: a conversation becomes a regression test.

```yaml
turns:
  - user: "Where is my order?"
    model: [{tool: go_to_orders}, {say: "It arrives February 10."}]
    expect:
      node: Order_Management            # the subagent (or skill) the turn ended in
      path: [router, Order_Management]  # every subagent entered, in order
      actions: [go_to_orders, get_delivery_date, check_if_late]   # exactly, in order
      variables: {num_turns: 3}         # these values (others are not checked)
      response_contains: "February 10"  # or `response:` for the exact text
      escalated: false
      ended: false
      error: false                      # true: any error; a string: the error contains it
```

`agentscript run` reports each unmet expectation and exits 1. A turn that ends in an error
fails the run too, unless its `expect:` has `error:` (`true`, or a text the error contains).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentscript.errors import UsageError

if TYPE_CHECKING:
    from agentscript.engine.session import Reply

KEYS = (
    "node",
    "path",
    "actions",
    "variables",
    "response",
    "response_contains",
    "escalated",
    "ended",
    "error",
)


class ExpectationError(UsageError, ValueError):
    """An ``expect:`` block is malformed."""


@dataclass(frozen=True)
class Expectations:
    spec: Mapping[str, Any]

    @staticmethod
    def parse(data: Any, where: str) -> Expectations:
        if data is None:
            return Expectations({})
        if not isinstance(data, Mapping):
            raise ExpectationError(f"{where}: 'expect' must be a mapping")
        unknown = sorted(set(data) - set(KEYS))
        if unknown:
            raise ExpectationError(f"{where}: unknown expectation(s) {unknown}; use {list(KEYS)}")
        for key in ("path", "actions"):
            if key in data and not (
                isinstance(data[key], list) and all(isinstance(x, str) for x in data[key])
            ):
                raise ExpectationError(f"{where}: 'expect.{key}' must be a list of names")
        if "variables" in data and not isinstance(data["variables"], Mapping):
            raise ExpectationError(f"{where}: 'expect.variables' must be a mapping")
        for key in ("escalated", "ended"):
            if key in data and not isinstance(data[key], bool):
                raise ExpectationError(f"{where}: 'expect.{key}' must be true or false")
        if "error" in data and not isinstance(data["error"], bool | str):
            raise ExpectationError(f"{where}: 'expect.error' must be true, false or a text")
        return Expectations(dict(data))

    def check(self, reply: Reply) -> list[str]:
        """Every unmet expectation, as a sentence; empty when the turn is as expected."""
        spec = self.spec
        failures: list[str] = []

        def differs(what: str, expected: Any, actual: Any) -> None:
            if expected != actual:
                failures.append(f"{what}: expected {_show(expected)}, got {_show(actual)}")

        if "node" in spec:
            differs("node", spec["node"], reply.node)
        if "path" in spec:
            differs("path", spec["path"], reply.path)
        if "actions" in spec:
            differs("actions", spec["actions"], reply.actions)
        for name, value in dict(spec.get("variables") or {}).items():
            if name not in reply.variables:
                failures.append(f"variables.{name}: no such variable")
            else:
                differs(f"variables.{name}", value, reply.variables[name])
        if "response" in spec:
            differs("response", spec["response"], reply.text)
        if "response_contains" in spec and str(spec["response_contains"]) not in reply.text:
            failures.append(
                f"response: expected it to contain {_show(spec['response_contains'])}, "
                f"got {_show(reply.text)}"
            )
        for key in ("escalated", "ended"):
            if key in spec:
                differs(key, spec[key], getattr(reply, key))
        if "error" in spec:
            expected = spec["error"]
            if expected is False and reply.error is not None:
                failures.append(f"error: expected none, got {_show(reply.error)}")
            elif expected is True and reply.error is None:
                failures.append("error: expected the turn to fail, it did not")
            elif isinstance(expected, str) and expected not in (reply.error or ""):
                failures.append(
                    f"error: expected it to contain {_show(expected)}, got {_show(reply.error)}"
                )
        return failures


def _show(value: Any) -> str:
    text = json.dumps(value, default=repr, ensure_ascii=False)
    return text if len(text) <= 200 else text[:199] + "…"
