"""The tap reporter: ``TAP version 14``, one line per expectation (``ok N case.expectation``);
a failed one gets a YAML block with message, expected and actual."""

from __future__ import annotations

import json

from agentscript.testing.results import RunResult


def render_tap(run: RunResult, verbose: bool = False) -> str:
    lines = ["TAP version 14"]
    number = 0
    for case in run.cases:
        if case.error is not None:
            number += 1
            lines.append(f"not ok {number} {case.case}.run")
            lines += ["  ---", f"  message: {json.dumps(case.error)}", "  ..."]
        for v in case.verdicts:
            number += 1
            blocking = run.judged_blocking or not v.judged
            ok = v.passed or not blocking
            todo = " # TODO judged, not blocking" if not v.passed and not blocking else ""
            lines.append(f"{'ok' if ok else 'not ok'} {number} {case.case}.{v.name}{todo}")
            if not v.passed:
                lines += [
                    "  ---",
                    f"  message: {json.dumps(v.explanation, default=repr)}",
                    f"  expectation: {json.dumps(v.name)}",
                    f"  expected: {json.dumps(v.expected, default=repr)}",
                    f"  actual: {json.dumps(v.actual, default=repr)}",
                    "  ...",
                ]
    lines.append(f"1..{number}")
    return "\n".join(lines) + "\n"
