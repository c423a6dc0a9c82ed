"""What the page needs to know about an agent beyond ``GET /v1/agents/{agent}``: the guard of
every gated tool (to say *why* a tool was hidden), the buttons of Mantle responses (to show
them under the reply that used them), and the agent's control graph.

The graph comes from ``agentscript.authoring.graph`` when that module is installed; without it
:func:`graph_json` returns None and the route answers 404. Nothing here runs the agent.
"""

from __future__ import annotations

import importlib
from typing import Any

from agentscript.engine.session import Agent, AgentBase


def guards(agent: AgentBase) -> dict[str, dict[str, str]]:
    """``{node or skill: {tool: guard text}}`` for every tool that has a guard."""
    from agentscript.expr.printer import print_expr
    from agentscript.mantle.runtime import MantleAgent

    found: dict[str, dict[str, str]] = {}
    if isinstance(agent, Agent):
        for node_name, node in agent.program.nodes.items():
            for tool in node.tools.values():
                if tool.guard is not None:
                    found.setdefault(node_name, {})[tool.name] = print_expr(tool.guard)
    elif isinstance(agent, MantleAgent):
        for skill in agent.project.skills.values():
            for name, constraint in skill.tool_constraints.items():
                if constraint.requires is not None:
                    found.setdefault(skill.id, {})[name] = constraint.requires.text
    return found


def buttons(agent: AgentBase) -> dict[str, list[dict[str, str]]]:
    """``{response name: [{title, payload}]}`` for Mantle responses with fixed buttons (of the
    first variant that has any: the trace names the response, not the variant)."""
    from agentscript.mantle.runtime import MantleAgent

    if not isinstance(agent, MantleAgent):
        return {}
    found: dict[str, list[dict[str, str]]] = {}
    for name, response in agent.project.responses.items():
        for variant in response.variants:
            if variant.buttons:
                found[name] = [
                    {"title": b.title, "payload": b.payload if b.payload is not None else b.title}
                    for b in variant.buttons
                ]
                break
    return found


def graph_json(agent: AgentBase) -> dict[str, Any] | None:
    """The agent's control graph as JSON, or None when the graph module is not installed."""
    from agentscript.mantle.runtime import MantleAgent

    try:
        module = importlib.import_module("agentscript.authoring.graph")
    except ImportError:
        return None
    if isinstance(agent, Agent):
        graph = module.agent_graph(agent.outline, agent.name, program=agent.program)
    elif isinstance(agent, MantleAgent):
        graph = module.mantle_graph(agent.project, agent.name)
    else:
        return None
    data: dict[str, Any] = graph.to_json()
    return data
