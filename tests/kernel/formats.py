"""One small agent in each format with the same tools, for tests that compare the formats.

Both offer ``add(a: integer)`` (its action fails when ``a`` is 13) and ``audit`` (always
fails); the Agent Script agent runs ``audit`` deterministically in ``add``'s callback, so a
turn can be made to fail in the middle of a tool step in both formats.
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
            add_audited: @actions.add
                with a = ...
                run @actions.audit
    actions:
        add:
            description: "Add"
            target: "flow://Add"
            inputs:
                a: integer
            outputs:
                sum: number
        audit:
            description: "Write an audit record"
            target: "flow://Audit"
"""

TOOLS = '''
def add(a: int) -> dict:
    """Adds.

    Args:
        a: The number.
    """
    return {"sum": a}


def add_audited(a: int) -> dict:
    """Adds, then audits (the audit fails).

    Args:
        a: The number.
    """
    raise RuntimeError("audit service down")
'''

SKILL = """---
name: Tools
description: Exercise tools.
---
Use the tools.
"""


def agent_script(root: Path) -> AgentBase:
    path = root / "kernel.agent"
    path.write_text(AGENT)
    return agentscript.load(path, dialect="agentscript")


def mantle(root: Path) -> AgentBase:
    project = root / "project"
    (project / "skills" / "tools").mkdir(parents=True)
    (project / "agent.yml").write_text("agent:\n  id: kernel\n  persona: You test.\n")
    (project / "skills" / "tools" / "skill.md").write_text(SKILL)
    (project / "skills" / "tools" / "tools.py").write_text(TOOLS)
    return agentscript.load(project)


def session(agent: AgentBase, model: ScriptedModel, **kwargs: Any) -> Session:
    stubs = StubBook.from_data({"add": {"outputs": {"sum": 1}}, "audit": {"error": "down"}})
    return agent.session(model=model, stubs=stubs, **kwargs)


def opening(agent: AgentBase) -> list[Move]:
    """The moves that make ``add`` callable: Mantle first activates the skill."""
    if agent.__class__.__name__ == "MantleAgent":
        return [Move(calls=[("activate_skill", {"skill": "tools"})])]
    return []


def steps(reply: Reply, kind: str | None = None) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = reply.trace["planTrace"]["steps"]
    return [s for s in found if kind is None or s["type"] == kind]
