"""Agent coverage: which parts of the agent (not of Python) the suite exercised.

Items of an Agent Script agent: each subagent (entered: NODE_ENTER), each action definition
(ran: ACTION_STEP), each transition edge from a transition tool or a ``transition to``
statement (taken: TRANSITION_STEP), each ``available when`` gate seen *open* and seen *closed*
(RESOLUTION_STEP ``tools`` / ``hiddenTools``: two items per gate), and each branch of each
``if`` (``if``, every ``else if``, and ``else`` — present or implicit: the trace's ``branches``). Items of a
Mantle project: each skill (SKILL_STEP activated), ordered block (BLOCK_STEP entered), step
(BLOCK_STEP entered/advanced at it) and tool constraint (the tool ran or was refused).

:func:`agent_items` lists the items from the checked agent; :func:`measure` marks the ones the
trace steps show; renderers give a terminal table, JSON and an HTML page of the agent's source
with every line holding an item marked covered or not.
"""

from __future__ import annotations

import dataclasses
import html
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentscript.engine.session import AgentBase
from agentscript.syntax.tree import IfStmt, TransitionStmt, walk

COVERAGE_FORMAT = "agentscript-coverage/1"


@dataclass
class Item:
    kind: str  # subagent, action, transition, gate_open, gate_closed, branch, skill, ...
    id: str
    line: int
    file: str
    covered: bool = False

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass
class Coverage:
    agent: str
    items: list[Item]

    @property
    def percent(self) -> float:
        if not self.items:
            return 100.0
        return 100.0 * sum(i.covered for i in self.items) / len(self.items)

    def by_kind(self) -> dict[str, tuple[int, int]]:
        table: dict[str, tuple[int, int]] = {}
        for item in self.items:
            done, total = table.get(item.kind, (0, 0))
            table[item.kind] = (done + item.covered, total + 1)
        return table

    def to_json(self) -> dict[str, Any]:
        return {
            "format": COVERAGE_FORMAT,
            "agent": self.agent,
            "percent": round(self.percent, 2),
            "byKind": {k: {"covered": d, "total": t} for k, (d, t) in self.by_kind().items()},
            "items": [i.to_json() for i in self.items],
        }


def agent_items(agent: AgentBase) -> list[Item]:
    program = getattr(agent, "program", None)
    project = getattr(agent, "project", None)
    if program is not None:
        return _script_items(agent, program)
    if project is not None:
        return _mantle_items(project)
    return []


def _script_items(agent: AgentBase, program: Any) -> list[Item]:
    file = str(agent.path or agent.name)
    items: list[Item] = []
    seen: set[tuple[str, str]] = set()

    def add(kind: str, ident: str, line: int) -> None:
        if (kind, ident) not in seen:
            seen.add((kind, ident))
            items.append(Item(kind, ident, line, file))

    for name, node in program.nodes.items():
        info = node.info
        add("subagent", name, info.span.line)
        for action in info.actions.values():
            add("action", f"{name}.{action.name}", action.span.line)
        blocks: list[Any] = [info.before_reasoning, info.after_reasoning, info.instructions]
        for tool in node.tools.values():
            blocks += [tool.callback, tool.after_response]
            if tool.kind == "transition" and tool.target_node:
                add("transition", f"{name} -> {tool.target_node}", _line(tool, info))
            if tool.guard is not None:
                line = tool.guard.span.line
                add("gate_open", f"{name}.{tool.name}", line)
                add("gate_closed", f"{name}.{tool.name}", line)
        for syntax in walk(blocks):
            if isinstance(syntax, TransitionStmt):
                for target in syntax.targets:
                    to = program.node_of(target)
                    if to:
                        add("transition", f"{name} -> {to}", syntax.span.line)
            elif isinstance(syntax, IfStmt):
                line = syntax.span.line
                add("branch", f"{name}:{line} if", line)
                for index, clause in enumerate(syntax.else_ifs, start=1):
                    add("branch", f"{name}:{line} elif {index}", clause.span.line)
                else_line = syntax.else_clause.span.line if syntax.else_clause else line
                add("branch", f"{name}:{line} else", else_line)
    return items


def _line(tool: Any, info: Any) -> int:
    guard = getattr(tool, "guard", None)
    binding = info.tools.get(tool.name) if hasattr(info, "tools") else None
    span = getattr(binding, "span", None) or getattr(guard, "span", None) or info.span
    return int(span.line)


def _mantle_items(project: Any) -> list[Item]:
    items: list[Item] = []
    for skill in project.skills.values():
        items.append(Item("skill", skill.id, skill.span.line, skill.file))
        for block in skill.blocks.values():
            items.append(Item("block", f"{skill.id}.{block.id}", block.span.line, block.file))
            for step in block.steps:
                items.append(
                    Item("step", f"{skill.id}.{block.id}.{step.id}", step.span.line, step.file)
                )
        for constraint in skill.tool_constraints.values():
            ident = f"{skill.id}.{constraint.tool}"
            items.append(Item("tool_constraint", ident, constraint.span.line, constraint.file))
    return items


def covered_ids(steps: Iterable[dict[str, Any]]) -> set[tuple[str, str]]:
    done: set[tuple[str, str]] = set()
    skill_of_tool: dict[str, str] = {}
    current_skill = ""
    for step in steps:
        kind = step.get("type")
        node = str(step.get("node") or "")
        if kind == "NODE_ENTER":
            done.add(("subagent", node))
        elif kind == "ACTION_STEP":
            done.add(("action", f"{node}.{step.get('action')}"))
            skill_of_tool[str(step.get("name"))] = current_skill
            done.add(("tool_constraint", f"{node}.{step.get('name')}"))
            done.add(("tool_constraint", f"{current_skill}.{step.get('name')}"))
        elif kind == "REFUSED_STEP":
            done.add(("tool_constraint", f"{node}.{step.get('name')}"))
            done.add(("tool_constraint", f"{current_skill}.{step.get('name')}"))
        elif kind == "TRANSITION_STEP":
            done.add(("transition", f"{step.get('from')} -> {step.get('to')}"))
        elif kind == "RESOLUTION_STEP":
            for tool in step.get("tools") or []:
                done.add(("gate_open", f"{node}.{tool}"))
            for tool in step.get("hiddenTools") or []:
                done.add(("gate_closed", f"{node}.{tool}"))
        elif kind == "BRANCH":  # from the trace's `branches` list (see TurnOutcome.steps)
            done.add(("branch", f"{node}:{step.get('line')} {step.get('taken')}"))
        elif kind == "SKILL_STEP":
            current_skill = str(step.get("skill") or current_skill)
            if step.get("event") in ("activated", "entered", "resumed"):
                done.add(("skill", current_skill))
        elif kind == "BLOCK_STEP":
            skill = str(step.get("skill"))
            done.add(("block", f"{skill}.{step.get('block')}"))
            done.add(("step", f"{skill}.{step.get('block')}.{step.get('step')}"))
    return done


def measure(agent: AgentBase, steps: Iterable[dict[str, Any]]) -> Coverage:
    items = agent_items(agent)
    done = covered_ids(steps)
    for item in items:
        item.covered = (item.kind, item.id) in done
    return Coverage(agent.name, items)


def render_table(coverage: Coverage) -> str:
    lines = [f"coverage of {coverage.agent}: {coverage.percent:.1f}%"]
    for kind, (done, total) in coverage.by_kind().items():
        lines.append(f"  {kind:<16} {done:>4}/{total:<4} {100.0 * done / total:5.1f}%")
    missed = [i for i in coverage.items if not i.covered]
    for item in missed:
        lines.append(f"  not covered: {item.kind} {item.id} (line {item.line})")
    return "\n".join(lines) + "\n"


def render_json(coverages: list[Coverage]) -> str:
    return json.dumps([c.to_json() for c in coverages], indent=2) + "\n"


def render_html(coverages: list[Coverage]) -> str:
    parts = [
        "<!doctype html><meta charset='utf-8'><title>agent coverage</title><style>"
        "pre{margin:0}.hit{background:#d4f7d4}.miss{background:#f9d0d0}"
        ".part{background:#fbeeb8}td{font-family:monospace;white-space:pre;padding:0 6px}"
        "</style>"
    ]
    for coverage in coverages:
        parts.append(f"<h2>{html.escape(coverage.agent)}: {coverage.percent:.1f}%</h2>")
        by_file: dict[str, list[Item]] = {}
        for item in coverage.items:
            by_file.setdefault(item.file, []).append(item)
        for file, items in by_file.items():
            try:
                source = Path(file).read_text(encoding="utf-8").splitlines()
            except OSError:
                source = []
            marks: dict[int, list[Item]] = {}
            for item in items:
                marks.setdefault(item.line, []).append(item)
            parts.append(f"<h3>{html.escape(file)}</h3><table>")
            for number, text in enumerate(source, start=1):
                here = marks.get(number, [])
                css = ""
                if here:
                    hits = sum(i.covered for i in here)
                    css = "hit" if hits == len(here) else ("miss" if hits == 0 else "part")
                note = "; ".join(f"{'✓' if i.covered else '✗'} {i.kind} {i.id}" for i in here)
                parts.append(
                    f"<tr class='{css}'><td>{number}</td><td>{html.escape(text)}</td>"
                    f"<td>{html.escape(note)}</td></tr>"
                )
            parts.append("</table>")
    return "\n".join(parts) + "\n"
