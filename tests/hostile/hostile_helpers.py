"""Shared helpers of the hostile-input tests: load the test agents, drive sessions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import agentscript
from agentscript.actions.registry import ActionFunction
from agentscript.engine.session import AgentBase, Reply, Session
from agentscript.limits import Limits
from agentscript.models.scripted import ScriptedModel, parse_move

AGENTS = Path(__file__).parent / "agents"


def load_agent(name: str) -> AgentBase:
    return agentscript.load(AGENTS / f"{name}.agent")


class Driven:
    """A session whose model moves are given per turn."""

    def __init__(
        self,
        agent: AgentBase,
        *,
        actions: dict[str, ActionFunction] | None = None,
        limits: Limits | None = None,
    ) -> None:
        self.model = ScriptedModel()
        self.session: Session = agent.session(model=self.model, actions=actions, limits=limits)

    def send(self, text: str, *moves: dict[str, Any]) -> Reply:
        self.model.begin_turn([parse_move(m) for m in moves])
        return self.session.send(text)


def steps(reply: Reply, kind: str) -> list[dict[str, Any]]:
    return [s for s in reply.trace["planTrace"]["steps"] if s["type"] == kind]
