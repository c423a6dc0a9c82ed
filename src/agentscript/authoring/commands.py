"""The authoring commands as functions: ``prompts``, ``graph`` and ``check-gates``.

Each takes a path and output streams, prints, and returns the exit code (0 done, 1 the agent
has errors or an assertion failed, 2 bad usage: a path that cannot be read, as for ``validate``),
so the CLI stays a thin parser of options. An agent with errors is reported with its
diagnostics, never analysed half-checked. Text taken from the agent is printed through
``terminal_safe``: a string literal in a guard must not drive the terminal. In Markdown it is
also kept as text: in fenced blocks and code spans longer than any backtick run it holds.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from agentscript.check.outline import AgentOutline
from agentscript.diagnostics import Diagnostic
from agentscript.render import terminal_safe


@dataclass(slots=True)
class Loaded:
    """An agent ready for static analysis: exactly one of ``outline`` / ``project`` is set."""

    path: Path
    outline: AgentOutline | None = None
    project: Any = None


def load_for_authoring(path: Path) -> tuple[Loaded | None, list[Diagnostic]]:
    """Parse and check an ``.agent`` file, or load a Mantle project, without running it."""
    from agentscript.check import check
    from agentscript.loader import parse_file

    if path.is_dir() or path.name in ("agent.yml", "agent.yaml"):
        from agentscript.mantle import load_project

        project, diagnostics = load_project(path if path.is_dir() else path.parent)
        errors = [d for d in diagnostics if d.is_error]
        if project is None or errors:
            return None, errors or diagnostics
        return Loaded(path, project=project), diagnostics
    doc, diagnostics = parse_file(path)
    if doc is None:
        return None, diagnostics
    result = check(doc)
    everything = diagnostics + result.diagnostics
    if any(d.is_error for d in everything):
        return None, [d for d in everything if d.is_error]
    return Loaded(path, outline=result.outline), everything


def _report(diagnostics: list[Diagnostic], path: Path, err: TextIO) -> int:
    from agentscript.discover import any_unreadable

    shown = terminal_safe(str(path))
    for diag in diagnostics:
        where = terminal_safe(diag.file or str(path))
        err.write(
            f"{where}:{diag.span.line}:{diag.span.column}: {diag.severity}[{diag.code}]: "
            f"{terminal_safe(diag.message)}\n"
        )
    if any_unreadable(diagnostics):
        return 2  # a path that cannot be read is bad usage, as for `validate` and `fmt`
    if not diagnostics:
        err.write(f"{shown}: not an agent file or Mantle project\n")
    err.write(f"{shown}: fix the errors above first (agentscript validate {shown})\n")
    return 1


def prompts_command(path: Path, node: str | None, fmt: str, out: TextIO, err: TextIO) -> int:
    """``agentscript prompts``: every reachable effective prompt, per node or skill."""
    from agentscript.authoring.prompts import node_prompts, skill_catalogue, skill_prompts

    loaded, diagnostics = load_for_authoring(path)
    if loaded is None:
        return _report(diagnostics, path, err)
    catalogue = None
    # `--node` filters before the walk: one skill of a large project costs one skill.
    if loaded.outline is not None:
        results = node_prompts(loaded.outline, only=node)
    else:
        results = skill_prompts(loaded.project, only=node)
        catalogue = skill_catalogue(loaded.project)
    if node is not None and not results:
        err.write(
            f"{terminal_safe(str(path))}: no node or skill named {terminal_safe(repr(node))}\n"
        )
        return 2
    if fmt == "json":
        out.write(json.dumps([r.to_json() for r in results], indent=2) + "\n")
        return 0
    markdown = fmt == "markdown"
    if catalogue is not None and catalogue.entries:
        # Shown once: each case's system prompt below stands for it with `catalogue.reference`.
        title = f'skill catalogue (the "{catalogue.heading}" section of every system prompt)'
        lines = [terminal_safe(line) for line in catalogue.lines]
        if markdown:
            out.write(f"## {title}\n\n" + _md_fenced("\n".join(lines)) + "\n")
        else:
            out.write(f"== {title} ==\n" + "".join(f"    {line}\n" for line in lines) + "\n")
    for result in results:
        name = terminal_safe(result.node)
        out.write(f"## {_md_name(name)}\n\n" if markdown else f"== {name} ==\n")
        for number, case in enumerate(result.cases, 1):
            label = terminal_safe(case.label)
            title = f"case {number} of {len(result.cases)}: "
            out.write(f"### {title}{_md_code(label)}\n\n" if markdown else f"-- {title}{label}\n")
            _write_case(case, out, markdown)
        if result.truncated:
            out.write("(more paths exist than are shown: the walk stopped at its case limit)\n")
        out.write("\n")
    return 0


def _write_case(case: Any, out: TextIO, markdown: bool) -> None:
    def block(title: str, text: str) -> None:
        text = terminal_safe(text, keep_newlines=True)
        if markdown:
            out.write(f"**{title}**\n\n" + _md_fenced(text) + "\n")
        else:
            lines = text.split("\n")
            if lines[-1] == "":
                lines.pop()  # as str.splitlines() did: a final newline adds no empty line
            body = "\n".join("    " + line for line in lines) or "    (empty)"
            out.write(f"  {title}:\n{body}\n")

    def line(title: str, text: str, before: str = "", after: str = "") -> None:
        # ``text`` comes from the agent; ``before`` and ``after`` are ours.
        text = terminal_safe(text)
        if markdown:
            out.write(f"**{title}:** {before}{_md_code(text)}{after}\n\n")
        else:
            out.write(f"  {title}: {before}{text}{after}\n")

    if case.transition is not None:
        line(
            "transition",
            case.transition,
            "to ",
            " before any model call (the prompt is discarded)",
        )
    else:
        block("system", case.system)
        block("instructions", case.instructions)
        if case.tools:
            line("tools", ", ".join(case.tools))
        else:
            line("tools", "", "(none)")
        for name, guard in case.conditional_tools.items():
            line("offered when", f"{name}: {guard}")
        for name, guard in case.hidden_tools.items():
            line("hidden", f"{name} (available when {guard})")
    if case.effects:
        line("effects", "; ".join(case.effects))


# Markdown of `prompts --format markdown` (shown by the VS Code extension's "Show Effective
# Prompts"): the agent's text must stay text. A fenced block ends at a line of as many
# backticks as opened it, so each fence is longer than any backtick run in its text (an
# instruction line of ``` closed a fixed fence, and what followed was read as Markdown); an
# inline value goes in a code span sized the same way, where neither HTML (`<img onerror>`)
# nor links, emphasis or entities are read.
_BACKTICKS = re.compile("`+")
_PLAIN_NAME = re.compile(r"[\w.-]+")


def _longest_backticks(text: str) -> int:
    return max((len(run) for run in _BACKTICKS.findall(text)), default=0)


def _md_fenced(text: str) -> str:
    """``text`` as a fenced block no line of it can close (CommonMark: a closing fence is at
    least as long as the opening one)."""
    fence = "`" * max(3, _longest_backticks(text) + 1)
    return f"{fence}text\n{text}\n{fence}\n"


def _md_code(text: str) -> str:
    """``text`` as one code span (nothing in it is read as Markdown or HTML); "" for no text."""
    if not text:
        return ""
    ticks = "`" * (_longest_backticks(text) + 1)
    # A span's content that starts or ends with a backtick needs a space beside it (one space
    # each side is stripped by the reader), as does one that starts and ends with a space.
    pad = " " if text[0] in "` " or text[-1] in "` " else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def _md_name(name: str) -> str:
    """A node or skill name for a heading: as it is when it is a plain name, else a code span."""
    return name if _PLAIN_NAME.fullmatch(name) else _md_code(name)


def graph_command(path: Path, fmt: str, out: TextIO, err: TextIO) -> int:
    """``agentscript graph``: the agent's control graph as Mermaid, DOT, SVG or JSON."""
    from agentscript.authoring.graph import agent_graph, mantle_graph
    from agentscript.authoring.render import RENDERERS

    loaded, diagnostics = load_for_authoring(path)
    if loaded is None:
        return _report(diagnostics, path, err)
    if loaded.outline is not None:
        graph = agent_graph(loaded.outline, path.stem)
    else:
        graph = mantle_graph(loaded.project, path.name)
    out.write(RENDERERS[fmt](graph))
    return 0


def gates_command(path: Path, fmt: str, out: TextIO, err: TextIO) -> int:
    """``agentscript check-gates``: each gate, what opens it, and the agent's assertions."""
    from agentscript.authoring.gates import check_asserts, gate_proofs, load_asserts

    loaded, diagnostics = load_for_authoring(path)
    if loaded is None:
        return _report(diagnostics, path, err)
    if loaded.outline is None:
        err.write(
            f"{terminal_safe(str(path))}: check-gates reads Agent Script agents; Mantle tool constraints are "
            "listed by `agentscript prompts`\n"
        )
        return 2
    proofs = gate_proofs(loaded.outline)
    asserts, problems = load_asserts(path, loaded.outline)
    for problem in problems:
        err.write(f"{terminal_safe(str(problem))}\n")
    if problems:
        return 2
    failures = check_asserts(loaded.outline, asserts)
    if fmt == "json":
        out.write(
            json.dumps(
                {
                    "gates": [p.to_json() for p in proofs],
                    "asserts": [f.to_json() for f in failures],
                },
                indent=2,
            )
            + "\n"
        )
    else:
        for proof in proofs:
            out.write(terminal_safe(proof.sentence()) + "\n")
            for writer in proof.writers:
                out.write(f"    {terminal_safe(str(writer))}\n")
        if not proofs:
            out.write("No gated tools or transitions.\n")
        for failure in failures:
            out.write(f"ASSERT FAILED: {terminal_safe(failure.describe())}\n")
        if asserts and not failures:
            out.write(f"All {len(asserts)} assertions hold.\n")
    return 1 if failures else 0
