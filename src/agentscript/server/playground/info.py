"""What the page needs to know about an agent beyond ``GET /v1/agents/{agent}``: the guard of
every gated tool (to say *why* a tool was hidden) and the agent's control graph. (Mantle
response buttons come with the turn: ``RESPONSE_STEP.buttons``, the variant chosen and those a
tool supplied.)

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
