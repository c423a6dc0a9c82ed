"""Checking a saved Agent Script session against its agent (see :mod:`.restore`).

Every declared variable present with a value of its declared type (linked ones included) and
nothing else; the current and resume subagents exist; a pending confirmation names a tool of
its subagent that requires confirmation, with arguments the tool accepts; nothing in
``extra`` (Agent Script keeps no extension state).
"""

from __future__ import annotations

from typing import Any

from agentscript.engine.kernel import bounds_problem
from agentscript.engine.procedures import coerce_declared
from agentscript.engine.program import Program
from agentscript.engine.restore import Checker, check_usage
from agentscript.engine.state import PendingConfirmation
from agentscript.expr.values import TypeMismatch, coerce_to_type


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
        # the arguments as the held call keeps them (coerced), as a live call's are
        payload["pending_confirmation"] = check_pending(program, c, pending).to_json()
    extra = c.mapping(payload.get("extra", {}), "extra")
    c.keys(extra, "extra", {"usage"}, set())
    check_usage(c, extra)
    return variables


def check_pending(program: Program, c: Checker, raw: Any) -> PendingConfirmation:
    """The held call, its arguments checked as the model's call was before it was held
    (``ToolCalls.check_arguments``: only declared ones, within the size and depth bounds of
    ``c.limits``, required ones present, each of its declared type) and coerced the same way,
    so a "yes" runs only a call the model could have made."""
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
    for name in arguments:
        if name not in tool.parameters:
            c.fail(f"{where}.arguments.{name}", f"'{tool.name}' has no such argument")
    bound = bounds_problem(tool.name, arguments, c.limits)
    if bound is not None:
        reason, field = bound
        c.fail(f"{where}.arguments", f"{reason} (Limits.{field} = {getattr(c.limits, field)})")
    checked: dict[str, Any] = {}
    for name, param in tool.parameters.items():
        value = arguments.get(name)
        if value is None:
            if param.required:
                c.fail(f"{where}.arguments.{name}", f"missing: '{tool.name}' requires it")
            continue
        try:
            checked[name] = coerce_to_type(value, param.type)
        except TypeMismatch as exc:
            c.fail(f"{where}.arguments.{name}", exc.message)
    return PendingConfirmation(node.name, tool.name, call_id or "", checked)
