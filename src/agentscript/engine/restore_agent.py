"""Checking a saved Agent Script session against its agent (see :mod:`.restore`).

Every declared variable present with a value of its declared type (linked ones included) and
nothing else; the current and resume subagents exist; a pending confirmation names a tool of
its subagent that requires confirmation, with arguments the tool accepts; nothing in
``extra`` (Agent Script keeps no extension state).
"""

from __future__ import annotations

from typing import Any

from agentscript.engine.procedures import coerce_declared
from agentscript.engine.program import Program
from agentscript.engine.restore import Checker
from agentscript.engine.state import PendingConfirmation
from agentscript.expr.values import TypeMismatch


def agent_shape(program: Program) -> dict[str, Any]:
    """What a saved session depends on: variables and their types, subagents and their
    tools, action definitions. Prompt text may change without breaking saved sessions."""
    outline = program.outline
    return {
        "variables": {
            name: [info.modifier, info.type] for name, info in sorted(outline.variables.items())
        },
        "nodes": {
            name: {
                tool_name: [tool.kind, sorted(tool.parameters)]
                for tool_name, tool in sorted(node.tools.items())
            }
            for name, node in sorted(program.nodes.items())
        },
    }


def check_agent_state(program: Program, c: Checker, payload: dict[str, Any]) -> dict[str, Any]:
    """The checked variables; raises SessionRestoreError at the first problem."""
    declared = program.outline.variables

    def coerce(name: str, value: Any) -> Any:
        try:
            return coerce_declared(value, declared[name].type)
        except TypeMismatch as exc:
            raise ValueError(f"{declared[name].type}: {exc.message}") from None

    variables = c.variables(payload["variables"], {n: v.type for n, v in declared.items()}, coerce)
    for field in ("current_node", "resume_node"):
        value = payload.get(field)
        if value is not None:
            c.one_of(value, field, program.nodes)
    pending = payload.get("pending_confirmation")
    if pending is not None:
        check_pending(program, c, pending)
    if payload.get("extra"):
        c.fail("extra", "Agent Script sessions keep no extension state")
    return variables


def check_pending(program: Program, c: Checker, raw: Any) -> PendingConfirmation:
    where = "pending_confirmation"
    data = c.mapping(raw, where)
    fields = {"node", "tool", "call_id", "arguments"}
    c.keys(data, where, fields, fields)
    node = program.nodes[c.one_of(data["node"], f"{where}.node", program.nodes)]
    tool = node.tools[c.one_of(data["tool"], f"{where}.tool", node.tools)]
    if not tool.requires_confirmation:
        c.fail(f"{where}.tool", f"'{tool.name}' does not ask for confirmation")
    call_id = c.string(data["call_id"], f"{where}.call_id")
    arguments = c.mapping(data["arguments"], f"{where}.arguments")
    for name, value in arguments.items():
        param = tool.parameters.get(name)
        if param is None:
            c.fail(f"{where}.arguments.{name}", f"'{tool.name}' has no such argument")
        try:
            coerce_declared(value, param.type)
        except TypeMismatch as exc:
            c.fail(f"{where}.arguments.{name}", exc.message)
    return PendingConfirmation(node.name, tool.name, call_id or "", arguments)
