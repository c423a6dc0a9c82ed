"""Tool calls that wait for the user's yes/no (``requires_confirmation``, M5).

A held call is kept in the stack's ``pending`` slot; the question is said (ending the turn)
or left to the model. The answer comes as a plain yes/no from the user or through
``resolve_tool_confirmation``; on yes ``requires`` is checked again and the call runs.

Only the user can answer: the slot records the turn that held the call, and nothing resolves
it before a later turn (the model cannot confirm its own call). It belongs to the skill that
held it while that skill is the active one: when the skill is paused (interrupt), parked or
gone, the call is dropped (the user's next "yes" answers something else), and a held
``execute_tool`` step holds it again, asking again, when its skill resumes. One slot: a second
gated call while one waits is refused, never swapped in.
"""

from __future__ import annotations

from typing import Any

from agentscript.engine.kernel import read_yes_no
from agentscript.mantle.model import Tool, ToolConstraint
from agentscript.mantle.queries import tool_allowed, tool_constraint
from agentscript.mantle.run.block_pointer import advance, hold
from agentscript.mantle.run.stack import PendingCall, SkillStack
from agentscript.mantle.run.tool_execution import run_tool
from agentscript.mantle.run.turn_context import TurnContext
from agentscript.trace_steps import (
    ResponseKind,
    Source,
    confirmation_requested,
    confirmation_resolved,
    event_step,
    refused_step,
)

# The user's plain yes/no (None when the answer needs the model to interpret): the kernel's
# rule, the same as Agent Script's.
yes_no = read_yes_no


def needs_confirmation(constraint: ToolConstraint | None) -> bool:
    gate = constraint.requires_confirmation if constraint else None
    return gate is not None and gate.enabled


def live_pending(ctx: TurnContext) -> PendingCall | None:
    """The held call, dropped first when its skill is not the active one any more."""
    pending = ctx.stack.pending
    if pending is None:
        return None
    frame = ctx.stack.active()
    if frame is not None and frame["skill"] == pending["skill"]:
        return pending
    ctx.stack.pending = None
    event_step(
        ctx.trace,
        event="confirmation_dropped",
        node=ctx.node_name(),
        tool=pending["tool"],
        skill=pending["skill"],
        reason="its skill is no longer the active one",
    )
    return None


def answerable(ctx: TurnContext, pending: PendingCall) -> bool:
    """Whether the user has had a turn to answer: never in the turn that held the call."""
    held = pending.get("turn")
    return held is None or held < ctx.state.turn


def hold_for_confirmation(
    ctx: TurnContext,
    skill_id: str,
    tool: Tool,
    arguments: dict[str, Any],
    *,
    source: Source,
    block: str | None = None,
    step: str | None = None,
) -> dict[str, Any]:
    waiting = live_pending(ctx)
    if waiting is not None:
        reason = (
            f"a confirmation of '{waiting['tool']}' is waiting for the user's answer; "
            f"'{tool.name}' is not held or run until it is answered"
        )
        if source is Source.STEP and step is not None:
            ctx.refuse_waiting_step(tool.name, reason, skill_id, step)
        else:
            refused_step(
                ctx.trace, name=tool.name, reason=reason, node=ctx.node_name(), source=source
            )
        return {"error": reason}
    constraint = tool_constraint(ctx.project, skill_id, tool.name)
    gate = constraint.requires_confirmation if constraint else None
    ask = gate.utter_for_confirmation if gate else None
    rendered = ctx.render(ask) if ask else None
    question = rendered.text if rendered else None
    if ask and not question:
        reason = f"the confirmation question for '{tool.name}' is empty; the call is not run"
        refused_step(ctx.trace, name=tool.name, reason=reason, node=ctx.node_name(), source=source)
        return {"error": reason}
    ctx.stack.pending = {
        "skill": skill_id,
        "tool": tool.name,
        "arguments": arguments,
        "source": source.value,  # plain JSON in the saved session
        "block": block,
        "step": step,
        "turn": ctx.state.turn,
    }
    confirmation_requested(
        ctx.trace,
        node=ctx.node_name(),
        skill=skill_id,
        tool=tool.name,
        arguments=arguments,
        source=source,
    )
    if question:
        ctx.say(question, ResponseKind.CONFIRMATION, response=ask)
        ctx.result.confirmation = question
        ctx.stop = True
        return {"status": "the user was asked to confirm"}
    return {
        "status": "ask the user to confirm and end your reply; call "
        "resolve_tool_confirmation only after the user answers in their next message"
    }


async def resolve(ctx: TurnContext, confirmed: bool, *, via: Source) -> dict[str, Any]:
    """Apply the answer to the pending call (``via``: ``user`` or ``llm``)."""
    pending = ctx.stack.pending
    assert pending is not None
    ctx.stack.pending = None
    skill_id, name = pending["skill"], pending["tool"]
    confirmation_resolved(
        ctx.trace, node=ctx.node_name(), skill=skill_id, tool=name, confirmed=confirmed, via=via
    )
    frame = ctx.stack.find(skill_id)
    tool = ctx.project.tools_for(skill_id).get(name)
    entry = SkillStack.block(frame) if frame else None
    from_step = (
        pending["source"] == "step"
        and entry is not None
        and entry["block"] == pending["block"]
        and entry["step"] == pending["step"]
    )
    # The user answered without the model: the history shows the call the engine made.
    call = ctx.engine_call("confirm", name, pending["arguments"]) if via is Source.USER else None
    result: dict[str, Any]
    if frame is None or tool is None:
        result = {"error": f"'{name}' cannot run: its skill is no longer on the stack"}
    elif not confirmed:
        result = {"status": f"the user declined; {name} was not run"}
        constraint = tool_constraint(ctx.project, skill_id, name)
        gate = constraint.requires_confirmation if constraint else None
        if from_step and entry is not None:
            hold(ctx, entry)
        denial = gate.utter_on_user_denial if gate else None
        if denial and ctx.render(denial):
            ctx.utter(denial, ResponseKind.DENIAL)
            ctx.stop = True
    elif not tool_allowed(ctx.project, skill_id, name, ctx.memory):
        result = {"error": f"tool '{name}' is not available now"}
        refused_step(ctx.trace, name=name, reason=result["error"], node=ctx.node_name(), source=via)
    else:
        source = Source.DETERMINISTIC if pending["source"] == Source.STEP else Source.LLM
        result, ok = await run_tool(
            ctx, skill_id, tool, dict(pending["arguments"]), source, pending.get("step")
        )
        if from_step and entry is not None:
            skill = ctx.project.skills[skill_id]
            block = skill.blocks[entry["block"]]
            step = block.step(entry["step"])
            if ok and step is not None:
                advance(ctx, skill, entry, block, step)
            else:
                hold(ctx, entry)
    if call is not None:
        ctx.answer(call, result)
        ctx.close_calls()
    return result
