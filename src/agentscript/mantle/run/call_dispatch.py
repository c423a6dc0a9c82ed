"""The model's tool calls (M5, M6): each goes through the gates before anything runs.

Engine tools go to their handlers; a skill tool must belong to the active skill, must not be
run by a block of that skill that is running (M3), its ``requires`` must hold, its arguments
must fit its schema, and a confirmation gate holds it for the user. Everything else is refused
with a ``REFUSED_STEP`` and an error result, and every call gets its answer in the history.

The model's text sent with its calls stays in the history with them. When a call ends the
turn with a question or a denial the engine says (a confirmation), that text is said first
(``RESPONSE_STEP`` kind ``llm``), as Agent Script does (S13): no text answer follows, so it
is the model's last word to the user, and the history already has it in that order.
"""

from __future__ import annotations

from typing import Any

from agentscript.engine.kernel import bounds_problem
from agentscript.mantle.queries import tool_allowed, tool_constraint
from agentscript.mantle.run import hooks
from agentscript.mantle.run import prompt as p
from agentscript.mantle.run.blocks import run_by_block
from agentscript.mantle.run.confirmation import (
    answerable,
    hold_for_confirmation,
    live_pending,
    needs_confirmation,
    resolve,
)
from agentscript.mantle.run.skill_control import HANDLERS, withheld
from agentscript.mantle.run.tool_execution import run_tool
from agentscript.mantle.run.tool_handler import check_arguments
from agentscript.mantle.run.turn_context import TurnContext
from agentscript.models.base import ModelResponse, ToolCall
from agentscript.not_offered import NotOffered, not_offered_message
from agentscript.trace_steps import Source, refused_step


async def dispatch(ctx: TurnContext, response: ModelResponse) -> None:
    calls = response.tool_calls
    text = response.text or ""
    ctx.open_calls(text, calls)
    ctx.unsaid = text or None

    most = ctx.limits.max_tool_calls_per_step
    try:
        for index, call in enumerate(calls):
            if index >= most:
                reason = f"more than {most} tool calls in one step"
                result = refuse(ctx, call, reason, limit="max_tool_calls_per_step")
            elif ctx.stop:
                result = refuse(ctx, call, "not run: the turn already ended")
            else:
                result = await call_tool(ctx, call)
            ctx.answer(call, result)
    finally:
        # A call that raised ends the turn; the calls left still get an answer so the
        # history stays valid for the next turn.
        ctx.close_calls("not run: the turn was stopped")


def refuse(
    ctx: TurnContext,
    call: ToolCall,
    reason: str,
    *,
    limit: str | None = None,
    cause: NotOffered | None = None,
) -> dict[str, Any]:
    """Record the refusal of ``call``; the model is told ``reason``, except for a tool it was
    not offered (``cause``), where hidden and unknown read the same to it. ``limit`` names the
    ``Limits`` field of a bound."""
    refused_step(
        ctx.trace,
        name=call.name,
        reason=reason,
        node=ctx.node_name(),
        source=Source.LLM,
        arguments=call.arguments,
        limit=limit,
        skill=ctx.node_name(),
        cause=cause,
    )
    return {"error": reason if cause is None else not_offered_message(call.name)}


async def call_tool(ctx: TurnContext, call: ToolCall) -> dict[str, Any]:
    if call.arguments is None:
        return refuse(
            ctx,
            call,
            f"the arguments of '{call.name}' are not a JSON object: {call.raw_arguments[:200]!r}",
        )
    args = call.arguments
    bound = bounds_problem(call.name, args, ctx.limits)
    if bound is not None:
        return refuse(ctx, call, bound[0], limit=bound[1])
    reason = withheld(ctx, call.name)
    if reason is not None:
        return refuse(ctx, call, reason, cause=NotOffered.HIDDEN)
    handler = HANDLERS.get(call.name)
    since = hooks.mark(ctx)
    if handler is not None:
        result = handler(ctx, args)
        # An activation may have paused or parked the skill holding a confirmation: drop
        # it now, before a later call of this batch could resume that skill and answer it.
        live_pending(ctx)
        if "error" not in result:
            rejected = await hooks.after_writes(ctx, since, engine_made=False)
            result = result if rejected is None else {"error": rejected}
    elif call.name == p.RESOLVE:
        confirmed = args.get("confirmed")
        pending = live_pending(ctx)
        if pending is None:
            result = {"error": "no tool call is waiting for a confirmation"}
        elif not answerable(ctx, pending):
            # The call was held this turn: only the user's answer, in their next message,
            # may resolve it (M5).
            result = {
                "error": f"the user has not answered yet: ask them to confirm "
                f"{pending['tool']} and wait for their next message"
            }
        elif not isinstance(confirmed, bool):
            result = {"error": "resolve_tool_confirmation needs confirmed=true or false"}
        else:
            resolved = await resolve(ctx, confirmed, via=Source.LLM)
            return await with_hooks(ctx, since, resolved)
    else:
        return await with_hooks(ctx, since, await call_skill_tool(ctx, call, args))
    if "error" in result:
        return refuse(ctx, call, str(result["error"]))
    ctx.actions_run.append(call.name)
    return result


async def with_hooks(ctx: TurnContext, since: int, result: dict[str, Any]) -> dict[str, Any]:
    """Run post-write hooks for what the call wrote; a rejection becomes its error."""
    rejected = await hooks.after_writes(ctx, since, engine_made=False)
    return result if rejected is None else {**result, "error": rejected}


async def call_skill_tool(ctx: TurnContext, call: ToolCall, args: dict[str, Any]) -> dict[str, Any]:
    frame = ctx.stack.active()
    if frame is None:
        return refuse(
            ctx, call, f"unknown tool '{call.name}': no skill is active", cause=NotOffered.UNKNOWN
        )
    skill_id = frame["skill"]
    tool = ctx.project.tools_for(skill_id).get(call.name)
    if tool is None:
        return refuse(
            ctx,
            call,
            f"unknown tool '{call.name}' for skill '{skill_id}'",
            cause=NotOffered.UNKNOWN,
        )
    pending = live_pending(ctx)
    if pending is not None and pending["tool"] == call.name:
        # The prompt already says the call waits, so saying it again reveals nothing.
        if answerable(ctx, pending):
            reason = (
                f"'{call.name}' already waits for the user's confirmation; call "
                "resolve_tool_confirmation with their answer"
            )
        else:
            reason = (
                f"'{call.name}' already waits for the user's confirmation: ask them and end "
                "your reply; their answer comes in their next message"
            )
        return refuse(ctx, call, reason)
    if ctx.searched:
        # Hidden like any tool whose gate does not hold: the model reads "not available".
        reason = f"tool '{call.name}' is withheld after a knowledge search"
        return refuse(ctx, call, reason, cause=NotOffered.HIDDEN)
    skill = ctx.project.skills[skill_id]
    running = run_by_block(skill, frame, call.name)
    if running is not None:
        return refuse(ctx, call, running, cause=NotOffered.HIDDEN)
    if not tool_allowed(ctx.project, skill_id, call.name, ctx.memory):
        constraint = tool_constraint(ctx.project, skill_id, call.name)
        gate = constraint.requires.text if constraint and constraint.requires else "?"
        reason = f"the requires of '{call.name}' does not hold (or cannot be evaluated): {gate}"
        return refuse(ctx, call, reason, cause=NotOffered.HIDDEN)
    checked, problem = check_arguments(tool, args)
    if problem is not None:
        return refuse(ctx, call, problem)
    # Bounded again as converted (an integral float becomes an int, which JSON may write
    # longer): these are the arguments held, saved and checked on restore, and run.
    bound = bounds_problem(call.name, checked, ctx.limits)
    if bound is not None:
        return refuse(ctx, call, bound[0], limit=bound[1])
    if needs_confirmation(tool_constraint(ctx.project, skill_id, call.name)):
        return hold_for_confirmation(ctx, skill_id, tool, checked, source=Source.LLM)
    result, _ = await run_tool(ctx, skill_id, tool, checked, Source.LLM)
    return result
