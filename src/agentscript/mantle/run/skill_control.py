"""The engine tools the model calls: ``activate_skill``, ``complete_skill``, ``cancel_skill``
and ``set_fields`` (``resolve_tool_confirmation`` is in :mod:`.confirmation`).

Each handler returns the result for the model; a result with ``error`` is refused by the
dispatcher and changes nothing.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from typing import Any

from agentscript.mantle.memory import MemoryWriteError, check_write
from agentscript.mantle.queries import holds
from agentscript.mantle.run import lifecycle
from agentscript.mantle.run import prompt as p
from agentscript.mantle.run.stack import SkillStack
from agentscript.mantle.run.transitions import activate, drop_paused, finish, resumable
from agentscript.mantle.run.turn_context import TurnContext
from agentscript.trace import elapsed_ms
from agentscript.trace_steps import Source, action_step, knowledge_step


def activate_skill(ctx: TurnContext, args: dict[str, Any]) -> dict[str, Any]:
    skill, block = args.get("skill"), args.get("block")
    if not isinstance(skill, str) or (block is not None and not isinstance(block, str)):
        return {"error": "activate_skill needs skill=<id> (and optionally block=<id>)"}
    return activate(ctx, skill, block)


def complete_skill(ctx: TurnContext, args: dict[str, Any]) -> dict[str, Any]:
    frame = ctx.stack.active()
    if frame is None:
        return {"error": "no skill is active"}
    entry = SkillStack.block(frame)
    if entry is not None:
        return {
            "error": f"ordered block '{entry['block']}' is running (step {entry['step']}); "
            "it finishes at its END step, complete_skill is not available"
        }
    done = ctx.project.skills[frame["skill"]].complete_when
    if done is not None and done.condition is not None and not holds(done.condition, ctx.memory):
        return {"error": f"the skill is not done: {done.condition.text} does not hold"}
    finish(ctx, frame, "completed", reason="complete_skill")
    return {"status": "completed", "skill": frame["skill"]}


def cancel_skill(ctx: TurnContext, args: dict[str, Any]) -> dict[str, Any]:
    """Cancel the active skill; with none, drop the most recent paused skill the prompt
    lists. Which of the two the call means is decided by what the model saw when its answer
    was resolved (:func:`active_when_resolved`), as the gates are checked again at dispatch:
    an earlier call of the same answer (another ``cancel_skill``, a ``complete_skill``, an
    activation) may have changed the stack, and a call made to end the skill that was active
    then must not cancel another one, nor drop a paused skill the model saw only as one it
    could start."""
    frame = ctx.stack.active()
    seen = active_when_resolved(ctx)
    if seen is not None and (frame is None or frame["skill"] != seen):
        now = f"'{frame['skill']}' is active now" if frame is not None else "no skill is active"
        return {
            "error": f"'{seen}', the skill active when this answer was given, is no longer the "
            f"active skill ({now}); nothing was cancelled"
        }
    if frame is not None:
        finish(ctx, frame, "cancelled", reason="cancel_skill")
        return {"status": "cancelled", "skill": frame["skill"]}
    # With no active skill: the most recent paused one the prompt lists (one that can resume),
    # never one the model cannot see.
    listed = resumable(ctx)
    if not listed:
        return {"error": "no skill to cancel"}
    return drop_paused(ctx, listed[0]["skill"])


def active_when_resolved(ctx: TurnContext) -> str | None:
    """The skill that was active when the model's answer being dispatched was resolved
    (``TurnContext.resolved_skill``, kept by every resolution: a skill id, so a skill named
    like the routing node is still one). None when no skill was active or nothing was
    resolved this turn."""
    return ctx.resolved_skill or None


def set_fields(ctx: TurnContext, args: dict[str, Any]) -> dict[str, Any]:
    """Write the active skill's settable entries: all or nothing, type- and enum-checked."""
    frame = ctx.stack.active()
    if frame is None:
        return {"error": "no skill is active; start one with activate_skill"}
    skill = ctx.project.skills[frame["skill"]]
    settable = p.settable_entries(ctx.project, skill)
    if not args:
        return {"error": f"set_fields needs at least one field; settable: {sorted(settable)}"}
    writes: dict[str, Any] = {}
    for name, value in args.items():
        key = name.removeprefix("session.").removeprefix(f"{skill.id}.")
        entry = settable.get(key)
        if entry is None:
            return {"error": f"'{name}' cannot be set here; settable: {sorted(settable)}"}
        if value is None:
            return {"error": f"'{name}': a value is required"}
        try:
            writes[entry.qualified_name] = check_write(entry, ctx.memory, value)
        except MemoryWriteError as exc:
            return {"error": str(exc)}
    started = time.perf_counter()
    step = action_step(
        ctx.trace,
        name=p.SET_FIELDS,
        action=p.SET_FIELDS,
        node=ctx.node_name(),
        source=Source.LLM,
        skill=skill.id,
        inputs=dict(args),
        pre_vars=ctx.snapshot(),
    )
    for key, value in writes.items():
        ctx.write(key, value)
    step["output"] = {"updated": sorted(writes)}
    step["postVars"] = ctx.snapshot()
    step["durationMs"] = elapsed_ms(started)
    return {"status": "updated", "fields": sorted(writes)}


def search_knowledge(ctx: TurnContext, args: dict[str, Any]) -> dict[str, Any]:
    """Ranked passages from the project's references; the query and hits are traced. The
    dispatcher has checked that there are references (:func:`knowledge_withheld`)."""
    index = ctx.project.knowledge
    assert index is not None, "search_knowledge is withheld without a knowledge base"
    query = args.get("query")
    if not isinstance(query, str) or not query.strip():
        return {"error": "search_knowledge needs query=<text>"}
    try:
        passages = [hit.to_json() for hit in index.search(query)]
    except sqlite3.Error as exc:  # a damaged cache file: an error result, not a traceback
        return {"error": f"the knowledge search failed: {exc}"}
    knowledge_step(ctx.trace, node=ctx.node_name(), query=query, passages=passages)
    ctx.searched = True
    return {"passages": passages} if passages else {"passages": [], "note": "nothing found"}


def knowledge_withheld(ctx: TurnContext) -> str | None:
    """Why ``search_knowledge`` is not offered now (None: it is): only with references."""
    if ctx.project.knowledge is None:
        return (
            f"tool '{p.SEARCH_KNOWLEDGE}' is not offered: this project has no knowledge base "
            "(no references/ folder)"
        )
    return None


HANDLERS = {
    p.SEARCH_KNOWLEDGE: search_knowledge,
    lifecycle.CANNOT_HELP: lifecycle.cannot_help,
    p.ACTIVATE: activate_skill,
    p.COMPLETE: complete_skill,
    p.CANCEL: cancel_skill,
    p.SET_FIELDS: set_fields,
}

# Engine tools offered only in some states, with why each is withheld now (None: offered):
# the prompt leaves a withheld one out and the dispatcher refuses a call of it.
WITHHELD: dict[str, Callable[[TurnContext], str | None]] = {
    lifecycle.CANNOT_HELP: lifecycle.cannot_help_withheld,
    p.SEARCH_KNOWLEDGE: knowledge_withheld,
}


def withheld(ctx: TurnContext, name: str) -> str | None:
    """Why the engine tool ``name`` is not offered now (None: it is, or it is no such tool)."""
    reason_now = WITHHELD.get(name)
    return None if reason_now is None else reason_now(ctx)
