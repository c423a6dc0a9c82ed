"""One small agent in each format with the same tools, for tests that compare the formats.

Both offer ``add(a: integer)`` and ``refund(amount: number)``, which waits for the user's
yes/no before it runs; actions are stubbed by name (:func:`session`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import agentscript
from agentscript.actions.registry import StubBook
from agentscript.engine.session import AgentBase, Reply, Session
from agentscript.models.scripted import Move, ScriptedModel

AGENT = """\
system:
    instructions: "Be brief."
    messages:
        welcome: "Hi."
        error: "Sorry, something went wrong."
config:
    developer_name: "kernel"
variables:
    total: mutable number = 0
start_agent main:
    description: "main"
    reasoning:
        instructions: ->
            | Use the tools.
        actions:
            add: @actions.add
                with a = ...
            refund: @actions.refund
                with amount = ...
    actions:
        add:
            description: "Add"
            target: "flow://Add"
            inputs:
                a: integer
            outputs:
                sum: number
        refund:
            description: "Refund money"
            target: "flow://Refund"
            require_user_confirmation: True
            inputs:
                amount: number
            outputs:
                refund_id: string
"""

TOOLS = '''
def add(a: int) -> dict:
    """Adds.

    Args:
        a: The number.
    """
    return {"sum": a}


def refund(amount: float) -> dict:
    """Refunds.

    Args:
        amount: How much.
    """
    return {"refund_id": "r1"}
'''

SKILL = """---
name: Tools
description: Exercise tools.
tool_constraints:
  - refund:
      requires_confirmation:
        enabled: true
        utter_for_confirmation: utter_confirm
---
Use the tools.
"""


def agent_script(root: Path) -> AgentBase:
    root.mkdir(parents=True, exist_ok=True)
    path = root / "kernel.agent"
    path.write_text(AGENT)
    return agentscript.load(path, dialect="agentscript")


def mantle(root: Path) -> AgentBase:
    project = root / "project"
    (project / "skills" / "tools").mkdir(parents=True)
    (project / "agent.yml").write_text("agent:\n  id: kernel\n  persona: You test.\n")
    (project / "responses.yml").write_text(
        "responses:\n  utter_confirm:\n    - text: 'Before I run refund, please confirm: yes or no?'\n"
    )
    (project / "skills" / "tools" / "skill.md").write_text(SKILL)
    (project / "skills" / "tools" / "tools.py").write_text(TOOLS)
    return agentscript.load(project)


def session(agent: AgentBase, model: ScriptedModel, **kwargs: Any) -> Session:
    stubs = StubBook.from_data(
        {"add": {"outputs": {"sum": 1}}, "refund": {"outputs": {"refund_id": "r1"}}}
    )
    return agent.session(model=model, stubs=stubs, **kwargs)


def opening(agent: AgentBase) -> list[Move]:
    """The moves that make ``add`` callable: Mantle first activates the skill."""
    if agent.__class__.__name__ == "MantleAgent":
        return [Move(calls=[("activate_skill", {"skill": "tools"})])]
    return []


def steps(reply: Reply, kind: str | None = None) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = reply.trace["planTrace"]["steps"]
    return [s for s in found if kind is None or s["type"] == kind]
