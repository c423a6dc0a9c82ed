"""agentscript: an open runtime for deterministic-first LLM agents.

>>> import agentscript
>>> agent = agentscript.load("examples/order_status/order_status.agent")
>>> session = agent.session(model=agentscript.ScriptedModel())
"""

from agentscript.diagnostics import AgentScriptError, Diagnostic, Severity, Span
from agentscript.engine.session import Agent, AgentBase, Reply, Session
from agentscript.errors import RunFailure, SessionRestoreError, UsageError
from agentscript.limits import Limits
from agentscript.loader import load
from agentscript.models.scripted import ScriptedModel
from agentscript.syntax import parse

__all__ = [
    "Agent",
    "AgentBase",
    "AgentScriptError",
    "Diagnostic",
    "Limits",
    "Reply",
    "RunFailure",
    "ScriptedModel",
    "Session",
    "SessionRestoreError",
    "Severity",
    "Span",
    "UsageError",
    "load",
    "parse",
]
