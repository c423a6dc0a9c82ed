"""The executable agent: the checker's outline lowered to what the engine needs at run time.

Built once per loaded agent and shared by all its sessions: tools with their JSON schemas and
compiled guards, the tool-name map that ``{!@actions.x}`` renders, collect slots, model
settings. Expressions are compiled lazily and memoised (``Program.compiled``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from agentscript.check.outline import (
    ActionDef,
    AgentOutline,
    ParamInfo,
    SubagentInfo,
    ToolBinding,
    action_name_in,
)
from agentscript.expr.evaluate import Compiled, compile_expr
from agentscript.expr.nodes import EllipsisExpr, Expr, Literal, reference_path
from agentscript.expr.printer import print_expr
from agentscript.models.base import ToolSpec
from agentscript.syntax.interpolation import literal_parts
from agentscript.syntax.tree import (
    Block,
    CollectStmt,
    IfStmt,
    RunStmt,
    Template,
    TemplatePart,
)

NODE_NAMESPACES = frozenset({"subagent", "topic", "start_agent", "connected_subagent"})

_JSON_TYPES: dict[str, dict[str, Any]] = {
    "string": {"type": "string"},
    "id": {"type": "string"},
    "number": {"type": "number"},
    "currency": {"type": "number"},
    "integer": {"type": "integer"},
    "long": {"type": "integer"},
    "boolean": {"type": "boolean"},
    "object": {"type": "object"},
    "date": {"type": "string", "format": "date"},
    "datetime": {"type": "string", "format": "date-time"},
    "timestamp": {"type": "string", "format": "date-time"},
    "time": {"type": "string", "format": "time"},
}
_LIST = re.compile(r"list\s*\[\s*(\w+)\s*\]", re.IGNORECASE)


def json_schema_of(type_name: str) -> dict[str, Any]:
    """The JSON schema of an Agent Script type (``list[number]`` included); ``{}`` (anything)
    for a type it does not know."""
    name = type_name.strip()
    m = _LIST.fullmatch(name)
    if m:
        return {"type": "array", "items": dict(_JSON_TYPES.get(m.group(1).lower(), {}))}
    if name.lower() == "list":
        return {"type": "array"}
    return dict(_JSON_TYPES.get(name.lower(), {}))


def variable_of(target: Expr) -> str | None:
    """The variable a ``@variables.x`` reference names, else None."""
    return _variable_in(reference_path(target))


def _variable_in(path: tuple[str, ...] | None) -> str | None:
    if path is None or len(path) != 2 or path[0] != "variables":
        return None
    return path[1]


def capture_tool_name(node: str) -> str:
    """The tool that records the values a node's ``collect`` statements ask for."""
    return f"capture_{node}_fields"


def humanize(name: str) -> str:
    """``get_order-status`` -> ``Get Order Status``: the description of an undescribed tool."""
    return " ".join(part.capitalize() for part in name.replace("-", "_").split("_") if part)


@dataclass(slots=True)
class Parameter:
    """One argument the LLM may (or must) fill."""

    name: str
    type: str
    description: str | None
    required: bool


class ToolKind(StrEnum):
    """What calling a tool does (the binding's kind, plus the engine's collect tools)."""

    ACTION = "action"  # runs an action, then the binding's callback
    CONNECTED = "connected"  # calls a connected subagent like an action
    TRANSITION = "transition"  # moves to another subagent
    DELEGATE = "delegate"  # runs another subagent and returns its reply
    SET_VARIABLES = "set_variables"  # @utils.setVariables
    ESCALATE = "escalate"  # @utils.escalate
    END_SESSION = "end_session"  # @utils.end_session
    CAPTURE = "capture"  # fills `collect` variables
    CANCEL = "cancel"  # abandons a `collect`
    UNRESOLVED = "unresolved"  # the target could not be resolved: never offered


@dataclass(slots=True)
class ProgramTool:
    """A reasoning action of a node as the engine dispatches it."""

    name: str
    kind: ToolKind
    spec: ToolSpec
    parameters: dict[str, Parameter]
    action: ActionDef | None = None
    target_node: str | None = None
    guard: Expr | None = None
    bound_inputs: dict[str, Expr] = field(default_factory=dict)
    callback: Block | None = None
    # Connected subagents: their `after_response` runs before the binding's callback.
    after_response: Block | None = None

    @property
    def requires_confirmation(self) -> bool:
        return self.action is not None and self.action.require_user_confirmation


@dataclass(slots=True)
class CollectSlot:
    variable: str
    message: Template | Expr | None
    statement: CollectStmt


@dataclass(slots=True)
class ProgramNode:
    name: str
    info: SubagentInfo
    tools: dict[str, ProgramTool]
    # `{!@actions.x}` renders the tool name the LLM sees (binding names, and action
    # definition names mapped to the binding that uses them).
    tool_names: dict[str, str]
    collect_slots: list[CollectSlot]
    model: str | None
    params: dict[str, Any]

    @property
    def actions(self) -> dict[str, ActionDef]:
        return self.info.actions


class Program:
    """The nodes (subagents) of one agent, lowered for the engine, and its compiled
    expressions."""

    def __init__(self, outline: AgentOutline) -> None:
        self.outline = outline
        self.start = outline.start_agent or next(iter(outline.subagents), "")
        self._compiled: dict[Expr, Compiled] = {}
        self._text_parts: dict[Expr, list[TemplatePart]] = {}
        self._paths: dict[Expr, tuple[str, ...] | None] = {}
        self._sources: dict[Expr, str] = {}
        self.nodes: dict[str, ProgramNode] = {
            name: self._node(info) for name, info in outline.subagents.items()
        }

    def compiled(self, expr: Expr) -> Compiled:
        """``expr`` compiled, once per expression node."""
        fn = self._compiled.get(expr)
        if fn is None:
            fn = self._compiled[expr] = compile_expr(expr)
        return fn

    def path_of(self, expr: Expr) -> tuple[str, ...] | None:
        """:func:`reference_path` of ``expr``, once per expression node (``run`` and ``set``
        targets are looked up on every statement run)."""
        try:
            return self._paths[expr]
        except KeyError:
            path = self._paths[expr] = reference_path(expr)
            return path

    def action_of(self, info: SubagentInfo, target: Expr) -> ActionDef | None:
        """The action of subagent ``info`` that a ``run`` target names (:func:`action_name_in`),
        else None, through the memo of :meth:`path_of`."""
        name = action_name_in(self.path_of(target))
        return info.actions.get(name) if name is not None else None

    def variable_of(self, target: Expr) -> str | None:
        """:func:`variable_of`, through the memo of :meth:`path_of`."""
        return _variable_in(self.path_of(target))

    def source(self, expr: Expr) -> str:
        """The canonical source text of ``expr`` (for traces), printed once per node."""
        text = self._sources.get(expr)
        if text is None:
            text = self._sources[expr] = print_expr(expr)
        return text

    def text_parts(self, literal: Literal) -> list[TemplatePart]:
        """A quoted string used as text (``welcome: "Hi {!@variables.name}"``) as template
        parts, so its ``{!expr}`` are filled in like a ``|`` template's. Parsed once."""
        parts = self._text_parts.get(literal)
        if parts is None:
            parts = self._text_parts[literal] = literal_parts(literal) or [str(literal.value)]
        return parts

    def node_of(self, target: Expr | None) -> str | None:
        """The node a ``@subagent.x`` / ``@topic.x`` / ``@start_agent.x`` reference names."""
        path = reference_path(target) if target is not None else None
        if path is None or len(path) != 2 or path[0] not in NODE_NAMESPACES:
            return None
        return path[1]

    # ------------------------------------------------------------------ lowering

    def _node(self, info: SubagentInfo) -> ProgramNode:
        tools: dict[str, ProgramTool] = {}
        tool_names: dict[str, str] = {}
        for binding in info.tools.values():
            tool = self._tool(info, binding)
            tools[tool.name] = tool
            tool_names[binding.name] = tool.name
            if tool.action is not None:
                tool_names.setdefault(tool.action.name, tool.name)
            if tool.target_node is not None:
                tool_names.setdefault(tool.target_node, tool.name)
        for action_name in info.actions:
            tool_names.setdefault(action_name, action_name)
        slots = list(self._collect_slots(info.instructions))
        if slots:
            for tool in self._collect_tools(info, slots):
                tools[tool.name] = tool
                tool_names.setdefault(tool.name, tool.name)
        model = self.outline.model_config.model if self.outline.model_config else None
        params: dict[str, Any] = (
            dict(self.outline.model_config.params) if self.outline.model_config else {}
        )
        if info.model_config is not None:
            model = info.model_config.model or model
            params.update(info.model_config.params)
        return ProgramNode(info.name, info, tools, tool_names, slots, model, params)

    def _tool(self, info: SubagentInfo, binding: ToolBinding) -> ProgramTool:
        kind = ToolKind(binding.kind or ToolKind.UNRESOLVED)
        after_response: Block | None = None
        action = info.actions.get(binding.target or "") if kind == "action" else None
        target_node = binding.target if kind in ("transition", "delegate") else None
        bound = {k: v for k, v in binding.inputs.items() if not isinstance(v, EllipsisExpr)}
        llm_filled = [k for k, v in binding.inputs.items() if isinstance(v, EllipsisExpr)]
        parameters: dict[str, Parameter] = {}
        description = binding.description
        if kind == "action" and action is not None:
            for name, param in action.inputs.items():
                unbound_required = (
                    name not in bound and param.default is None and bool(param.is_required)
                )
                if name in llm_filled or unbound_required:
                    parameters[name] = _parameter(param, required=True)
            description = description or action.description
        elif kind == "connected":
            connected = self.outline.connected_subagents.get(binding.target or "")
            if connected is not None:
                for name, param in connected.inputs.items():
                    if name in llm_filled or (name not in bound and param.default is None):
                        parameters[name] = _parameter(param, required=True)
                description = description or connected.description
                # Called like an action: its target (agent://...) goes through stubs and
                # handlers, its `= value` input defaults are bound inputs.
                action = ActionDef(
                    connected.name,
                    connected.target,
                    connected.span,
                    description=connected.description,
                    label=connected.label,
                    inputs=dict(connected.inputs),
                )
                after_response = connected.after_response
        elif kind == "set_variables":
            for name in llm_filled:
                variable = self.outline.variables.get(name)
                parameters[name] = Parameter(
                    name,
                    variable.type if variable else "object",
                    variable.description if variable else None,
                    required=False,
                )
        elif kind in ("transition", "delegate"):
            target = self.outline.subagents.get(target_node or "")
            if target is not None:
                description = description or target.description
        elif kind == "escalate":
            description = description or "Escalate to a human agent"
        elif kind == "end_session":
            description = description or "End the session"
        spec = ToolSpec(
            binding.name,
            description or humanize(binding.name),
            _schema(parameters),
        )
        return ProgramTool(
            binding.name,
            kind,
            spec,
            parameters,
            action=action,
            target_node=target_node,
            guard=binding.guard,
            bound_inputs=bound,
            callback=binding.body,
            after_response=after_response,
        )

    def _collect_slots(self, instructions: object) -> Iterator[CollectSlot]:
        if not isinstance(instructions, Block):
            return
        for stmt in walk_statements(instructions):
            if isinstance(stmt, CollectStmt):
                variable = variable_of(stmt.target)
                if variable is None:
                    continue
                message: Template | Expr | None = None
                if stmt.body is not None:
                    entry = stmt.body.get("message")
                    if entry is not None and entry.value is not None:
                        value = entry.value
                        message = (
                            value if isinstance(value, Template) else getattr(value, "expr", None)
                        )
                yield CollectSlot(variable, message, stmt)

    def _collect_tools(self, info: SubagentInfo, slots: list[CollectSlot]) -> list[ProgramTool]:
        parameters = {}
        for slot in slots:
            variable = self.outline.variables.get(slot.variable)
            parameters[slot.variable] = Parameter(
                slot.variable,
                variable.type if variable else "string",
                variable.description if variable else None,
                required=False,
            )
        capture_name = capture_tool_name(info.name)
        cancel_name = f"cancel_{info.name}_collect"
        capture = ProgramTool(
            capture_name,
            ToolKind.CAPTURE,
            ToolSpec(
                capture_name,
                "Record the values the user gave for the requested fields",
                _schema(parameters),
            ),
            parameters,
        )
        cancel = ProgramTool(
            cancel_name,
            ToolKind.CANCEL,
            ToolSpec(
                cancel_name, "Stop collecting these fields when the user wants something else"
            ),
            {},
            target_node=self.start,
        )
        return [capture, cancel]


def _parameter(param: ParamInfo, *, required: bool) -> Parameter:
    return Parameter(param.name, param.type, param.description or param.label, required)


def _schema(parameters: dict[str, Parameter]) -> dict[str, Any]:
    properties: dict[str, Any] = {}
    for p in parameters.values():
        schema = json_schema_of(p.type)
        if p.description:
            schema["description"] = p.description
        properties[p.name] = schema
    return {
        "type": "object",
        "properties": properties,
        "required": [p.name for p in parameters.values() if p.required],
        "additionalProperties": False,
    }


def walk_statements(block: Block) -> Iterator[object]:
    """Every statement of ``block``, those nested in `if` branches and `run` bodies included."""
    for item in block.items:
        yield item
        if isinstance(item, IfStmt):
            yield from walk_statements(item.body)
            for clause in item.else_ifs:
                yield from walk_statements(clause.body)
            if item.else_clause is not None:
                yield from walk_statements(item.else_clause.body)
        elif isinstance(item, RunStmt) and item.body is not None:
            yield from walk_statements(item.body)
