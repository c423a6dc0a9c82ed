"""Stepping an ordered block (M3, M5, M7): the step under the pointer runs when it needs no
model (``noop``, ``set_memory``, ``action``, ``execute_tool``, ``call``, ``link``) or is
checked when it waits for the user (``collect``, ``instructions``).

The block runs its ``execute_tool`` steps itself, in order: while a block runs, the model is
neither offered nor allowed to call the tools of the ``execute_tool`` steps at or ahead of its
pointer (:func:`run_by_block`), or it could run a step's action early, and the step would then
run it again.
"""

from __future__ import annotations

from typing import Any

from agentscript.engine.llm import TurnError
from agentscript.mantle.memory import MemoryWriteError, check_write, resolve_name
from agentscript.mantle.model import END_STEP, OrderedBlock, Skill, Step, StepKind
from agentscript.mantle.queries import collect_key, holds, tool_allowed, tool_constraint
from agentscript.mantle.run import collect, hooks
from agentscript.mantle.run.block_pointer import advance, advance_past_call, hold, is_held
from agentscript.mantle.run.confirmation import (
    changed_since_asked,
    checked_step_arguments,
    drop,
    hold_for_confirmation,
    needs_confirmation,
)
from agentscript.mantle.run.stack import PARKED, BlockEntry, Frame, SkillStack
from agentscript.mantle.run.tool_execution import run_tool
from agentscript.mantle.run.transitions import (
    finish,
    forget_pending,
    start_refusal,
    start_skill,
)
from agentscript.mantle.run.turn_context import TurnContext
from agentscript.trace_steps import ResponseKind, Source, block_event, refused_step, skill_event


async def block_step(ctx: TurnContext, frame: Frame, skill: Skill, entry: BlockEntry) -> bool:
    """Run or check the step under the pointer; True when something moved."""
    block = skill.blocks.get(entry["block"])
    if block is None:
        frame["blocks"].pop()
        return True
    if entry["step"] is None:
        entry["step"] = block.steps[0].id if block.steps else END_STEP
        block_event(ctx.trace, event="entered", skill=skill.id, block=block.id, step=entry["step"])
    step = block.step(entry["step"]) if entry["step"] != END_STEP else None
    if step is None or step.kind is StepKind.END:
        end_block(ctx, frame, skill, entry)
        return True
    kind = step.kind
    if kind is StepKind.COLLECT:
        if collect_done(ctx, skill, entry, step):
            # The wait at this step is over: if an authored `next:` brings the pointer back,
            # the step is reached anew (asked again, and with ask_before_filling answered
            # again), not passed on the strength of the first answer.
            entry["asked"].pop(step.id, None)
            if entry.get("spoken") == step.id:
                entry["spoken"] = None
            advance(ctx, skill, entry, block, step)
            return True
        if step.ask_before_filling and step.id not in entry["asked"]:
            entry["asked"][step.id] = ctx.state.turn
        collect.ask(ctx, skill, block.id, entry, step)
        return False
    if kind is StepKind.INSTRUCTIONS:
        if step.complete_when is not None and holds(step.complete_when, ctx.memory):
            advance(ctx, skill, entry, block, step)
            return True
        return False
    if kind is StepKind.EXECUTE_TOOL:
        return await execute_step(ctx, skill, entry, block, step)
    if kind is StepKind.CALL:
        return call_step(ctx, frame, skill, step)
    if kind is StepKind.LINK:
        return link_step(ctx, frame, skill, entry, step)
    if kind is StepKind.SET_MEMORY:
        if is_held(ctx, entry, step):
            return False  # a post-write hook rejected it; runs again once memory changes
        since = hooks.mark(ctx)
        set_memory_step(ctx, skill, step)
        if await hooks.after_writes(ctx, since, engine_made=True) is not None:
            hold(ctx, entry)
            return False
    elif kind is StepKind.ACTION:
        ctx.utter(step.action, ResponseKind.ACTION)
    elif kind is not StepKind.NOOP:
        return False
    advance(ctx, skill, entry, block, step)
    return True


def collect_done(ctx: TurnContext, skill: Skill, entry: BlockEntry, step: Step) -> bool:
    key = collect_key(skill.id, step)
    if key is None or ctx.memory.get(key) is None:
        return False
    if not step.ask_before_filling:
        return True
    # Asked first, answered after: a value given before the question does not count.
    asked = entry["asked"].get(step.id)
    return asked is not None and ctx.stack.written_turn(key) > int(asked)


def end_block(ctx: TurnContext, frame: Frame, skill: Skill, entry: BlockEntry) -> None:
    frame["blocks"].pop()
    block_event(ctx.trace, event="completed", skill=skill.id, block=entry["block"], step=END_STEP)
    parent = SkillStack.block(frame)
    if entry["call"] and parent is not None:
        advance_past_call(ctx, skill, parent)
    elif not frame["blocks"] and skill.body_is_single_block:
        finish(ctx, frame, "completed", reason="block reached END")


def set_memory_step(ctx: TurnContext, skill: Skill, step: Step) -> None:
    for name, value in step.set_memory.items():
        entry = resolve_name(ctx.project, name, [skill.id])
        try:
            if entry is None:
                raise MemoryWriteError(f"'{name}' is not a declared memory entry")
            ctx.write(entry.qualified_name, check_write(entry, ctx.memory, value))
        except MemoryWriteError as exc:
            raise TurnError(f"step {step.id} of {skill.id}: {exc}") from None


async def execute_step(
    ctx: TurnContext, skill: Skill, entry: BlockEntry, block: OrderedBlock, step: Step
) -> bool:
    if is_held(ctx, entry, step):
        return False  # failed or declined before; runs again once memory changes
    pending = ctx.stack.pending
    if (
        pending
        and pending["source"] == Source.STEP
        and (pending["skill"], pending["block"], pending["step"]) == (skill.id, block.id, step.id)
    ):
        changed = changed_since_asked(ctx, pending)
        if changed is None:
            return False  # waits for the user's answer
        # The question no longer describes the call: it is held again below, with the
        # arguments and the question memory gives now (a later yes runs only what was shown).
        drop(ctx, pending, changed)
    name = step.execute_tool or ""
    tool = ctx.project.tools_for(skill.id).get(name)
    if tool is None:
        raise TurnError(f"step {step.id} of {skill.id}: tool '{name}' is not available")
    if not tool_allowed(ctx.project, skill.id, name, ctx.memory):
        ctx.refuse_waiting_step(
            name, f"requires of '{name}' does not hold; step {step.id} waits", skill.id, step.id
        )
        return False
    given, arguments, problem = checked_step_arguments(ctx, skill, step, tool)
    if problem is not None:
        arguments_refused(ctx, skill.id, entry, step, tool.name, given, problem)
        return False
    if needs_confirmation(tool_constraint(ctx.project, skill.id, name)):
        hold_for_confirmation(
            ctx, skill.id, tool, arguments, source=Source.STEP, block=block.id, step=step.id
        )
        return False
    since = hooks.mark(ctx)
    result, ok = await run_tool(ctx, skill.id, tool, arguments, Source.DETERMINISTIC, step.id)
    # Deterministic results go into the history so the model can use them.
    ctx.answer(ctx.engine_call("step", tool.name, dict(arguments)), result)
    ctx.close_calls()
    if await hooks.after_writes(ctx, since, engine_made=True) is not None:
        ok = False
    if ok:
        advance(ctx, skill, entry, block, step)
        return True
    hold(ctx, entry)
    return False


def arguments_refused(
    ctx: TurnContext,
    skill_id: str,
    entry: BlockEntry,
    step: Step,
    name: str,
    arguments: dict[str, Any],
    reason: str,
    *,
    record_call: bool = True,
) -> None:
    """The step's arguments are not ones a model's call of the tool could pass: the call is
    neither held nor made (``REFUSED_STEP``, as a model's would be) and the step fails as
    when its tool fails: the model reads the error, ``on_failure`` is said, and the step is
    held until memory changes. ``record_call``: the step's call goes into the history with
    the error; not for a held call confirmed (``confirmation.answer``), where the call that
    answered (the user's, or the model's ``resolve_tool_confirmation``) gets the error."""
    refused_step(
        ctx.trace,
        name=name,
        reason=reason,
        node=ctx.node_name(),
        source=Source.DETERMINISTIC,
        arguments=arguments,
        skill=skill_id,
        step=step.id,
    )
    if record_call:
        ctx.answer(ctx.engine_call("step", name, dict(arguments)), {"error": reason})
        ctx.close_calls()
    constraint = tool_constraint(ctx.project, skill_id, name)
    if constraint is not None:
        ctx.utter(constraint.on_failure, ResponseKind.UTTER)
    hold(ctx, entry)


def call_step(ctx: TurnContext, frame: Frame, skill: Skill, step: Step) -> bool:
    target = step.call or ""
    if target in skill.blocks:
        SkillStack.enter_block(frame, target, call=True)
        return True
    refusal = start_refusal(ctx, target)
    if refusal is not None:
        ctx.refuse_waiting_step(target, f"cannot call '{target}' now: {refusal}", skill.id, step.id)
        return False
    frame["status"] = PARKED
    start_skill(ctx, target, "invoked", via_call=True, invoked_by=skill.id)
    return True


def link_step(ctx: TurnContext, frame: Frame, skill: Skill, entry: BlockEntry, step: Step) -> bool:
    target = step.link or ""
    if target in skill.blocks:
        frame["blocks"].pop()
        block_event(
            ctx.trace, event="completed", skill=skill.id, block=entry["block"], step=step.id
        )
        SkillStack.enter_block(frame, target, call=entry["call"])
        return True
    if target not in ctx.project.skills:
        raise TurnError(f"step {step.id} of {skill.id}: link target '{target}' is unknown")
    # The same gates as a `call:` (M1): a link must not reach a skill routing would not.
    refusal = start_refusal(ctx, target, replacing=frame)
    if refusal is not None:
        ctx.refuse_waiting_step(
            target, f"cannot link to '{target}' now: {refusal}", skill.id, step.id
        )
        return False
    ctx.stack.pop()
    skill_event(ctx.trace, event="completed", skill=skill.id, reason=f"link to {target}")
    forget_pending(ctx, frame)
    start_skill(ctx, target, frame["kind"], via_call=frame["via_call"])
    return True


def run_by_block(skill: Skill, frame: Frame, name: str) -> str | None:
    """Why the model may not call ``name`` now: an ``execute_tool`` step of a block the frame
    runs will run it (None: no step ahead runs it). Ahead means the step under a pointer and
    every step a ``next:`` (any branch), a fall-through or a ``call:``/``link:`` to a block of
    the skill can reach from it. The step under the pointer counts: a failed or declined step
    runs again once memory changes, and a call by the model would not move the pointer, so
    the step would run it a second time. A step already passed and not reachable again does
    not count: the block has run it, as the author ordered ("search again" in an
    ``instructions:`` step after the search step is the model's to do). A block entered by
    the step under a pointer, and running, has an entry of its own, which says how far it got:
    it is not walked again from its start."""
    entries = frame["blocks"]
    for index, entry in enumerate(entries):
        block = skill.blocks.get(entry["block"])
        if block is None or not block.steps:
            continue
        first = entry["step"] if entry["step"] is not None else block.steps[0].id
        running = entries[index + 1]["block"] if index + 1 < len(entries) else None
        for owner, step in steps_ahead(skill, block, first, running=running):
            if step.execute_tool == name:
                return (
                    f"'{name}' is run by step '{step.id}' of block '{owner.id}', which is ahead "
                    f"of the running block '{block.id}' (at step '{first}'); the model "
                    "cannot call it before the block does"
                )
    return None


def steps_ahead(
    skill: Skill, block: OrderedBlock, step_id: str, *, running: str | None = None
) -> list[tuple[OrderedBlock, Step]]:
    """The steps reachable from ``step_id`` (itself included) whatever memory holds; the block
    ``running``, which the step ``step_id`` entered, is not entered from there (its own
    pointer says where it is)."""
    seen: set[tuple[str, str]] = set()
    out: list[tuple[OrderedBlock, Step]] = []
    todo = [(block, step_id)]
    while todo:
        owner, current = todo.pop()
        step = owner.step(current)
        if step is None or (owner.id, step.id) in seen:
            continue  # END, or already reached
        seen.add((owner.id, step.id))
        out.append((owner, step))
        if step.kind is StepKind.END:
            continue
        targets: list[str] = []
        if isinstance(step.next, str):
            targets.append(step.next)
        else:
            branches = step.next or []
            targets.extend(branch.target for branch in branches)
            if not any(branch.condition is None for branch in branches):
                index = next(i for i, s in enumerate(owner.steps) if s is step)
                if index + 1 < len(owner.steps):
                    targets.append(owner.steps[index + 1].id)
        todo.extend((owner, target) for target in targets)
        entered = step.call or step.link
        called = skill.blocks.get(entered) if entered else None
        if (owner, step.id) == (block, step_id) and entered is not None and entered == running:
            called = None
        if called is not None and called.steps:
            todo.append((called, called.steps[0].id))
    return out
