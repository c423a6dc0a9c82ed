"""What the model is given for one call, from live state (recorded as a
``RESOLUTION_STEP``): the routing catalogue or the active skill's prose, the current step's
guidance, a pending confirmation, and only the tools whose gates hold now (not those a
running block runs itself, :func:`.blocks.run_by_block`).
"""

from __future__ import annotations

import json
import time

from agentscript.mantle.model import Skill, StepKind
from agentscript.mantle.queries import offered_skills, tool_allowed
from agentscript.mantle.run import prompt as p
from agentscript.mantle.run.block_pointer import step_at
from agentscript.mantle.run.blocks import run_by_block
from agentscript.mantle.run.confirmation import answerable, live_pending
from agentscript.mantle.run.instruction_lines import instruction_lines
from agentscript.mantle.run.lifecycle import CANNOT_HELP
from agentscript.mantle.run.skill_control import withheld
from agentscript.mantle.run.stack import BlockEntry, SkillStack
from agentscript.mantle.run.transitions import resumable
from agentscript.mantle.run.turn_context import TurnContext
from agentscript.models.base import ToolSpec
from agentscript.trace import elapsed_ms
from agentscript.trace_steps import resolution_step


def resolve_prompt(ctx: TurnContext) -> tuple[str, list[ToolSpec]]:
    """The instructions and tools of the next model call."""
    pre = ctx.snapshot()
    started = time.perf_counter()
    memory = ctx.memory
    project = ctx.project
    frame = ctx.stack.active()
    ctx.resolved_skill = frame["skill"] if frame else None
    offered = offered_skills(project, memory)
    offered_ids = {s.id for s in offered}
    paused = [f["skill"] for f in resumable(ctx)]
    activatable = [s.id for s in offered] + [s for s in paused if s not in offered_ids]
    parts: list[str] = []
    tools: list[ToolSpec] = []
    hidden: list[str] = []
    if frame is None:
        parts.append(p.routing_section(offered, paused, project))
        if activatable:
            tools.append(p.activate_spec(activatable, []))
        if ctx.stack.paused():
            tools.append(p.cancel_spec())
    else:
        skill = project.skills[frame["skill"]]
        parts.append(p.skill_section(project, skill, memory))
        entry = SkillStack.block(frame)
        if entry is not None:
            parts.extend(step_guidance(ctx, skill, entry))
        others = [s for s in offered if s.id != skill.id]
        if others:
            parts.append(
                "If the user asks for something else, these skills can be started with "
                "activate_skill:\n"
                + "\n".join(f"- {s.id}: {' '.join(s.description.split())}" for s in others)
            )
        blocks = [] if entry is not None else p.visible_block_references(skill, memory)
        choices = [s for s in activatable if s != skill.id]
        if blocks:
            choices.insert(0, skill.id)
        if choices:
            tools.append(p.activate_spec(choices, blocks))
        if entry is None:
            tools.append(p.complete_spec())
        tools.append(p.cancel_spec())
        settable = p.settable_entries(project, skill)
        if settable:
            tools.append(p.set_fields_spec(settable))
        # The dispatcher refuses a call of a hidden tool by the same rules
        # (call_dispatch.call_skill_tool).
        for name, tool in project.tools_for(skill.id).items():
            if ctx.searched:
                hidden.append(name)  # withheld after a knowledge search this turn
            elif run_by_block(skill, frame, name) is not None:
                hidden.append(name)  # a running block's execute_tool step runs it (M3)
            elif tool_allowed(project, skill.id, name, memory):
                tools.append(ToolSpec(name, tool.description, dict(tool.parameters_schema)))
            else:
                hidden.append(name)
    # The dispatcher refuses a call of a withheld tool by the same rule (skill_control.WITHHELD).
    if withheld(ctx, p.SEARCH_KNOWLEDGE) is None:
        tools.append(p.search_knowledge_spec())
        if ctx.searched:
            parts.append(p.KNOWLEDGE_NOTE)
    if withheld(ctx, CANNOT_HELP) is None:
        tools.append(p.cannot_help_spec())
    pending = live_pending(ctx)
    if pending is not None:
        arguments = json.dumps(pending["arguments"], default=repr)
        if answerable(ctx, pending):
            parts.append(
                f"The user was asked to confirm {pending['tool']} with {arguments}. When "
                "they answer, call resolve_tool_confirmation with confirmed=true or "
                "confirmed=false."
            )
            tools.append(p.resolve_spec())
        else:
            # Held this turn: the answer can only come with the user's next message (M5).
            parts.append(
                f"{pending['tool']} with {arguments} needs the user's confirmation. Ask "
                "them and end your reply; their answer comes in their next message."
            )
    instructions = "\n\n".join(part for part in parts if part)
    resolution_step(
        ctx.trace,
        node=ctx.node_name(),
        iteration=ctx.llm_calls,
        instructions=instructions,
        tools=[t.name for t in tools],
        hidden_tools=hidden,
        pre_vars=pre,
        post_vars=ctx.snapshot(),
        duration_ms=elapsed_ms(started),
        instruction_lines=instruction_lines(
            instructions, project, project.skills[frame["skill"]] if frame else None, memory
        ),
    )
    return instructions, tools


def step_guidance(ctx: TurnContext, skill: Skill, entry: BlockEntry) -> list[str]:
    """The step the block waits on, and what it already collected."""
    block, step = step_at(skill, entry)
    if block is None or step is None:
        return []
    note = None
    if step.kind is StepKind.EXECUTE_TOOL:
        pending = ctx.stack.pending
        if pending is not None and pending.get("step") == step.id:
            note = f"{step.execute_tool} waits for the user's confirmation."
        elif entry["held"] is not None:
            note = (
                f"{step.execute_tool} did not succeed; it runs again when memory changes. "
                "Tell the user and help them change what is needed."
            )
        else:
            note = f"{step.execute_tool} runs as soon as its requirements hold."
    parts = [p.step_section(ctx.project, skill, block, step, ctx.memory, held=note)]
    collected = p.collected_section(skill, block, ctx.memory)
    if collected:
        parts.append(collected)
    return parts
