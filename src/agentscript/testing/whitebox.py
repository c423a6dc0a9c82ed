"""White-box assertions: what the model was shown, read from the turn's trace steps by kind.

```yaml
assert:
  - instructions_contain: {text: "Apologize", node: Order_Management}   # any call (or `call: N`)
  - instructions_equal: {text: "...", call: 1}
  - instructions_snapshot: {name: order_prompt, node: Order_Management}
  - tools_offered: {tools: [go_to_orders], node: router}
  - tools_hidden: {tools: [refund], call: 1}
  - variables_before: {num_turns: 2}        # at the start of the turn
  - variables_after: {num_turns: 3}         # at its end
  - action_variables: {action: check_if_late, before: {is_late: false}, after: {is_late: true}}
  - action_failed: {action: get_delivery_date, error_contains: "unavailable"}
  - llm_calls: 2                             # or {min: 1, max: 3}
```

``call`` is the 1-based index of the LLM call in the turn (among those of ``node`` when both
are given); without it, ``instructions_*`` and ``tools_offered`` hold when some selected call
matches, ``tools_hidden`` when every selected call hides the tools. Snapshots live in
``<spec>.snapshots/<name>.txt`` (``name`` is a plain file name, no folders): written on the
first run (the verdict says so) and compared after; ``--update-snapshots`` rewrites them. A
read-only run (each mutant's run under ``--mutate``) never writes one: a missing snapshot is a
failed check there, since the mutant's instructions must never become the reference.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from agentscript.testing.errors import SpecError
from agentscript.testing.results import TurnOutcome, Verdict
from agentscript.testing.spec import Check, CheckKind
from agentscript.testing.yamlmarks import line_of

KINDS: dict[str, tuple[set[str], set[str]]] = {
    # kind: (required keys, optional keys); scalar forms are handled in parse_assertions
    "instructions_contain": ({"text"}, {"call", "node"}),
    "instructions_equal": ({"text"}, {"call", "node"}),
    "instructions_snapshot": ({"name"}, {"call", "node"}),
    "tools_offered": ({"tools"}, {"call", "node"}),
    "tools_hidden": ({"tools"}, {"call", "node"}),
    "action_variables": ({"action"}, {"before", "after"}),
    "action_failed": ({"action"}, {"error_contains"}),
}
_MAPPINGS = {"variables_before", "variables_after"}
# A snapshot name becomes ``<spec>.snapshots/<name>.txt``: a plain file name only, so a spec
# cannot write (or, with --update-snapshots, overwrite) a file outside that folder.
_SNAPSHOT_NAME = re.compile(r"[\w][\w.-]{0,99}")
_TEXT_KEYS = {"text": "a text", "node": "a node name", "action": "an action name",
              "error_contains": "a text"}  # fmt: skip
_MAPPING_KEYS = {"before", "after"}


def _count(value: Any, *, positive: bool) -> bool:
    low = 1 if positive else 0
    return isinstance(value, int) and not isinstance(value, bool) and value >= low


def _check_values(kind: str, value: dict[str, Any], path: Path, at: int | None) -> None:
    """Refuse values of the wrong type when the spec is read, not with a crash mid-run."""
    for key, what in _TEXT_KEYS.items():
        if key in value and not isinstance(value[key], str):
            raise SpecError(path, at, f"{kind}: '{key}' must be {what}")
    for key in _MAPPING_KEYS & set(value):
        if value[key] is not None and not isinstance(value[key], dict):
            raise SpecError(path, at, f"{kind}: '{key}' must map variable names to values")
    if "call" in value and not _count(value["call"], positive=True):
        raise SpecError(path, at, f"{kind}: 'call' must be a call number from 1")
    if "name" in value:
        name = value["name"]
        if not isinstance(name, str) or not _SNAPSHOT_NAME.fullmatch(name) or name in {".", ".."}:
            raise SpecError(
                path,
                at,
                f"{kind}: 'name' must be a plain file name (letters, digits, '_', '-', '.'; "
                f"no folders), got {name!r}",
            )


def parse_assertions(raw: Any, path: Path, line: int | None) -> list[Check]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise SpecError(path, line_of(raw) or line, "'assert' must be a list of assertions")
    checks: list[Check] = []
    for index, item in enumerate(raw):
        at = line_of(raw, index) or line
        if not isinstance(item, dict) or len(item) != 1:
            raise SpecError(path, at, "an assertion is one kind: {llm_calls: 2}")
        kind, value = next(iter(item.items()))
        known = sorted([*KINDS, *_MAPPINGS, "llm_calls"])
        if kind == "llm_calls":
            if isinstance(value, int) and not isinstance(value, bool):
                value = {"min": value, "max": value}
            if (
                not isinstance(value, dict)
                or set(value) - {"min", "max"}
                or not all(_count(n, positive=False) for n in value.values())
            ):
                raise SpecError(path, at, "llm_calls is a number or {min: N, max: M}")
        elif kind in _MAPPINGS:
            if not isinstance(value, dict):
                raise SpecError(path, at, f"{kind} must map variable names to values")
        elif kind in KINDS:
            required, optional = KINDS[kind]
            if not isinstance(value, dict):
                raise SpecError(path, at, f"{kind} needs a mapping with {sorted(required)}")
            missing = sorted(required - set(value))
            extra = sorted(set(value) - required - optional)
            if missing or extra:
                raise SpecError(path, at, f"{kind}: missing {missing}, unknown {extra}")
            if "tools" in value and not (
                isinstance(value["tools"], list) and all(isinstance(t, str) for t in value["tools"])
            ):
                raise SpecError(path, at, f"{kind}: 'tools' must be a list of tool names")
            _check_values(kind, value, path, at)
        else:
            raise SpecError(path, at, f"unknown assertion {kind!r}; known: {known}")
        checks.append(Check(CheckKind.WHITEBOX, kind, dict(value), params=dict(value), line=at))
    return checks


def _calls(steps: list[dict[str, Any]], params: dict[str, Any]) -> list[dict[str, Any]]:
    calls = [s for s in steps if s.get("type") == "LLM_STEP"]
    if "node" in params:
        calls = [s for s in calls if s.get("node") == params["node"]]
    if "call" in params:
        index = int(params["call"]) - 1
        calls = calls[index : index + 1] if 0 <= index < len(calls) else []
    return calls


def _tools(step: dict[str, Any]) -> list[str]:
    return [str(t.get("name")) for t in step.get("input", {}).get("tools", [])]


def check_whitebox(
    check: Check,
    turn: TurnOutcome,
    number: int,
    snapshots: Path,
    update: bool,
    *,
    read_only: bool = False,
) -> Verdict:
    kind, params, steps = check.name, check.params, turn.steps

    def verdict(passed: bool, actual: Any, why: str) -> Verdict:
        return Verdict(kind, check.expected, actual, passed, explanation="" if passed else why,
                       line=check.line, turn=number)  # fmt: skip

    if kind == "llm_calls":
        count = sum(1 for s in steps if s.get("type") == "LLM_STEP")
        low, high = params.get("min", 0), params.get("max", count)
        return verdict(low <= count <= high, count, f"{count} LLM calls, expected {params}")
    if kind in _MAPPINGS:
        if kind == "variables_after":
            state = turn.reply.variables
        else:
            first = next((s for s in steps if "preVars" in s), None)
            state = first["preVars"] if first else turn.reply.variables
        differ = {k: state.get(k) for k, v in params.items() if state.get(k) != v}
        return verdict(not differ, {k: state.get(k) for k in params}, f"{kind}: differs {differ}")
    if kind in ("action_variables", "action_failed"):
        runs = [s for s in steps if s.get("type") == "ACTION_STEP"
                and params["action"] in (s.get("action"), s.get("name"))]  # fmt: skip
        if not runs:
            return verdict(False, None, f"{kind}: action {params['action']!r} did not run")
        if kind == "action_failed":
            errors = [s.get("error") for s in runs if s.get("error")]
            needle = str(params.get("error_contains", ""))
            ok = any(needle in str(e) for e in errors)
            return verdict(ok, errors or None, f"{params['action']} did not fail with {needle!r}")
        step = runs[-1]
        wrong: dict[str, Any] = {}
        for side, key in (("before", "preVars"), ("after", "postVars")):
            for name, value in dict(params.get(side) or {}).items():
                if (step.get(key) or {}).get(name) != value:
                    wrong[f"{side}.{name}"] = (step.get(key) or {}).get(name)
        return verdict(not wrong, wrong or None, f"action_variables differ: {wrong}")
    calls = _calls(steps, params)
    if not calls:
        return verdict(False, None, f"{kind}: no LLM call matches {params}")
    if kind.startswith("instructions_"):
        texts = [str(s.get("input", {}).get("instructions", "")) for s in calls]
        if kind == "instructions_contain":
            ok = any(params["text"] in t for t in texts)
            return verdict(ok, texts, f"no call's instructions contain {params['text']!r}")
        if kind == "instructions_equal":
            ok = any(params["text"].strip() == t.strip() for t in texts)
            return verdict(ok, texts, "no call's instructions equal the expected text")
        return _snapshot(check, texts[0], snapshots, number, update=update, read_only=read_only)
    offered = [_tools(s) for s in calls]
    wanted = list(params["tools"])
    if kind == "tools_offered":
        ok = any(all(t in tools for t in wanted) for tools in offered)
        return verdict(ok, offered, f"tools {wanted} not all offered at any selected call")
    ok = all(not (set(wanted) & set(tools)) for tools in offered)
    return verdict(ok, offered, f"tools {wanted} were offered (expected hidden)")


def _snapshot(
    check: Check, text: str, folder: Path, number: int, *, update: bool, read_only: bool
) -> Verdict:
    file = folder / f"{check.params['name']}.txt"
    # The name is checked when read; this also catches a snapshot that is a symlink (or a
    # folder) pointing elsewhere, which would be written through.
    present = file.exists() or file.is_symlink()
    if present and (file.resolve().parent != folder.resolve() or not file.is_file()):
        raise SpecError(
            check_path(folder), check.line, f"snapshot {file} is not a file in {folder}"
        )
    if read_only and not file.is_file():
        why = f"snapshot {file} does not exist and this run does not write snapshots (--mutate)"
        return Verdict(
            check.name, str(file), text, False, explanation=why, line=check.line, turn=number
        )
    if (update and not read_only) or not file.is_file():
        try:
            folder.mkdir(parents=True, exist_ok=True)
            file.write_text(text, encoding="utf-8")
        except OSError as exc:
            raise SpecError(
                check_path(folder), check.line, f"cannot write snapshot {file}: {exc.strerror}"
            ) from None
        return Verdict(check.name, str(file), text, True, explanation=f"snapshot written: {file}",
                       line=check.line, turn=number)  # fmt: skip
    try:
        saved = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(
            check_path(folder), check.line, f"cannot read snapshot {file}: {exc}"
        ) from None
    ok = saved == text
    why = "" if ok else f"instructions differ from snapshot {file}: {json.dumps(saved)[:200]}"
    return Verdict(check.name, saved, text, ok, explanation=why, line=check.line, turn=number)


def check_path(snapshots: Path) -> Path:
    """The spec file of a ``<spec>.snapshots`` folder, for error messages."""
    return snapshots.with_name(snapshots.name.removesuffix(".snapshots"))
