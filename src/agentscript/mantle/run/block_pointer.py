"""Moving a block pointer: the step under it, advancing past it, holding it.

Used by block stepping, by skill transitions (a skill started by a ``call:`` step moves its
caller on when it returns) and by confirmation (a confirmed step advances).
"""

from __future__ import annotations

from agentscript.mantle.model import OrderedBlock, Skill, Step
from agentscript.mantle.queries import next_step_id
from agentscript.mantle.run.stack import BlockEntry
from agentscript.mantle.run.turn_context import TurnContext
from agentscript.trace_steps import block_event


def step_at(skill: Skill, entry: BlockEntry) -> tuple[OrderedBlock | None, Step | None]:
    """The block of ``entry`` and the step under its pointer (None when missing or unset)."""
    block = skill.blocks.get(entry["block"])
    step = block.step(entry["step"]) if block and entry["step"] else None
    return block, step


def advance(
    ctx: TurnContext, skill: Skill, entry: BlockEntry, block: OrderedBlock, step: Step
) -> None:
    target = next_step_id(block, step, ctx.memory)
    block_event(
        ctx.trace,
        event="advanced",
        skill=skill.id,
        block=block.id,
        step=step.id,
        next=target,
    )
    entry["step"] = target
    entry["held"] = None


def advance_past_call(ctx: TurnContext, skill: Skill, entry: BlockEntry) -> None:
    """Move past the ``call:`` step that started what just returned."""
    block, step = step_at(skill, entry)
    if block is not None and step is not None:
        advance(ctx, skill, entry, block, step)


def hold(ctx: TurnContext, entry: BlockEntry) -> None:
    """The step under the pointer failed or was declined: it waits until memory changes."""
    entry["held"] = {"step": entry["step"], "memory": ctx.fingerprint()}


def is_held(ctx: TurnContext, entry: BlockEntry, step: Step) -> bool:
    held = entry["held"]
    return held is not None and held["step"] == step.id and held["memory"] == ctx.fingerprint()
