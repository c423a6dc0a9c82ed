"""The human reporter: per case its status, each failed expectation with expected and actual
(all of them with ``verbose``, plus the generated data), stale recordings, then totals. A case
that did not pass (every case with ``verbose``) lists its action calls, one line each, with
what answered the call (``stub``, ``fault``, ``mapped python://m:f`` or ``ran``).

Every free text (paths, case names, labels, errors, judge reasoning, diffs) goes through
:func:`terminal_text`, so an escape sequence or a newline in it is shown, never obeyed."""

from __future__ import annotations

import json

from agentscript.testing.reporters.escaping import terminal_text as safe
from agentscript.testing.results import CaseResult, RunResult, Status, action_runs, generated_data


def _dump(value: object) -> str:
    # ensure_ascii escapes controls in strings; ``default=repr`` output is escaped again by
    # ``safe`` in case an object's repr carries raw control characters.
    return safe(json.dumps(value, default=repr))


def _action_lines(case: CaseResult) -> list[str]:
    """``    action NAME (turn N): HOW`` per action call of the case."""
    return [
        f"    action {safe(call.name)} (turn {index}): {safe(call.label)}"
        for index, turn in enumerate(case.turns, start=1)
        for call in action_runs(turn)
    ]


def render_human(run: RunResult, verbose: bool = False) -> str:
    lines: list[str] = []
    for case in run.cases:
        status = case.status(judged_blocking=run.judged_blocking)
        lines.append(f"{status.value:<7} {safe(case.spec_path)} :: {safe(case.case)}")
        if case.error:
            lines.append(f"    error: {safe(case.error)}")
        for v in case.verdicts:
            if v.passed and not verbose:
                continue
            mark = "ok  " if v.passed else ("FAIL" if not v.judged else "fail (judged)")
            at = f" (line {v.line})" if v.line else ""
            lines.append(f"    {mark} {safe(v.name)}{at}")
            if not v.passed or verbose:
                lines.append(f"        expected: {_dump(v.expected)}")
                lines.append(f"        actual:   {_dump(v.actual)}")
            if v.explanation:
                lines.append(f"        why:      {safe(v.explanation)}")
        if verbose or status is not Status.PASS:
            lines += _action_lines(case)
        if verbose:
            for index, turn in enumerate(case.turns, start=1):
                data = generated_data(turn)
                lines.append(f"    turn {index} generatedData: {_dump(data)}")
    for key, diff in run.stale.items():
        lines.append(f"STALE recording {safe(key)}:")
        lines += ["    " + safe(line) for line in diff.splitlines()]
    for key, diff in run.refreshed.items():
        lines.append(f"re-recorded {safe(key)} (its prompt changed; --refresh-stale):")
        lines += ["    " + safe(line) for line in diff.splitlines()]
    counts = run.counts()
    verdicts = [v for c in run.cases for v in c.verdicts]
    lines.append(
        f"{len(run.cases)} cases: {counts[Status.PASS]} passed, {counts[Status.FAILURE]} failed, "
        f"{counts[Status.ERROR]} errors; {sum(v.passed for v in verdicts)}/{len(verdicts)} "
        f"expectations held ({run.duration_ms / 1000:.2f}s)"
    )
    return "\n".join(lines) + "\n"
