"""``call:``/``link:`` cycles between ordered blocks and skills (diagnostic ``mantle-call-cycle``).

A ``call:`` or ``link:`` step moves control to another block with no model or user turn in
between: to a block of the same skill, or to another skill, which enters its block at once
when its body is one block (otherwise the model picks the block, which breaks the chain).
A cycle of such moves (a skill calling itself, two skills calling each other, two blocks
linking to each other) never reaches the model: at run time every turn would stop at
``Limits.max_deterministic_steps``. Each cycle is reported once, at the step that closes it.
"""

from __future__ import annotations

from collections.abc import Iterator

from agentscript.diagnostics import Diagnostic, Severity
from agentscript.mantle.model import Project, Step

BlockKey = tuple[str, str]  # (skill id, block id)


def _edges(project: Project, key: BlockKey) -> list[tuple[BlockKey, Step, str]]:
    """(target block, the step that moves there, "call"/"link") for one block."""
    skill = project.skills[key[0]]
    out: list[tuple[BlockKey, Step, str]] = []
    for step in skill.blocks[key[1]].steps:
        for target, what in ((step.call, "call"), (step.link, "link")):
            if not target:
                continue
            if target in skill.blocks:
                out.append(((skill.id, target), step, what))
                continue
            callee = project.skills.get(target)
            if callee is not None and callee.body_is_single_block:
                out.append(((callee.id, next(iter(callee.blocks))), step, what))
    return out


def call_cycles(project: Project) -> Iterator[Diagnostic]:
    """One error per cycle of call/link steps (iterative depth-first search)."""
    done: set[BlockKey] = set()
    for skill in project.skills.values():
        for block in skill.blocks:
            start = (skill.id, block)
            if start in done:
                continue
            yield from _search(project, start, done)


def _search(project: Project, start: BlockKey, done: set[BlockKey]) -> Iterator[Diagnostic]:
    path: list[BlockKey] = [start]
    on_path = {start}
    pending = [iter(_edges(project, start))]
    while pending:
        following = next(pending[-1], None)
        if following is None:
            pending.pop()
            finished = path.pop()
            on_path.discard(finished)
            done.add(finished)
            continue
        target, step, what = following
        if target in on_path:
            cycle = [*path[path.index(target) :], target]
            yield _report(cycle, step, what)
            continue
        if target in done:
            continue
        path.append(target)
        on_path.add(target)
        pending.append(iter(_edges(project, target)))


def _report(cycle: list[BlockKey], step: Step, what: str) -> Diagnostic:
    shown = " -> ".join(f"{skill}.{block}" for skill, block in cycle)
    return Diagnostic(
        "mantle-call-cycle",
        f"'{what}:' closes a cycle of call/link steps ({shown}): it loops without the model "
        "or the user, so every turn would stop at the deterministic-step limit; end one of "
        "these blocks instead, or let the model choose the next block",
        step.span,
        Severity.ERROR,
        step.file,
    )
