"""Running one project tool in a turn: through the engine's ``ActionRunner`` (stubs first),
with a ``context`` bound to the session's memory, traced as an ``ACTION_STEP``, followed by
the constraint's ``on_success``/``on_failure`` response. Failures are results, never raised.
"""

from __future__ import annotations

import time
from typing import Any

from agentscript.actions.registry import ActionError, ActionRequest
from agentscript.jsonsafe import UnsafeValue, json_safe
from agentscript.mantle.memory import MemoryWriteError, check_write, resolve_name
from agentscript.mantle.model import Project, Tool
from agentscript.mantle.queries import tool_constraint
from agentscript.mantle.run.scopes import readable, refuse_access
from agentscript.mantle.run.tool_handler import MemoryView, ToolContext, failed, tool_target
from agentscript.mantle.run.turn_context import TurnContext
from agentscript.trace import elapsed_ms
from agentscript.trace_steps import ResponseKind, Source, action_step


async def run_tool(
    ctx: TurnContext,
    skill_id: str,
    tool: Tool,
    arguments: dict[str, Any],
    source: Source,
    step_id: str | None = None,
) -> tuple[dict[str, Any], bool]:
    """The tool's result and whether it succeeded."""
    ctx.actions_run.append(tool.name)
    record = action_step(
        ctx.trace,
        name=tool.name,
        action=tool.callable_ref,
        target=tool_target(tool),
        node=ctx.node_name(),
        source=source,
        skill=skill_id,
        step=step_id,
        inputs=dict(arguments),
        pre_vars=ctx.snapshot(),
    )
    inputs = dict(arguments)
    if tool.takes_context:
        inputs["context"] = tool_context(ctx, tool, skill_id)
    started = time.perf_counter()
    error: str | None = None
    request = ActionRequest(tool.name, tool_target(tool), inputs)
    try:
        result = await ctx.runner.run(request, timeout=tool_timeout(ctx.project))
    except ActionError as exc:
        error = str(exc)
        result = {"error": error}
    else:
        try:
            result = json_safe(result, max_chars=ctx.limits.max_output_chars)
        except UnsafeValue as exc:
            error = (
                f"tool '{tool.name}' returned a result larger than Limits.max_output_chars "
                f"({ctx.limits.max_output_chars} characters)"
                if exc.too_large
                else f"tool '{tool.name}' returned a result that is not JSON: {exc}"
            )
            result = {"error": error}
    if request.printed:
        record["printed"] = request.printed
    ok = error is None and not failed(result)
    record.update(
        output=result, error=error, postVars=ctx.snapshot(), durationMs=elapsed_ms(started)
    )
    constraint = tool_constraint(ctx.project, skill_id, tool.name)
    if constraint is not None:
        ctx.utter(constraint.on_success if ok else constraint.on_failure, ResponseKind.UTTER)
    return result, ok


DEFAULT_TOOL_TIMEOUT = 10.0  # seconds: Mantle's documented default for ``tool_timeout``


def tool_timeout(project: Project) -> float:
    """``tool_timeout`` of agent.yml, else the documented 10 seconds."""
    configured = project.agent.tool_timeout
    return DEFAULT_TOOL_TIMEOUT if configured is None else configured


def tool_context(ctx: TurnContext, tool: Tool, skill_id: str) -> ToolContext:
    """``context``: bare names look in the tool's skill, the active skill, then ``project``."""
    namespaces = [ns for ns in (tool.owner, skill_id) if ns]
    reader = tool.owner or skill_id  # a shared tool acts for the active skill

    def read(name: str) -> Any:
        entry = resolve_name(ctx.project, name, namespaces)
        if entry is None:
            return None
        if not readable(entry, reader):
            refuse_access(
                ctx.trace,
                entry.qualified_name,
                reader,
                "read",
                "tool",
                node=ctx.node_name(),
                tool=tool.name,
            )
            return None
        return ctx.memory.get(entry.qualified_name)

    def write(name: str, value: Any) -> None:
        entry = resolve_name(ctx.project, name, namespaces)
        if entry is None:
            raise MemoryWriteError(f"'{name}' is not a declared memory entry")
        if not readable(entry, reader):
            raise MemoryWriteError(
                refuse_access(
                    ctx.trace,
                    entry.qualified_name,
                    reader,
                    "write",
                    "tool",
                    node=ctx.node_name(),
                    tool=tool.name,
                )
            )
        ctx.write(entry.qualified_name, check_write(entry, ctx.memory, value))

    def send(text: str) -> None:
        ctx.say(text, ResponseKind.TOOL)

    return ToolContext(MemoryView(read, write), send)
