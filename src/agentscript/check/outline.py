"""The agent outline: a resolved summary of a checked file, ready for the engine to build its IR.

Plain dataclasses. Syntax nodes (procedures as :class:`Block`, texts as :class:`Template` or
:class:`Expr`) are passed through untouched so the engine can execute them; everything else is
already resolved to Python values (names, booleans, strings).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from agentscript.diagnostics import Span
from agentscript.expr.nodes import Expr
from agentscript.syntax.tree import Block, Template

BindingKind = Literal[
    "action", "transition", "set_variables", "escalate", "end_session", "delegate", "connected"
]

# Static text of a field: a `|` template or a plain expression (usually a string literal).
Text = Template | Expr


@dataclass(slots=True)
class VariableInfo:
    name: str
    modifier: str | None  # "mutable", "linked" or None
    type: str  # "string", "list[number]", ...
    default: Expr | None
    description: str | None
    span: Span
    label: str | None = None
    # `source: @MessagingSession.Id` as "MessagingSession.Id".
    source: str | None = None
    visibility: str | None = None
    # Every property as a Python value (literals) or the Expr itself (references).
    properties: dict[str, object] = field(default_factory=dict)

    @property
    def is_mutable(self) -> bool:
        return self.modifier == "mutable"

    @property
    def is_linked(self) -> bool:
        return self.modifier == "linked"


@dataclass(slots=True)
class ParamInfo:
    """An action (or connected subagent / connection) input or output."""

    name: str
    type: str
    default: Expr | None
    span: Span
    description: str | None = None
    label: str | None = None
    is_required: bool | None = None
    filter_from_agent: bool = False
    is_displayable: bool = False
    is_user_input: bool = False
    is_used_by_planner: bool | None = None
    properties: dict[str, object] = field(default_factory=dict)


@dataclass(slots=True)
class ActionDef:
    name: str
    target: str | None
    span: Span
    description: str | None = None
    label: str | None = None
    inputs: dict[str, ParamInfo] = field(default_factory=dict)
    outputs: dict[str, ParamInfo] = field(default_factory=dict)
    require_user_confirmation: bool = False
    include_in_progress_indicator: bool = False
    progress_indicator_message: str | None = None
    source: str | None = None

    @property
    def scheme(self) -> str | None:
        if self.target is None or "://" not in self.target:
            return None
        return self.target.split("://", 1)[0].lower()


def action_name_in(path: tuple[str, ...] | None) -> str | None:
    """The ``X`` of an ``@actions.X`` reference path (the only target ``run`` takes: an action
    of its own subagent), else None."""
    if path is None or len(path) != 2 or path[0] != "actions":
        return None
    return path[1]


@dataclass(slots=True)
class ToolBinding:
    """A reasoning action: what the LLM may call from this subagent."""

    name: str
    kind: BindingKind | None  # None when the target could not be resolved (an error)
    span: Span
    # The action definition (kind "action"), target node (transition, delegate) or
    # connected subagent (connected).
    target: str | None = None
    description: str | None = None
    label: str | None = None
    # Every `available when` in order; only the last one applies.
    available_when: list[Expr] = field(default_factory=list)
    # `with p=expr`; an EllipsisExpr value means "the LLM fills it".
    inputs: dict[str, Expr] = field(default_factory=dict)
    # The binding's block: `with`, `set`, `run`, `if`, `transition` run as the callback.
    body: Block | None = None

    @property
    def guard(self) -> Expr | None:
        return self.available_when[-1] if self.available_when else None


@dataclass(slots=True)
class ModelConfigBlock:
    model: str | None = None
    params: dict[str, object] = field(default_factory=dict)


@dataclass(slots=True)
class SubagentInfo:
    name: str
    kind: str  # "start_agent", "subagent" or "topic"
    span: Span
    description: str | None = None
    label: str | None = None
    system_instructions: Text | None = None  # replaces the global system instructions
    strip_salesforce_instructions: bool | None = None
    before_reasoning: Block | None = None
    after_reasoning: Block | None = None
    # A procedure (Block of statements) or static text.
    instructions: Block | Text | None = None
    actions: dict[str, ActionDef] = field(default_factory=dict)
    tools: dict[str, ToolBinding] = field(default_factory=dict)
    model_config: ModelConfigBlock | None = None
    schema: str | None = None  # custom variant URI (`node://...`)
    skills: dict[str, str] = field(default_factory=dict)

    @property
    def is_start(self) -> bool:
        return self.kind == "start_agent"

    @property
    def is_procedure(self) -> bool:
        return isinstance(self.instructions, Block)


@dataclass(slots=True)
class ConnectedSubagentInfo:
    name: str
    span: Span
    target: str | None = None
    label: str | None = None
    description: str | None = None
    loading_text: str | None = None
    inputs: dict[str, ParamInfo] = field(default_factory=dict)
    after_response: Block | None = None
    delegate_escalation: bool = True


@dataclass(slots=True)
class SystemMessages:
    welcome: Text | None = None
    error: Text | None = None


@dataclass(slots=True)
class AgentOutline:
    dialect: str
    variables: dict[str, VariableInfo] = field(default_factory=dict)
    start_agent: str | None = None
    # Every node (start_agent, subagent, topic) by name.
    subagents: dict[str, SubagentInfo] = field(default_factory=dict)
    connected_subagents: dict[str, ConnectedSubagentInfo] = field(default_factory=dict)
    system_instructions: Text | None = None
    strip_salesforce_instructions: bool | None = None
    messages: SystemMessages = field(default_factory=SystemMessages)
    # `config:` as Python values; nested blocks (runtime, file_upload) as dicts.
    config: dict[str, object] = field(default_factory=dict)
    model_config: ModelConfigBlock | None = None
    knowledge: dict[str, object] = field(default_factory=dict)
    language: dict[str, object] = field(default_factory=dict)
    # `connection <name>: escalation_message:` by connection name (said by @utils.escalate).
    escalation_messages: dict[str, Text] = field(default_factory=dict)

    @property
    def reset_to_initial_node(self) -> bool:
        """S1: every utterance starts at start_agent unless the agent turns it off."""
        value = self.config.get("additional_parameter__reset_to_initial_node", True)
        return value is not False

    @property
    def agent_name(self) -> str | None:
        for key in ("developer_name", "agent_name"):
            value = self.config.get(key)
            if isinstance(value, str):
                return value
        return None
