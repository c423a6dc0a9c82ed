"""The control graph of an agent: who can hand control to whom, through what, under which guard.

Agent Script: the start agent, subagents and connected subagents are nodes; edges are the
transitions the model can request (a ``@utils.transition`` tool, with its ``available when``),
transitions written in procedures (instructions, ``before_reasoning``, ``after_reasoning``, tool
callbacks, each with the ``if`` conditions around it), delegations (control comes back),
connected-subagent calls, and the two terminal points ``@utils.escalate`` and
``@utils.end_session``.

Mantle: skills are nodes; edges are ``@skill`` invocations in prose, ``call:`` and ``link:``
steps; each ordered block is a cluster of its steps with their ``next`` branches.

In: a checked outline or a loaded Mantle project. Out: :class:`Graph`, plain data that the
renderers in :mod:`agentscript.authoring.render` turn into Mermaid, DOT, SVG or JSON.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from agentscript.authoring.facts import readable
from agentscript.check.outline import AgentOutline
from agentscript.engine.program import Program
from agentscript.expr.nodes import Expr
from agentscript.syntax.tree import Block, IfStmt, RunStmt, TransitionStmt

ESCALATION = "@escalation"
END = "@end"


class NodeKind(StrEnum):
    START = "start"
    SUBAGENT = "subagent"
    CONNECTED = "connected"
    ESCALATION = "escalation"
    END = "end"
    SKILL = "skill"
    STEP = "step"


class EdgeKind(StrEnum):
    TRANSITION = "transition"  # the model asks for it through a tool
    PROCEDURE = "procedure"  # `transition to` written in a procedure
    DELEGATE = "delegate"  # control comes back after the delegate answers
    CALL = "call"  # a connected subagent called as a tool; Mantle `call:`
    LINK = "link"  # Mantle `link:` (no return)
    INVOKE = "invoke"  # Mantle `@skill.x` in prose
    ESCALATE = "escalate"
    END = "end"
    NEXT = "next"  # a Mantle step's `next`


@dataclass(slots=True)
class GraphNode:
    id: str
    kind: NodeKind
    label: str
    line: int | None = None
    group: str | None = None  # the Mantle skill/block a step belongs to


@dataclass(slots=True)
class GraphEdge:
    source: str
    target: str
    kind: EdgeKind
    via: str  # the tool, hook or step that makes the move
    guard: str | None = None
    line: int | None = None


@dataclass(slots=True)
class Graph:
    agent: str
    format: str  # "agentscript" | "mantle"
    nodes: list[GraphNode] = field(default_factory=list)
    edges: list[GraphEdge] = field(default_factory=list)

    def node(self, node_id: str) -> GraphNode | None:
        return next((n for n in self.nodes if n.id == node_id), None)

    def reachable(self, start: str) -> set[str]:
        """Node ids reachable from ``start`` along any edge."""
        targets: dict[str, list[str]] = {}
        for edge in self.edges:
            targets.setdefault(edge.source, []).append(edge.target)
        seen, todo = {start}, [start]
        while todo:
            for target in targets.get(todo.pop(), ()):
                if target not in seen:
                    seen.add(target)
                    todo.append(target)
        return seen

    def to_json(self) -> dict[str, Any]:
        return {
            "format": "agentscript-graph/1",
            "agent": self.agent,
            "agentFormat": self.format,
            "nodes": [asdict(n) for n in self.nodes],
            "edges": [asdict(e) for e in self.edges],
        }


def agent_graph(
    outline: AgentOutline,
    name: str = "agent",
    *,
    program: Program | None = None,
    guards: bool = True,
) -> Graph:
    """The graph of an Agent Script agent. ``guards=False`` leaves the guards' text out (every
    ``guard`` is None): reachability does not need it, and printing each condition is most of
    what building the graph costs."""
    program = program or Program(outline)
    graph = Graph(outline.agent_name or name, "agentscript")
    for info in outline.subagents.values():
        kind = NodeKind.START if info.is_start else NodeKind.SUBAGENT
        graph.nodes.append(GraphNode(info.name, kind, info.label or info.name, info.span.line))
    for connected in outline.connected_subagents.values():
        graph.nodes.append(
            GraphNode(
                connected.name,
                NodeKind.CONNECTED,
                connected.label or connected.name,
                connected.span.line,
            )
        )
    terminals: set[str] = set()
    for node in program.nodes.values():
        info = node.info
        for tool in node.tools.values():
            guard = readable(tool.guard) if guards and tool.guard is not None else None
            line = tool.action.span.line if tool.action is not None else None
            binding = info.tools.get(tool.name)
            if binding is not None:
                line = binding.span.line
            if tool.kind == "transition" and tool.target_node:
                graph.edges.append(
                    GraphEdge(
                        info.name, tool.target_node, EdgeKind.TRANSITION, tool.name, guard, line
                    )
                )
            elif tool.kind == "delegate" and tool.target_node:
                graph.edges.append(
                    GraphEdge(
                        info.name, tool.target_node, EdgeKind.DELEGATE, tool.name, guard, line
                    )
                )
            elif tool.kind == "connected" and binding is not None and binding.target:
                graph.edges.append(
                    GraphEdge(info.name, binding.target, EdgeKind.CALL, tool.name, guard, line)
                )
            elif tool.kind == "escalate":
                terminals.add(ESCALATION)
                graph.edges.append(
                    GraphEdge(info.name, ESCALATION, EdgeKind.ESCALATE, tool.name, guard, line)
                )
            elif tool.kind == "end_session":
                terminals.add(END)
                graph.edges.append(GraphEdge(info.name, END, EdgeKind.END, tool.name, guard, line))
            if tool.callback is not None:
                _procedure_edges(
                    graph,
                    program,
                    info.name,
                    tool.callback,
                    f"{tool.name} callback",
                    [guard] if guard else [],
                    guards,
                )
        hooks: list[tuple[str, object]] = [
            ("before_reasoning", info.before_reasoning),
            ("instructions", info.instructions),
            ("after_reasoning", info.after_reasoning),
        ]
        for where, block in hooks:
            if isinstance(block, Block):
                _procedure_edges(graph, program, info.name, block, where, [], guards)
    if ESCALATION in terminals:
        graph.nodes.append(GraphNode(ESCALATION, NodeKind.ESCALATION, "escalation"))
    if END in terminals:
        graph.nodes.append(GraphNode(END, NodeKind.END, "end of session"))
    return graph


def _procedure_edges(
    graph: Graph,
    program: Program,
    source: str,
    block: Block,
    where: str,
    guards: list[str],
    with_guards: bool = True,
) -> None:
    for item in block.statements():
        if isinstance(item, TransitionStmt):
            for target_expr in item.targets:
                target = program.node_of(target_expr)
                if target is not None:
                    guard = " and ".join(guards) if guards and with_guards else None
                    graph.edges.append(
                        GraphEdge(source, target, EdgeKind.PROCEDURE, where, guard, item.span.line)
                    )
            return  # nothing after a transition runs (rule S4)
        if isinstance(item, IfStmt):
            previous: list[str] = []
            arms: list[tuple[Expr | None, Block | None]] = [(item.condition, item.body)]
            arms += [(e.condition, e.body) for e in item.else_ifs]
            arms.append((None, item.else_clause.body if item.else_clause else None))
            for condition, body in arms:
                here = [*guards, *(f"not ({p})" for p in previous)]
                if condition is not None and with_guards:
                    text = readable(condition)
                    here.append(text)
                    previous.append(text)
                if body is not None:
                    _procedure_edges(graph, program, source, body, where, here, with_guards)
        elif isinstance(item, RunStmt) and item.body is not None:
            _procedure_edges(graph, program, source, item.body, where, guards, with_guards)


def mantle_graph(project: Any, name: str = "project") -> Graph:
    """The graph of a Mantle project: skills, invocations, blocks and their steps."""
    from agentscript.mantle.model import ReferenceKind, StepKind

    graph = Graph(project.agent.name or project.agent.id or name, "mantle")
    for skill in project.skills.values():
        graph.nodes.append(
            GraphNode(skill.id, NodeKind.SKILL, skill.name or skill.id, skill.span.line)
        )
    for skill in project.skills.values():
        guard = skill.requires.text if skill.requires is not None else None
        for ref in skill.references:
            if ref.kind == ReferenceKind.SKILL and ref.target in project.skills:
                graph.edges.append(
                    GraphEdge(
                        skill.id, ref.target, EdgeKind.INVOKE, ref.token, guard, ref.span.line
                    )
                )
        for block in skill.blocks.values():
            for index, step in enumerate(block.steps):
                step_id = f"{skill.id}/{block.id}/{step.id}"
                graph.nodes.append(
                    GraphNode(
                        step_id,
                        NodeKind.STEP,
                        f"{step.id} ({step.kind})",
                        step.span.line,
                        f"{skill.id}/{block.id}",
                    )
                )
                if index == 0:
                    graph.edges.append(
                        GraphEdge(
                            skill.id,
                            step_id,
                            EdgeKind.NEXT,
                            f"block {block.id}",
                            None,
                            step.span.line,
                        )
                    )
                for target_skill, kind in ((step.call, EdgeKind.CALL), (step.link, EdgeKind.LINK)):
                    if target_skill:
                        graph.edges.append(
                            GraphEdge(step_id, target_skill, kind, step.id, None, step.span.line)
                        )
                for target, condition in _next_of(block, index):
                    if target == "END" or step.kind == StepKind.END:
                        continue
                    graph.edges.append(
                        GraphEdge(
                            step_id,
                            f"{skill.id}/{block.id}/{target}",
                            EdgeKind.NEXT,
                            step.id,
                            condition,
                            step.span.line,
                        )
                    )
    return graph


def _next_of(block: Any, index: int) -> list[tuple[str, str | None]]:
    step = block.steps[index]
    if step.next is None:
        if index + 1 < len(block.steps):
            return [(block.steps[index + 1].id, None)]
        return []
    if isinstance(step.next, str):
        return [(step.next, None)]
    return [(b.target, b.condition.text if b.condition is not None else None) for b in step.next]
