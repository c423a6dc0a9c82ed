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

Before a run, :func:`bind_names` checks every name against the agent (:class:`AgentNames`): a
tool, action, variable or subagent the agent lacks is a spec error, since ``tools_hidden`` or
``variables_after: {x: null}`` on a misspelt name would hold whatever the agent does. A tool may
be written as its tool name or as the definition name of the action it runs.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentscript.engine.session import AgentBase
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
# The key of a check's params holding, per written tool name, the tool names it stands for.
_ALIASES = "tool_names"
_SHOWN_NAMES = 12  # names listed when no close one is found: enough to spot the right one


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


def _check_call_bounds(value: Any, path: Path, at: int | None) -> None:
    # ``{}`` (no bound) and ``{min: 3, max: 1}`` would hold for every turn or for none.
    if (
        not isinstance(value, dict)
        or not value
        or set(value) - {"min", "max"}
        or not all(_count(n, positive=False) for n in value.values())
    ):
        raise SpecError(
            path, at, "llm_calls is a number or {min: N, max: M} (one of them at least)"
        )
    if value.get("min", 0) > value.get("max", value.get("min", 0)):
        raise SpecError(path, at, f"llm_calls: min {value['min']} is above max {value['max']}")


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
            _check_call_bounds(value, path, at)
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


def unknown_name(
    path: Path, line: int | None, what: str, name: str, known: Iterable[str]
) -> SpecError:
    """``name`` is not one of ``known``: the error names the closest one when a typo is likely,
    else the names there are (a check on a name the agent lacks could never fail or hold)."""
    choices = sorted(known)
    close = difflib.get_close_matches(name, choices, n=1, cutoff=0.75)
    if close:
        fix = f"did you mean {close[0]!r}?"
    else:
        shown = ", ".join(choices[:_SHOWN_NAMES]) + (", ..." if len(choices) > _SHOWN_NAMES else "")
        fix = f"use one of: {shown}" if choices else "the agent has none"
    return SpecError(path, line, f"{name!r} is not {what}; {fix}")


@dataclass(frozen=True)
class AgentNames:
    """The names a spec may use for one agent.

    ``tools`` are the names the model is offered (Agent Script tools, transitions included;
    Mantle tools); ``tools_of_action`` maps an action *definition* name to the tools that run
    it (both spellings match, as for expected actions); ``variables`` are the variables (Mantle:
    qualified memory names); ``nodes`` the subagents (None for Mantle, whose trace names other
    nodes too)."""

    tools: frozenset[str]
    tools_of_action: dict[str, frozenset[str]]
    actions: frozenset[str]  # every action definition, run by a tool or by a statement
    variables: frozenset[str]
    nodes: frozenset[str] | None

    @classmethod
    def of(cls, agent: AgentBase) -> AgentNames | None:
        """The agent's names, or None for an agent kind whose names are not known here."""
        program = getattr(agent, "program", None)
        if program is not None:
            return cls._of_script(program)
        project = getattr(agent, "project", None)
        if project is not None:
            tools = set(project.shared_tools)
            for skill in project.skills:
                tools |= set(project.tools_for(skill))
            variables = frozenset(agent.initial_variables({}))
            return cls(frozenset(tools), {}, frozenset(tools), variables, None)
        return None

    @classmethod
    def _of_script(cls, program: Any) -> AgentNames:
        tools: set[str] = set()
        actions: set[str] = set()
        by_action: dict[str, set[str]] = {}
        for node in program.nodes.values():
            actions |= set(node.info.actions)
            for tool in node.tools.values():
                tools.add(tool.name)
                if tool.action is not None:
                    by_action.setdefault(tool.action.name, set()).add(tool.name)
        return cls(
            frozenset(tools),
            {name: frozenset(found) for name, found in by_action.items()},
            frozenset(actions | tools),
            frozenset(program.outline.variables),
            frozenset(program.nodes),
        )

    def tool(self, name: str, path: Path, line: int | None, agent: str) -> frozenset[str]:
        """The tool names ``name`` (a tool or an action definition name) stands for."""
        found = self.tools_of_action.get(name, frozenset()) | ({name} & self.tools)
        if not found:
            known = self.tools | set(self.tools_of_action)
            what = f"a tool of the agent {agent}"
            if name in self.actions:  # run by statements only: never offered to the model
                what += " (it is an action no tool runs, so it is never offered)"
            raise unknown_name(path, line, what, name, known)
        return found

    def action(self, name: str, path: Path, line: int | None, agent: str) -> None:
        if name not in self.actions:
            what = f"a tool or action of the agent {agent}"
            raise unknown_name(path, line, what, name, self.actions)

    def variable(self, name: str, path: Path, line: int | None, agent: str) -> None:
        if name not in self.variables:
            raise unknown_name(path, line, f"a variable of the agent {agent}", name, self.variables)

    def node(self, name: str, path: Path, line: int | None, agent: str) -> None:
        if self.nodes is not None and name not in self.nodes:
            raise unknown_name(path, line, f"a subagent of the agent {agent}", name, self.nodes)


def bind_names(check: Check, names: AgentNames, path: Path, agent: str) -> None:
    """Refuse a white-box check naming a tool, action, variable or subagent ``agent`` lacks
    (``tools_hidden: [typo]`` or ``variables_after: {typo: null}`` would always hold), and
    record which tool names each written tool name stands for."""
    params, line = check.params, check.line
    if check.name in _MAPPINGS:
        for variable in params:
            names.variable(str(variable), path, line, agent)
        return
    if "tools" in params:
        params[_ALIASES] = {
            tool: sorted(names.tool(tool, path, line, agent)) for tool in params["tools"]
        }
    if "action" in params:
        names.action(params["action"], path, line, agent)
    for side in _MAPPING_KEYS & set(params):
        for variable in params[side] or {}:
            names.variable(str(variable), path, line, agent)
    if "node" in params:
        names.node(params["node"], path, line, agent)


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
    wanted = _spellings(params)
    names = list(params["tools"])
    if kind == "tools_offered":
        ok = any(all(each & set(tools) for each in wanted) for tools in offered)
        return verdict(ok, offered, f"tools {names} not all offered at any selected call")
    ok = all(not any(each & set(tools) for each in wanted) for tools in offered)
    return verdict(ok, offered, f"tools {names} were offered (expected hidden)")


def _spellings(params: dict[str, Any]) -> list[set[str]]:
    """Per written tool name, the tool names it stands for (see :func:`bind_names`)."""
    aliases = params.get(_ALIASES) or {}
    return [set(aliases.get(name, [name])) for name in params["tools"]]


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
