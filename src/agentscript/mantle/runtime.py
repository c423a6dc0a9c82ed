"""Mantle projects on the engine's API: ``agentscript.load(folder)`` returns a
:class:`MantleAgent`, whose sessions are ordinary :class:`~agentscript.Session` objects
(``send``, ``Reply``, traces, ``to_json``/``restore``, conversation files) with Mantle turns.

>>> agent = agentscript.load("examples/card_bank")
>>> session = agent.session(model=model, variables={"project.authenticated": True})
>>> session.send("I lost my card").variables["card_replace.reason"]
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from agentscript.actions.registry import ActionRunner
from agentscript.actions.settings import ActionConfigError, ActionSettings
from agentscript.diagnostics import AgentScriptError
from agentscript.engine.restore import Checker
from agentscript.engine.session import AgentBase, TurnRunnerLike
from agentscript.engine.state import SessionState
from agentscript.limits import Limits
from agentscript.mantle.load.isolation import check_isolation
from agentscript.mantle.load.lifecycle import install_builtin_responses
from agentscript.mantle.load.loader import load_project
from agentscript.mantle.memory import seeded_memory
from agentscript.mantle.model import Project
from agentscript.mantle.restore_check import check_mantle_state, project_shape
from agentscript.mantle.run.orchestrator import MantleTurnRunner
from agentscript.mantle.run.prompt import response_text
from agentscript.mantle.run.tool_handler import mantle_handlers
from agentscript.mantle.run.turn_context import TurnContext
from agentscript.models.base import Model
from agentscript.trace import TurnTrace


class MantleAgent(AgentBase):
    """A loaded skill project, ready to start sessions (same API as an ``.agent`` agent)."""

    def __init__(self, project: Project, *, name: str | None = None) -> None:
        root = Path(project.root)
        super().__init__(path=root, name=name or project.agent.id or root.name)
        self.project = project
        install_builtin_responses(project)
        self.handlers.update(mantle_handlers(project))

    def load_action_settings(self) -> ActionSettings:
        """The ``[actions]`` table, refused (``ActionConfigError``, which ``agentscript.load``
        reports as a ``config-error``) when the project's tools cannot run under it:
        ``"process"`` isolation (:mod:`agentscript.mantle.load.isolation`). ``load_project``
        reports the same for ``load`` and ``validate``; this covers an agent built from a
        project directly, which reads the table at its first session."""
        settings = super().load_action_settings()
        try:
            check_isolation(self.project, settings)
        except ActionConfigError:
            self._action_settings = None  # not kept: the next session reads and refuses it again
            raise
        return settings

    def new_turn(
        self,
        state: SessionState,
        runner: ActionRunner,
        trace: TurnTrace,
        text: str,
        *,
        model: Model,
        limits: Limits,
        stream: Callable[[str], None] | None,
    ) -> TurnRunnerLike:
        return MantleTurnRunner(
            TurnContext(self.project, state, runner, trace, text, model, limits, stream)
        )

    def initial_variables(self, given: Mapping[str, Any]) -> dict[str, Any]:
        """Every memory entry by qualified name (initial values, then ``given``, type-checked)."""
        return seeded_memory(self.project, given)

    def state_shape(self) -> Any:
        return project_shape(self.project)

    def check_saved(self, checker: Checker, payload: dict[str, Any]) -> dict[str, Any]:
        return check_mantle_state(self.project, checker, payload)

    def welcome(self, variables: Mapping[str, Any]) -> str:
        """``conversation.welcome`` of agent.yml: a response name or literal text."""
        welcome = self.project.agent.conversation.get("welcome")
        if not isinstance(welcome, str):
            return ""
        if welcome in self.project.responses:
            return response_text(self.project, welcome, variables, None) or ""
        return welcome


def load_mantle_agent(
    path: str | os.PathLike[str], *, stub_missing_tools: bool = False
) -> MantleAgent:
    """Load a skill project; raise :class:`AgentScriptError` with every diagnostic on errors.

    ``stub_missing_tools`` replaces tools whose code is missing by stubs (see
    :func:`agentscript.mantle.load_project`), so a conversation file can drive the project.
    """
    project, diagnostics = load_project(path, stub_missing_tools=stub_missing_tools)
    if project is None or any(d.is_error for d in diagnostics):
        raise AgentScriptError(diagnostics, str(path))
    return MantleAgent(project)
