"""Mutation testing of a suite: small breaking edits to the agent, and whether the suite notices.

Mutants of an ``.agent`` file, each one edit found in its syntax tree: drop an ``available
when`` line, invert an ``if`` / ``else if`` condition (``not (...)``), swap a ``transition to``
target for another subagent, delete a ``set`` or a ``run`` (with its body). Mutants of a Mantle
project: drop a tool constraint's ``requires``, drop a step of an ordered block (``skill.md``
frontmatter lines). Each mutant is written into a copy of the agent's folder and the suite runs
against it: the mutant is *killed* when a case fails or errors, *survived* when every case
passes, *invalid* when the mutated agent does not load (not counted). The mutation score is
killed / (killed + survived); survivors are listed by source line.

The copies read the ``agentscript.toml`` that applies to the original agent (none when none
does), wherever it sits. Before any mutant, the suite runs on an unmutated copy: when it does
not pass there (the agent needs a file outside its folder, say), every mutant would fail for
that reason and count as killed, so :func:`run_mutants` raises :class:`UnmutatedCopyFails`
instead of scoring.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentscript.models.config import CONFIG_ENV, find_config
from agentscript.syntax import parse
from agentscript.syntax.tree import (
    AvailableWhenStmt,
    IfStmt,
    RunStmt,
    SetStmt,
    TransitionStmt,
    walk,
)

_TARGET = re.compile(r"@(subagent|topic)\.([A-Za-z_][A-Za-z0-9_]*)")
_NODE = re.compile(r"^(?:start_agent|subagent|topic)\s+([A-Za-z_][A-Za-z0-9_]*)\s*:", re.M)


@dataclass
class Mutant:
    kind: str  # drop_available_when, invert_if, swap_transition, delete_set, delete_run, ...
    file: Path  # the mutated file, relative to the agent's folder
    line: int
    description: str
    text: str  # the whole mutated file
    status: str = "pending"  # killed | survived | invalid

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "file": str(self.file),
            "line": self.line,
            "description": self.description,
            "status": self.status,
        }


def _replace_line(lines: list[str], number: int, text: str) -> str:
    return "".join([*lines[: number - 1], text, *lines[number:]])


def _without_lines(lines: list[str], first: int, last: int) -> str:
    kept = lines[: first - 1] + lines[last:]
    return "".join(kept)


def script_mutants(path: Path) -> list[Mutant]:
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines(keepends=True)
    document = parse(text)
    found_nodes = _NODE.findall(text)
    # Swap to a non-start subagent first: the start agent is usually the first node.
    nodes = found_nodes[1:] + found_nodes[:1]
    name = Path(path.name)
    found: list[Mutant] = []
    for node in walk(document):
        line = node.span.line if hasattr(node, "span") else 0
        if isinstance(node, AvailableWhenStmt):
            found.append(
                Mutant(
                    "drop_available_when",
                    name,
                    line,
                    lines[line - 1].strip(),
                    _without_lines(lines, line, line),
                )
            )
        elif isinstance(node, IfStmt):
            clauses = [(node.span.line, "if")] + [(c.span.line, "else if") for c in node.else_ifs]
            for at, keyword in clauses:
                source = lines[at - 1]
                match = re.match(rf"^(\s*{keyword}\s+)(.*?)(\s*:\s*(#.*)?)$", source.rstrip("\n"))
                if match:
                    inverted = f"{match.group(1)}not ({match.group(2)}){match.group(3)}\n"
                    mutated = _replace_line(lines, at, inverted)
                    found.append(Mutant("invert_if", name, at, source.strip(), mutated))
        elif isinstance(node, TransitionStmt | SetStmt | RunStmt):
            source = lines[line - 1]
            if isinstance(node, TransitionStmt) or "transition to" in source:
                target = _TARGET.search(source)
                others = [n for n in nodes if target and n != target.group(2)]
                if target and others:
                    swapped = source.replace(target.group(0), f"@subagent.{others[0]}", 1)
                    mutated = _replace_line(lines, line, swapped)
                    found.append(
                        Mutant(
                            "swap_transition",
                            name,
                            line,
                            f"{source.strip()} -> {others[0]}",
                            mutated,
                        )
                    )
            if isinstance(node, SetStmt | RunStmt) and source.lstrip().startswith(("set ", "run ")):
                kind = "delete_set" if isinstance(node, SetStmt) else "delete_run"
                last = max(node.span.end_line, line)
                if node.span.end_column == 1 and last > line:
                    last -= 1
                found.append(
                    Mutant(kind, name, line, source.strip(), _without_lines(lines, line, last))
                )
    # Transition tools (`x: @utils.transition to @subagent.y`) are entries, not statements.
    for index, source in enumerate(lines, start=1):
        if "@utils.transition to" in source:
            target = _TARGET.search(source)
            others = [n for n in nodes if target and n != target.group(2)]
            if target and others:
                swapped = source.replace(target.group(0), f"@subagent.{others[0]}", 1)
                found.append(
                    Mutant(
                        "swap_transition",
                        name,
                        index,
                        f"{source.strip()} -> {others[0]}",
                        _replace_line(lines, index, swapped),
                    )
                )
    unique: dict[tuple[str, int], Mutant] = {}
    for mutant in found:
        unique.setdefault((mutant.kind, mutant.line), mutant)
    return sorted(unique.values(), key=lambda m: (m.line, m.kind))


def mantle_mutants(project: Path) -> list[Mutant]:
    """Drop a ``requires:`` of a tool constraint, or one step of an ordered block."""
    found: list[Mutant] = []
    for skill_file in sorted(project.glob("skills/*/skill.md")):
        lines = skill_file.read_text(encoding="utf-8").splitlines(keepends=True)
        relative = skill_file.relative_to(project)
        in_constraints = False
        for index, source in enumerate(lines, start=1):
            stripped = source.strip()
            indent = len(source) - len(source.lstrip())
            if stripped.startswith("tool_constraints:"):
                in_constraints = True
            elif indent == 0 and stripped:
                in_constraints = False
            if in_constraints and stripped.startswith("requires:"):
                found.append(
                    Mutant(
                        "drop_tool_constraint",
                        relative,
                        index,
                        stripped,
                        _without_lines(lines, index, index),
                    )
                )
            if re.match(r"^\s*-\s*(id|collect|execute_tool|set_memory|utter):", source):
                last = index
                while (
                    last < len(lines)
                    and lines[last].strip()
                    and (len(lines[last]) - len(lines[last].lstrip()) > indent + 1)
                    and not lines[last].lstrip().startswith("- ")
                ):
                    last += 1
                found.append(
                    Mutant(
                        "drop_block_step",
                        relative,
                        index,
                        stripped,
                        _without_lines(lines, index, last),
                    )
                )
    return found


RunSuite = Callable[[Path], Awaitable[bool]]  # the agent path -> True when the suite failed


async def run_mutants(agent_path: Path, mutants: list[Mutant], suite_fails: RunSuite) -> None:
    """Run the suite against each mutant (in a temporary copy of the agent's folder).

    First against an unmutated copy: :class:`UnmutatedCopyFails` when the suite does not pass
    there (then no mutant runs and every status stays ``pending``)."""
    agent_path = agent_path.resolve()
    folder = agent_path if agent_path.is_dir() else agent_path.parent
    with (
        tempfile.TemporaryDirectory(prefix="agentscript-mutant-") as scratch,
        _original_config(agent_path, Path(scratch)),
    ):

        async def run(name: str, mutant: Mutant | None) -> bool:
            """Whether the suite failed on this copy; _Invalid when the copy does not load."""
            copy = Path(scratch) / name
            # Links are copied as links: following them, a link to a parent folder (sub/up -> ..)
            # copies the folder into itself until the path is too long.
            shutil.copytree(
                folder, copy, symlinks=True, ignore=shutil.ignore_patterns("*.replay.json", ".*")
            )
            try:
                if mutant is not None:
                    _own_file(copy, mutant.file).write_text(mutant.text, encoding="utf-8")
                return await suite_fails(copy if agent_path.is_dir() else copy / agent_path.name)
            finally:
                shutil.rmtree(copy, ignore_errors=True)

        try:
            baseline_failed = await run("unmutated", None)
        except _Invalid:
            raise UnmutatedCopyFails(agent_path, loads=False) from None
        if baseline_failed:
            raise UnmutatedCopyFails(agent_path, loads=True)
        for mutant in mutants:
            try:
                failed = await run(f"m{id(mutant)}", mutant)
            except _Invalid:
                mutant.status = "invalid"
            else:
                mutant.status = "killed" if failed else "survived"


@contextlib.contextmanager
def _original_config(agent_path: Path, scratch: Path) -> Iterator[None]:
    """While the copies run, ``$AGENTSCRIPT_CONFIG`` names the ``agentscript.toml`` that applies
    to the original agent; restored in ``finally``.

    Found from a copy, it would be whatever lies above the scratch folder: a file in a parent
    of the agent's folder (MCP servers, limits, action settings) is lost, and mutants failed
    for that and counted as killed (2 of 2, 100%, where the same agent beside its file scored
    50%). Through the variable because ``agentscript.load`` takes no configuration path and a
    session reads ``[actions]`` when it starts. When no file applies to the original, an empty
    one stands in, so none found above the scratch folder applies to the copies either."""
    config = find_config(agent_path)
    if config is None:
        config = scratch / "no-config.toml"
        config.write_text("# no agentscript.toml applies to the original\n", encoding="utf-8")
    previous = os.environ.get(CONFIG_ENV)
    os.environ[CONFIG_ENV] = str(config.resolve())
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(CONFIG_ENV, None)
        else:
            os.environ[CONFIG_ENV] = previous


class UnmutatedCopyFails(Exception):
    """The suite does not pass on an unmutated copy of the agent (or the copy does not load):
    a mutant failing could not be told from the copy failing, so there is no score."""

    def __init__(self, agent: Path, *, loads: bool) -> None:
        self.agent = agent
        self.loads = loads  # False: the copy did not even load
        super().__init__(
            "the suite does not pass on an unmutated copy of the agent "
            + ("" if loads else "(the copy does not load) ")
            + "in a temporary folder, so every mutant would count as killed; keep every file "
            "the agent needs (Python actions, tools, data) in its folder"
        )


def _own_file(copy: Path, relative: Path) -> Path:
    """``copy / relative``, with every link on the way replaced by a real copy of its target.

    The copy keeps links as links, so writing the mutated file through one would edit the
    user's real file (or the file shared by every mutant)."""
    current = copy
    for part in relative.parts:
        current = current / part
        if current.is_symlink():
            target = current.resolve()
            current.unlink()
            if target.is_dir():
                shutil.copytree(target, current, symlinks=True)
            elif target.is_file():
                shutil.copy2(target, current)
    return current


class _Invalid(Exception):
    """The mutated agent does not load: the mutant is not counted."""


def invalid() -> Exception:
    return _Invalid()


def score(mutants: list[Mutant]) -> float | None:
    killed = sum(m.status == "killed" for m in mutants)
    survived = sum(m.status == "survived" for m in mutants)
    return 100.0 * killed / (killed + survived) if killed + survived else None


def render(agent: str, mutants: list[Mutant]) -> str:
    value = score(mutants)
    counts = {s: sum(m.status == s for m in mutants) for s in ("killed", "survived", "invalid")}
    lines = [
        f"mutation testing of {agent}: {len(mutants)} mutants, {counts['killed']} killed, "
        f"{counts['survived']} survived, {counts['invalid']} invalid; mutation score "
        + (f"{value:.1f}%" if value is not None else "n/a")
    ]
    for mutant in mutants:
        if mutant.status == "survived":
            lines.append(
                f"  SURVIVED {mutant.file}:{mutant.line} {mutant.kind}: {mutant.description}"
            )
    return "\n".join(lines) + "\n"
