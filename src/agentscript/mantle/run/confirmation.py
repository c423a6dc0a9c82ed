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

A yes runs only the call the user was shown. The question is a response rendered from memory,
as every Mantle response is, so a call the model makes is held only when each argument that
names a memory entry (as a bare ``{placeholder}`` reads it: the skill's entry, then the
project's) equals that entry's value; otherwise it is refused and nothing is asked. On yes the
call is checked again: a step's arguments are computed anew from memory, a model's are
compared with memory again (and with the running block, which may run that tool itself), and
a call that no longer matches is dropped (``confirmation_dropped``) instead of run: the step
holds it again with a fresh question; the model is told the user must be asked again. A held
step whose arguments change while it waits is dropped and held again at once
(:func:`.blocks.execute_step`).
"""

from __future__ import annotations

from typing import Any

from agentscript.engine.kernel import bounds_problem, read_yes_no
from agentscript.engine.llm import TurnError
from agentscript.mantle.memory import MemoryWriteError, coerce_value, resolve_name, shown
from agentscript.mantle.model import Condition, Skill, Step, Tool, ToolConstraint
from agentscript.mantle.queries import default_evaluator, tool_allowed, tool_constraint
from agentscript.mantle.run.block_pointer import advance, hold
from agentscript.mantle.run.stack import BlockEntry, PendingCall, SkillStack
from agentscript.mantle.run.tool_execution import run_tool
from agentscript.mantle.run.tool_handler import check_arguments
from agentscript.mantle.run.turn_context import TurnContext
from agentscript.not_offered import NotOffered, not_offered_message
from agentscript.trace_steps import (
    ResponseKind,
    Source,
    confirmation_requested,
    confirmation_resolved,
    event_step,
    refused_step,
)

# Said before a question or a denial that ends the turn: the model's text sent with the call
# (S13, as in Agent Script); a no-op when the engine itself resolves the call.

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
    drop(ctx, pending, "its skill is no longer the active one")
    return None


def drop(ctx: TurnContext, pending: PendingCall, reason: str, **fields: Any) -> None:
    """Forget the held call without running it (``EVENT_STEP confirmation_dropped``)."""
    ctx.stack.pending = None
    event_step(
        ctx.trace,
        event="confirmation_dropped",
        node=ctx.node_name(),
        tool=pending["tool"],
        skill=pending["skill"],
        reason=reason,
        **fields,
    )


def step_arguments(skill: Skill, step: Step, memory: dict[str, Any]) -> dict[str, Any]:
    """``parameters`` of an ``execute_tool`` step: ``session.`` values are evaluated."""
    arguments: dict[str, Any] = {}
    for key, value in step.parameters.items():
        if isinstance(value, Condition):
            try:
                arguments[key] = default_evaluator(value, memory)
            except Exception as exc:
                raise TurnError(f"step {step.id} of {skill.id}: parameter {key}: {exc}") from None
        else:
            arguments[key] = value
    return arguments


def checked_arguments(
    ctx: TurnContext, tool: Tool, arguments: dict[str, Any]
) -> tuple[dict[str, Any], str | None]:
    """``arguments`` as ``tool`` is called with them, checked as a model's call is
    (``call_dispatch.call_skill_tool``): fitting the tool's declared parameters
    (``tool_handler.check_arguments``) and within ``Limits`` (size, depth) both as given and
    as converted; else why not. A step's arguments come from memory, and the saved session
    refuses a held call whose arguments a model's call could not have
    (``restore_check._check_pending``)."""
    # As given first, as a model's call is (the type check quotes values); then as held and
    # called: the conversion of an integral float to an int may write an argument longer.
    problem = out_of_bounds(ctx, tool, arguments)
    if problem is not None:
        return {}, problem
    checked, problem = check_arguments(tool, arguments)
    if problem is None:
        problem = out_of_bounds(ctx, tool, checked)
    return ({}, problem) if problem is not None else (checked, None)


def out_of_bounds(ctx: TurnContext, tool: Tool, arguments: dict[str, Any]) -> str | None:
    bound = bounds_problem(tool.name, arguments, ctx.limits)
    if bound is None:
        return None
    reason, field = bound
    return f"{reason} (Limits.{field} = {getattr(ctx.limits, field)})"


def checked_step_arguments(
    ctx: TurnContext, skill: Skill, step: Step, tool: Tool
) -> tuple[dict[str, Any], dict[str, Any], str | None]:
    """The step's arguments as evaluated, the same as ``tool`` is called with them
    (:func:`checked_arguments`), and why they cannot be (None: they can)."""
    arguments = step_arguments(skill, step, ctx.memory)
    checked, problem = checked_arguments(ctx, tool, arguments)
    if problem is not None:
        problem = f"step {step.id} of {skill.id}: {problem}"
    return arguments, checked, problem


def memory_mismatch(ctx: TurnContext, skill_id: str, arguments: dict[str, Any]) -> str | None:
    """Why a model's call does not describe what its confirmation question shows: the first
    argument that names a memory entry (a bare name: the skill's entry, then the project's,
    as a ``{placeholder}`` reads it) with another value than the entry's (None: each agrees).
    Memory values are not quoted: the text reaches the model, and an entry may be private."""
    for name, value in arguments.items():
        entry = resolve_name(ctx.project, name, [skill_id])
        if entry is None:
            continue
        try:
            given = coerce_value(entry, value)
        except MemoryWriteError:
            given = value  # not a value of the entry's type: it cannot be the entry's value
        current = ctx.memory.get(entry.qualified_name)
        if given != current:
            state = "is unset" if current is None else "has another value"
            return (
                f"its argument {name}={shown(value)} is not what the confirmation question "
                f"shows: session.{entry.qualified_name} {state}"
            )
    return None


def held_step(ctx: TurnContext, pending: PendingCall) -> tuple[Skill, Step] | None:
    """The ``execute_tool`` step that held ``pending``, while its skill's pointer is on it."""
    if pending["source"] != Source.STEP:
        return None
    frame = ctx.stack.find(pending["skill"])
    entry = SkillStack.block(frame) if frame else None
    if entry is None or (entry["block"], entry["step"]) != (pending["block"], pending["step"]):
        return None
    skill = ctx.project.skills[pending["skill"]]
    block = skill.blocks.get(entry["block"])
    step = block.step(entry["step"]) if block and entry["step"] else None
    return None if step is None else (skill, step)


def changed_since_asked(ctx: TurnContext, pending: PendingCall) -> str | None:
    """Why the held call is no longer the one the user was asked about (None: it still is):
    a step's parameters now evaluate to other arguments; a model's call no longer agrees with
    the memory entries its question reads, or is one a running block runs itself."""
    held = held_step(ctx, pending)
    if held is not None:
        skill, step = held
        tool = ctx.project.tools_for(skill.id).get(pending["tool"])
        if tool is None:
            return f"'{pending['tool']}' is not a tool of '{skill.id}'"
        try:
            _, now, problem = checked_step_arguments(ctx, skill, step, tool)
        except TurnError as exc:
            return f"memory changed since the user was asked: {exc}"
        if problem is not None:
            return f"memory changed since the user was asked: {problem}"
        if now != pending["arguments"]:
            changed = sorted(
                k
                for k in set(now) | set(pending["arguments"])
                if now.get(k) != pending["arguments"].get(k)
            )
            return (
                f"memory changed since the user was asked: step {step.id} now passes other "
                f"{', '.join(changed)}"
            )
        return None
    if pending["source"] == Source.STEP:
        return None
    # blocks imports this module (block steps hold calls), so its rule is imported here.
    from agentscript.mantle.run.blocks import run_by_block

    frame = ctx.stack.find(pending["skill"])
    owner = ctx.project.skills.get(pending["skill"])
    if frame is not None and owner is not None:
        # Held before the model was kept from calling it (a session saved earlier): the block
        # runs it at its step, so a yes now would run it twice.
        ahead = run_by_block(owner, frame, pending["tool"])
        if ahead is not None:
            return ahead
    if not asks_from_memory(ctx, pending["skill"], pending["tool"]):
        return None  # the model asked in its own words: no rendered question to agree with
    return memory_mismatch(ctx, pending["skill"], pending["arguments"])


def asks_from_memory(ctx: TurnContext, skill_id: str, tool: str) -> bool:
    """Whether the tool's confirmation question is a response (``utter_for_confirmation``),
    rendered from memory; without one the model asks in its own words."""
    constraint = tool_constraint(ctx.project, skill_id, tool)
    gate = constraint.requires_confirmation if constraint else None
    return bool(gate and gate.utter_for_confirmation)


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
    """Hold the call and ask (or have the model ask); an error result when it is not held."""
    waiting = live_pending(ctx)
    if waiting is not None:
        reason = (
            f"a confirmation of '{waiting['tool']}' is waiting for the user's answer; "
            f"'{tool.name}' is not held or run until it is answered"
        )
        if source is Source.STEP and step is not None:
            ctx.refuse_waiting_step(tool.name, reason, skill_id, step)
        else:
            refuse(ctx, tool.name, reason, source, skill_id, arguments)
        return {"error": reason}
    constraint = tool_constraint(ctx.project, skill_id, tool.name)
    gate = constraint.requires_confirmation if constraint else None
    ask = gate.utter_for_confirmation if gate else None
    if source is Source.LLM and ask:
        # The question is rendered from memory: the model's call must be the one it shows.
        mismatch = memory_mismatch(ctx, skill_id, arguments)
        if mismatch is not None:
            reason = (
                f"'{tool.name}' was not held for confirmation: {mismatch}; write the entry "
                "first (set_fields) or pass its value"
            )
            refuse(ctx, tool.name, reason, source, skill_id, arguments)
            return {"error": reason}
    rendered = ctx.render(ask) if ask else None
    question = rendered.text if rendered else None
    if ask and not question:
        reason = f"the confirmation question for '{tool.name}' is empty; the call is not run"
        refuse(ctx, tool.name, reason, source, skill_id, arguments)
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
        ctx.say_unsaid()
        ctx.say(question, ResponseKind.CONFIRMATION, response=ask)
        ctx.result.confirmation = question
        ctx.stop = True
        return {"status": "the user was asked to confirm"}
    return {
        "status": "ask the user to confirm and end your reply; call "
        "resolve_tool_confirmation only after the user answers in their next message"
    }


def asked_in_own_words(ctx: TurnContext, text: str) -> None:
    """The turn's ``confirmation`` when the model asks in its own words (no
    ``utter_for_confirmation``): its answer ending the turn, the question the user was shown,
    while a call held this turn still waits; so a client tells from the turn alone that a
    yes/no is awaited, as with a rendered question (:func:`hold_for_confirmation`)."""
    pending = ctx.stack.pending
    held_now = pending is not None and pending.get("turn") == ctx.state.turn
    if held_now and ctx.result.confirmation is None and text.strip():
        ctx.result.confirmation = text


def refuse(
    ctx: TurnContext,
    name: str,
    reason: str,
    source: Source,
    skill_id: str,
    arguments: dict[str, Any] | None = None,
    cause: NotOffered | None = None,
) -> None:
    refused_step(
        ctx.trace,
        name=name,
        reason=reason,
        node=ctx.node_name(),
        source=source,
        arguments=arguments,
        skill=skill_id,
        cause=cause,
    )


async def resolve(ctx: TurnContext, confirmed: bool, *, via: Source) -> dict[str, Any]:
    """Apply the answer to the pending call (``via``: ``user`` or ``llm``)."""
    pending = ctx.stack.pending
    assert pending is not None
    name = pending["tool"]
    # The user answered without the model: the history shows the call the engine made.
    call = ctx.engine_call("confirm", name, pending["arguments"]) if via is Source.USER else None
    result = await answer(ctx, pending, confirmed, via)
    if call is not None:
        ctx.answer(call, result)
        ctx.close_calls()
    return result


async def answer(
    ctx: TurnContext,
    pending: PendingCall,
    confirmed: bool,
    via: Source,
) -> dict[str, Any]:
    skill_id, name = pending["skill"], pending["tool"]
    changed = changed_since_asked(ctx, pending) if confirmed else None
    if changed is not None:
        # A yes to a question that no longer describes the call: nothing runs. A step's
        # call is held again, with a fresh question, when the block reaches the step again
        # (the same turn); a model's call must be made again.
        drop(ctx, pending, changed, confirmed=True, via=via.value)
        again = (
            "the question is asked again"
            if pending["source"] == Source.STEP
            else "the user must be asked again before it runs"
        )
        return {"error": f"'{name}' was not run: {changed}; {again}"}
    ctx.stack.pending = None
    confirmation_resolved(
        ctx.trace, node=ctx.node_name(), skill=skill_id, tool=name, confirmed=confirmed, via=via
    )
    frame = ctx.stack.find(skill_id)
    tool = ctx.project.tools_for(skill_id).get(name)
    held = held_step(ctx, pending)
    entry = SkillStack.block(frame) if frame and held else None
    if frame is None or tool is None:
        return {"error": f"'{name}' cannot run: its skill is no longer on the stack"}
    if not confirmed:
        constraint = tool_constraint(ctx.project, skill_id, name)
        gate = constraint.requires_confirmation if constraint else None
        if entry is not None:
            hold(ctx, entry)
        denial = gate.utter_on_user_denial if gate else None
        if denial and ctx.render(denial):
            ctx.utter(denial, ResponseKind.DENIAL, ends_turn=True)
            ctx.stop = True
        return {"status": f"the user declined; {name} was not run"}
    if not tool_allowed(ctx.project, skill_id, name, ctx.memory):
        # Read by the model like any tool it was not offered; the trace keeps why (S5).
        refuse(
            ctx,
            name,
            f"the requires of '{name}' became false since the call was held",
            via,
            skill_id,
            pending["arguments"],
            NotOffered.HIDDEN,
        )
        return {"error": not_offered_message(name)}
    source = Source.DETERMINISTIC if pending["source"] == Source.STEP else Source.LLM
    # Checked when held; checked again so the tool gets them as it declares them (a call held
    # before steps' arguments were checked, in a session saved then, may hold 2.0 for an int).
    arguments, problem = checked_arguments(ctx, tool, pending["arguments"])
    if problem is not None:
        return refused_when_confirmed(ctx, pending, held, entry, problem, source)
    result, ok = await run_tool(ctx, skill_id, tool, arguments, source, pending.get("step"))
    if held is not None and entry is not None:
        skill, step = held
        block = skill.blocks[entry["block"]]
        if ok:
            advance(ctx, skill, entry, block, step)
        else:
            hold(ctx, entry)
    return result


def refused_when_confirmed(
    ctx: TurnContext,
    pending: PendingCall,
    held: tuple[Skill, Step] | None,
    entry: BlockEntry | None,
    problem: str,
    source: Source,
) -> dict[str, Any]:
    """A confirmed call whose arguments the tool refuses is not run. A step's fails as when
    the step refuses its arguments before holding them (``blocks.arguments_refused``: traced
    with its step, ``on_failure`` said, the step held until memory changes); the error is the
    answer of the call that confirmed it."""
    skill_id, name = pending["skill"], pending["tool"]
    if held is not None and entry is not None:
        # blocks imports this module (block steps hold calls), so its rule is imported here.
        from agentscript.mantle.run.blocks import arguments_refused

        skill, step = held
        problem = f"step {step.id} of {skill.id}: {problem}"
        arguments_refused(
            ctx, skill_id, entry, step, name, pending["arguments"], problem, record_call=False
        )
    else:
        refuse(ctx, name, problem, source, skill_id, pending["arguments"])
    return {"error": f"'{name}' was not run: {problem}"}
