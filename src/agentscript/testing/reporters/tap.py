"""The tap reporter: ``TAP version 14``, one line per expectation (``ok N case.expectation``);
a failed one gets a YAML block with message, expected and actual.

Descriptions are escaped (:func:`tap_description`: controls and newlines made visible, ``\\``
and ``#`` backslash-escaped) and YAML values are JSON strings, so a name cannot forge a test
line or turn a failure into a ``# SKIP``."""

from __future__ import annotations

import json

from agentscript.testing.reporters.escaping import tap_description
from agentscript.testing.results import RunResult


def _yaml(value: object) -> str:
    # JSON is valid YAML; ensure_ascii keeps the value on one line with no raw controls.
    return json.dumps(value, default=repr, ensure_ascii=True)


def render_tap(run: RunResult, verbose: bool = False) -> str:
    lines = ["TAP version 14"]
    number = 0
    for case in run.cases:
        if case.error is not None:
            number += 1
            lines.append(f"not ok {number} {tap_description(f'{case.case}.run')}")
            lines += ["  ---", f"  message: {_yaml(case.error)}", "  ..."]
        for v in case.verdicts:
            number += 1
            blocking = run.judged_blocking or not v.judged
            # A failure that does not block is TAP's expected failure: `not ok ... # TODO`
            # (a harness counts it as neither a pass nor a failure).
            todo = " # TODO judged, not blocking" if not v.passed and not blocking else ""
            description = tap_description(f"{case.case}.{v.name}")
            lines.append(f"{'ok' if v.passed else 'not ok'} {number} {description}{todo}")
            if not v.passed:
                lines += [
                    "  ---",
                    f"  message: {_yaml(v.explanation)}",
                    f"  expectation: {_yaml(v.name)}",
                    f"  expected: {_yaml(v.expected)}",
                    f"  actual: {_yaml(v.actual)}",
                    "  ...",
                ]
    lines.append(f"1..{number}")
    return "\n".join(lines) + "\n"
