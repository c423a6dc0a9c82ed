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
``TurnContext.journal`` (``(key, previous value)`` pairs, appended by ``TurnContext.write``).
"""

from __future__ import annotations

from collections.abc import Iterator

from agentscript.diagnostics import Diagnostic, Severity
from agentscript.mantle.model import PROJECT_NAMESPACE, Project, Tool
from agentscript.mantle.tool_run import run_tool
from agentscript.mantle.turn_context import TurnContext

HOOK_PREFIX = "run_after_setting_"


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
    """Undo every write since ``since``; returns the keys restored."""
    undone: list[str] = []
    while len(ctx.journal) > since:
        key, previous = ctx.journal.pop()
        ctx.memory[key] = previous
        if key not in undone:
            undone.append(key)
    return undone


async def after_writes(ctx: TurnContext, since: int, *, engine_made: bool) -> str | None:
    """Run the hooks of the entries written since ``since``; the error when one rejected
    (everything since ``since`` is then rolled back)."""
    written: list[str] = []
    for key, _ in ctx.journal[since:]:
        if key not in written:
            written.append(key)
    for key in written:
        found = find_hook(ctx, key)
        if found is None:
            continue
        skill_id, hook = found
        properties = (hook.parameters_schema or {}).get("properties") or {}
        arguments = {"value": ctx.memory.get(key)} if "value" in properties else {}
        result, _ = await run_tool(ctx, skill_id, hook, arguments, "hook")
        error = result.get("error")
        if error is None:
            continue
        undone = rollback(ctx, since)
        message = f"the write of {key} was rejected and rolled back ({', '.join(undone)}): {error}"
        ctx.trace.add(
            "EVENT_STEP", event="write_rolled_back", hook=hook.name, keys=undone, error=str(error)
        )
        if engine_made:
            ctx.answer(ctx.engine_call("hook", hook.name, dict(arguments)), {"error": message})
            ctx.close_calls()
        return message
    return None


def check_hooks(project: Project) -> Iterator[Diagnostic]:
    """A hook must name an entry its place can write: a skill's hook an entry of that skill
    or of the project, a shared hook a project entry."""
    places: list[tuple[str | None, dict[str, Tool]]] = [(None, project.shared_tools)]
    places.extend((skill.id, skill.tools) for skill in project.skills.values())
    for skill_id, tools in places:
        for tool in tools.values():
            entry = tool.hook_for
            if entry is None or tool.is_stub:
                continue
            own = skill_id is not None and entry in project.skills[skill_id].memory
            if own or entry in project.memory:
                continue
            where = f"skill '{skill_id}' or the project" if skill_id else "the project"
            yield Diagnostic(
                "mantle-hook",
                f"post-write hook '{tool.name}' names '{entry}', which is not a memory entry "
                f"of {where}; rename the function to run_after_setting_<entry>",
                tool.span,
                Severity.ERROR,
                tool.file,
            )
