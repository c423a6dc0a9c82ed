"""Post-write hooks: ``run_after_setting_<entry>`` functions in a skill's tools.

A hook runs after each write of its entry, whoever wrote it (the model's ``set_fields`` or a
tool it called, a button payload, a ``set_memory`` step, a deterministic tool step). It is
never offered to the model. It receives the new value as ``value`` when it declares that
parameter, and ``context`` like any tool. A result with a non-null ``error`` rejects the
write: every write since the batch began (the hook's own included) is rolled back, and the
model is told why (in the result of its call, or, for a write the engine made, as an
engine-made tool exchange in the history). Writes a hook makes do not run hooks again.

Hooks for a skill entry live in that skill's tools; hooks for a project entry in the
active skill's tools, then the shared tools. Writes are found through
``TurnContext.journal`` (``(key, previous value, previous write turn)``, appended by
``TurnContext.write``).
The load-time check that a hook names a writable entry is in
:mod:`agentscript.mantle.load.validate`.
"""

from __future__ import annotations

from agentscript.mantle.model import PROJECT_NAMESPACE, Project, Tool
from agentscript.mantle.run.tool_execution import run_tool
from agentscript.mantle.run.turn_context import TurnContext
from agentscript.trace_steps import Source, event_step

HOOK_PREFIX = "run_after_setting_"


def guarded_entries(project: Project) -> set[str]:
    """The entries (qualified names) some post-write hook checks: a skill entry whose skill's
    tools hold its hook; a project entry that any skill's tools or the shared tools hold one
    for (which one runs depends on the skill active at the write). A value given from outside
    a turn (a new session's variables) would skip the hook, so such an entry is the
    conversation's to write."""
    guarded: set[str] = set()
    for tool in project.shared_tools.values():
        if tool.hook_for is not None:
            guarded.add(f"{PROJECT_NAMESPACE}.{tool.hook_for}")
    for skill_id, skill in project.skills.items():
        for tool in skill.tools.values():
            if tool.hook_for is not None:
                guarded.add(f"{skill_id}.{tool.hook_for}")
                guarded.add(f"{PROJECT_NAMESPACE}.{tool.hook_for}")
    return guarded


def mark(ctx: TurnContext) -> int:
    """The journal position where a batch of writes begins."""
    return len(ctx.journal)


def find_hook(ctx: TurnContext, qualified: str) -> tuple[str, Tool] | None:
    """The hook of ``qualified`` and the skill it runs for."""
    namespace, _, name = qualified.partition(".")
    frame = ctx.stack.active()
    places: list[tuple[str, dict[str, Tool]]] = []
    if namespace == PROJECT_NAMESPACE:
        if frame is not None:
            places.append((frame["skill"], ctx.project.skills[frame["skill"]].tools))
        places.append((frame["skill"] if frame else "", ctx.project.shared_tools))
    elif namespace in ctx.project.skills:
        places.append((namespace, ctx.project.skills[namespace].tools))
    for skill_id, tools in places:
        hook = tools.get(HOOK_PREFIX + name)
        if hook is not None and hook.hook_for == name:
            return skill_id, hook
    return None


def rollback(ctx: TurnContext, since: int) -> list[str]:
    """Undo every write since ``since``, the turn each entry was last written in included;
    returns the keys restored."""
    undone: list[str] = []
    turns = ctx.stack.data["written"]
    while len(ctx.journal) > since:
        key, previous, turn = ctx.journal.pop()
        ctx.memory[key] = previous
        if turn is None:
            turns.pop(key, None)
        else:
            turns[key] = turn
        if key not in undone:
            undone.append(key)
    return undone


async def after_writes(ctx: TurnContext, since: int, *, engine_made: bool) -> str | None:
    """Run the hooks of the entries written since ``since``; the error when one rejected
    (everything since ``since`` is then rolled back)."""
    written: list[str] = []
    for key, *_ in ctx.journal[since:]:
        if key not in written:
            written.append(key)
    for key in written:
        found = find_hook(ctx, key)
        if found is None:
            continue
        skill_id, hook = found
        properties = (hook.parameters_schema or {}).get("properties") or {}
        arguments = {"value": ctx.memory.get(key)} if "value" in properties else {}
        result, _ = await run_tool(ctx, skill_id, hook, arguments, Source.HOOK)
        error = result.get("error")
        if error is None:
            continue
        undone = rollback(ctx, since)
        message = f"the write of {key} was rejected and rolled back ({', '.join(undone)}): {error}"
        event_step(
            ctx.trace,
            event="write_rolled_back",
            node=ctx.node_name(),
            tool=hook.name,
            hook=hook.name,
            keys=undone,
            error=str(error),
        )
        if engine_made:
            ctx.answer(ctx.engine_call("hook", hook.name, dict(arguments)), {"error": message})
            ctx.close_calls()
        return message
    return None
