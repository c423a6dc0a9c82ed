"""Skill activation, completion and the stack transitions between them (M1, M2).

A skill starts routed (nothing active), invoked (the active skill names it where the model
can see it, or through a ``call:`` step: the caller is parked and resumes when it ends; a
cancelled ``call:`` takes its caller with it) or as an interrupt (the active skill is paused
and resumes only when activated again). A skill has at most one frame on the stack, and the
stack at most ``Limits.max_stack_depth`` frames, whoever starts it: the model, a block step or
the engine's lifecycle (:func:`push_refusal`).
"""

from __future__ import annotations

from typing import Any

from agentscript.mantle.model import ReferenceKind, Skill
from agentscript.mantle.queries import engine_managed, holds, offered_skills
from agentscript.mantle.run import prompt as p
from agentscript.mantle.run.block_pointer import advance_past_call, step_at
from agentscript.mantle.run.collect import reask
from agentscript.mantle.run.stack import ACTIVE, PARKED, PAUSED, Frame, SkillStack
from agentscript.mantle.run.turn_context import TurnContext
from agentscript.trace_steps import ResponseKind, block_event, skill_event


def position(frame: Frame) -> dict[str, Any]:
    """``{block, step}`` of the frame's running block, for trace steps (empty without one)."""
    entry = SkillStack.block(frame)
    return {} if entry is None else {"block": entry["block"], "step": entry["step"]}


def start_skill(
    ctx: TurnContext,
    skill_id: str,
    kind: str,
    *,
    via_call: bool = False,
    invoked_by: str | None = None,
) -> Frame:
    """Push a frame for ``skill_id`` and start it. Every caller asks :func:`push_refusal` (or
    :func:`start_refusal`, which includes it) first, before it changes anything."""
    skill = ctx.project.skills[skill_id]
    restarted = ctx.stack.count_activation(skill_id) > 0
    if restarted and ctx.stack.find(skill_id) is None:
        # A skill starting again starts clean (its public values survived until now). Memory
        # is per skill, not per frame: a frame still on the stack keeps it (callers refuse
        # to start a skill that is on the stack, see ``start_refusal``).
        for name, entry in skill.memory.items():
            ctx.memory[f"{skill_id}.{name}"] = (
                entry.initial_value if entry.has_initial_value else None
            )
        ctx.stack.clear_fired(skill_id)
    frame = ctx.stack.push(skill_id, kind, via_call=via_call)
    ctx.result.path.append(skill_id)
    fields: dict[str, Any] = {"kind": kind}
    if invoked_by:
        fields["invokedBy"] = invoked_by
    skill_event(ctx.trace, event="activated", skill=skill_id, **fields)
    for trigger in skill.utter:
        if trigger.on == "activate":
            ctx.utter(trigger.response, ResponseKind.UTTER)
    if skill.body_is_single_block:
        SkillStack.enter_block(frame, next(iter(skill.blocks)))
    return frame


def finish(ctx: TurnContext, frame: Frame, event: str, *, reason: str | None = None) -> None:
    """Complete or cancel the top frame; an invoked skill hands control back (M2)."""
    ctx.stack.pop()
    fields = position(frame)
    if reason:
        fields["reason"] = reason
    skill_event(ctx.trace, event=event, skill=frame["skill"], **fields)
    forget_pending(ctx, frame)
    if frame["kind"] != "invoked" or not ctx.stack.frames:
        return
    parent = ctx.stack.frames[-1]
    if parent["status"] != PARKED:
        return
    if event == "cancelled" and frame["via_call"]:
        # The caller's next steps rely on what its `call:` step's skill was to do, so it is
        # cancelled too, as Rasa cancels through call frames down to the first flow that was
        # not called; a prose invocation (below) resumes its caller instead.
        finish(
            ctx, parent, "cancelled", reason=f"the skill it called ({frame['skill']}) was cancelled"
        )
        return
    parent["status"] = ACTIVE
    reask(parent)
    ctx.result.path.append(parent["skill"])
    skill_event(ctx.trace, event="resumed", skill=parent["skill"], **position(parent))
    parent_entry = SkillStack.block(parent)
    if frame["via_call"] and parent_entry is not None:
        advance_past_call(ctx, ctx.project.skills[parent["skill"]], parent_entry)


def forget_pending(ctx: TurnContext, frame: Frame) -> None:
    """A call waiting for confirmation goes with its skill."""
    pending = ctx.stack.pending
    if pending is not None and pending["skill"] == frame["skill"]:
        ctx.stack.pending = None


def drop_paused(ctx: TurnContext, skill_id: str | None = None) -> dict[str, Any]:
    """``cancel_skill`` with no active skill: drop the most recently paused one, or the paused
    ``skill_id`` (the one the resume offer named, which need not be the most recent)."""
    paused = [f for f in ctx.stack.paused() if skill_id in (None, f["skill"])]
    if not paused:
        return {"error": "no skill to cancel"}
    dropped = paused[0]
    frames = ctx.stack.frames
    below = frames.index(dropped) - 1
    frames.remove(dropped)
    skill_event(ctx.trace, event="cancelled", skill=dropped["skill"], reason="dropped")
    forget_pending(ctx, dropped)
    gone = dropped
    callers: list[str] = []
    while gone["kind"] == "invoked" and below >= 0 and frames[below]["status"] == PARKED:
        caller = frames[below]
        if gone["via_call"]:
            # Dropped like a cancelled `call:` (see ``finish``): its caller goes too.
            frames.remove(caller)
            skill_event(
                ctx.trace,
                event="cancelled",
                skill=caller["skill"],
                reason=f"the skill it called ({gone['skill']}) was dropped",
                **position(caller),
            )
            forget_pending(ctx, caller)
            callers.append(caller["skill"])
            gone, below = caller, below - 1
            continue
        # Its caller waited for it; the user had moved on, so the caller is paused (resumed
        # when activated again) instead of waiting for a skill that is gone.
        caller["status"] = PAUSED
        skill_event(
            ctx.trace,
            event="interrupted",
            skill=caller["skill"],
            by=gone["skill"],
            reason="the skill it started was dropped",
            **position(caller),
        )
        break
    result: dict[str, Any] = {"status": "cancelled", "skill": dropped["skill"]}
    if callers:
        result["callers_cancelled"] = callers
    return result


def pause(ctx: TurnContext, frame: Frame, by: str) -> None:
    frame["status"] = PAUSED
    where = position(frame)
    if where:
        block_event(ctx.trace, event="paused", skill=frame["skill"], **where)
    skill_event(ctx.trace, event="interrupted", skill=frame["skill"], by=by, **where)


def invokes(ctx: TurnContext, frame: Frame, target: str) -> bool:
    """Whether the active skill names ``target`` as ``@skill.x`` where the model can see it
    (its visible prose or the instructions of its current step)."""
    skill = ctx.project.skills[frame["skill"]]
    if target in p.visible_skill_references(skill, ctx.memory):
        return True
    entry = SkillStack.block(frame)
    step = step_at(skill, entry)[1] if entry else None
    return step is not None and any(
        r.kind is ReferenceKind.SKILL and r.target == target for r in step.references
    )


def start_refusal(ctx: TurnContext, skill_id: str, *, replacing: Frame | None = None) -> str | None:
    """Why a ``call:`` or ``link:`` step cannot start ``skill_id`` now (None: it can): the
    target's gates, then :func:`push_refusal`.

    ``replacing`` is the frame a ``link:`` ends, which makes room for the target (and may be
    the target itself: linking to its own skill starts it over).
    """
    target = ctx.project.skills.get(skill_id)
    if target is None:
        return f"skill '{skill_id}' is unknown"
    if target.disabled:
        return f"skill '{skill_id}' is disabled"
    return requires_refusal(ctx, target) or push_refusal(ctx, skill_id, replacing=replacing)


def requires_refusal(ctx: TurnContext, skill: Skill) -> str | None:
    """Why ``skill``'s ``requires`` keeps it from starting now (None: it holds; M1, M6)."""
    if holds(skill.requires, ctx.memory):
        return None
    return f"the requires of '{skill.id}' does not hold"


def resume_refusal(ctx: TurnContext, skill: Skill) -> str | None:
    """Why ``skill``, on the stack, cannot resume now (None: it can): its ``requires`` no
    longer holds (M1: the skill that interrupted it may have closed the gate), or it was
    disabled since it paused (a saved session going on under a redeployed project)."""
    if skill.disabled:
        return f"skill '{skill.id}' is disabled"
    return requires_refusal(ctx, skill)


def resumable(ctx: TurnContext) -> list[Frame]:
    """The paused frames that can resume now (:func:`resume_refusal`), most recent first:
    the ones the prompt lists and the resume offer may name."""
    skills = ctx.project.skills
    return [f for f in ctx.stack.paused() if resume_refusal(ctx, skills[f["skill"]]) is None]


def not_offered_refusal(skill: Skill) -> str:
    """Why ``skill``, which ``offered_skills`` leaves out, cannot be activated."""
    if skill.disabled:
        return f"skill '{skill.id}' is disabled"
    if engine_managed(skill):
        return f"skill '{skill.id}' is run by the engine; activate_skill cannot start it"
    return f"skill '{skill.id}' is not available now (its requires does not hold)"


def push_refusal(ctx: TurnContext, skill_id: str, *, replacing: Frame | None = None) -> str | None:
    """Why the stack cannot take a frame for ``skill_id`` now (None: it can): one frame per
    skill, at most ``Limits.max_stack_depth`` frames. Every start asks, the engine's
    lifecycle starts included. ``replacing``: as for :func:`start_refusal`."""
    for frame in ctx.stack.frames:
        if frame["skill"] == skill_id and frame is not replacing:
            # Memory is per skill: a second frame would share (and its start would wipe)
            # the memory of the one waiting, and resuming that one is the user's choice.
            return f"skill '{skill_id}' is already on the stack ({frame['status']})"
    depth = len(ctx.stack.frames) - (replacing is not None)
    return stack_full(ctx, depth)


def stack_full(ctx: TurnContext, depth: int) -> str | None:
    """The refusal when ``depth`` frames leave no room for one more (else None)."""
    most = ctx.limits.max_stack_depth
    if depth < most:
        return None
    return (
        f"the skill stack is full ({depth} skills; Limits.max_stack_depth = {most}): "
        "finish or cancel a skill first"
    )


def enterable_blocks(ctx: TurnContext, skill_id: str) -> list[str]:
    """The blocks ``activate_skill {skill: skill_id, block: ...}`` may start now: the ones the
    active skill's visible prose names while no block of it runs (what the offered schema
    lists; M4/M6: a block hidden by ``if:`` or reached only by ``call:`` is not among them)."""
    active = ctx.stack.active()
    if active is None or active["skill"] != skill_id or SkillStack.block(active) is not None:
        return []
    return p.visible_block_references(ctx.project.skills[skill_id], ctx.memory)


def block_refusal(ctx: TurnContext, skill: Skill, block: str) -> str | None:
    active = ctx.stack.active()
    if active is None or active["skill"] != skill.id:
        return (
            f"a block can be started only in the active skill, where its prose names it; "
            f"activate '{skill.id}' without a block first"
        )
    running = SkillStack.block(active)
    if running is not None:
        return f"block '{running['block']}' is running (step {running['step']})"
    allowed = enterable_blocks(ctx, skill.id)
    if block in allowed:
        return None
    if block not in skill.blocks:
        return f"skill '{skill.id}' has no block '{block}'"
    return (
        f"block '{block}' of '{skill.id}' cannot be started now: its visible prose does not "
        f"name it (blocks that can: {', '.join(allowed) or 'none'})"
    )


def activate(ctx: TurnContext, skill_id: str, block: str | None) -> dict[str, Any]:
    """``activate_skill``: start, invoke, interrupt for or resume ``skill_id``."""
    target = ctx.project.skills.get(skill_id)
    if target is None:
        return {"error": f"unknown skill '{skill_id}'"}
    active = ctx.stack.active()
    if block is not None:
        # Checked before anything changes: a refused call takes no effect (S5).
        refusal = block_refusal(ctx, target, block)
        if refusal is not None or active is None:
            return {"error": refusal or f"skill '{skill_id}' is not active"}
        return enter_prose_block(active, block)
    if active is not None and active["skill"] == skill_id:
        return {"status": f"{skill_id} is already active"}
    existing = ctx.stack.find(skill_id)
    offered = {s.id for s in offered_skills(ctx.project, ctx.memory)}
    if existing is None and skill_id not in offered:
        return {"error": not_offered_refusal(target)}
    status: dict[str, Any]
    if existing is not None:
        if existing["status"] == PARKED:
            return {"error": f"skill '{skill_id}' waits for a skill it started"}
        refusal = resume_refusal(ctx, target)
        if refusal is not None:
            return {"error": f"cannot resume '{skill_id}' now: {refusal}"}
        if active is not None:
            pause(ctx, active, by=skill_id)
        ctx.stack.move_to_top(existing)
        existing["status"] = ACTIVE
        reask(existing)
        ctx.result.path.append(skill_id)
        where = position(existing)
        skill_event(ctx.trace, event="resumed", skill=skill_id, **where)
        status = {"status": "resumed", "skill": skill_id, **where}
    else:
        refusal = push_refusal(ctx, skill_id)
        if refusal is not None:
            return {"error": refusal}
        if active is not None and invokes(ctx, active, skill_id):
            active["status"] = PARKED
            start_skill(ctx, skill_id, "invoked", invoked_by=active["skill"])
        elif active is not None:
            pause(ctx, active, by=skill_id)
            start_skill(ctx, skill_id, "interrupt")
        else:
            start_skill(ctx, skill_id, "routed")
        status = {"status": "activated", "skill": skill_id}
    return status


def enter_prose_block(frame: Frame, block: str) -> dict[str, Any]:
    """The model starts a block its skill's prose names (``@block.x``); ``activate`` has
    checked it (:func:`block_refusal`: the skill's own block, named where the model can see
    it, none running)."""
    SkillStack.enter_block(frame, block)
    return {"status": "block started", "block": block}
