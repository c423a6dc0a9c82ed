"""Anti-pattern lints: the mistakes authors of deterministic-first agents make again and again.

Each lint is a warning with its own code (listed with a wrong and a right example in
``docs/diagnostics.md``), run by ``agentscript validate`` after the checker on a file without
errors. Some carry a :class:`Fix`, a line edit that ``agentscript fmt --fix`` applies when it is
safe (the fixed file must parse to no new error).

In: the parsed document, its checked outline and the source text (Agent Script), or a loaded
project (Mantle). Out: diagnostics. Never raises on a checked outline; a lint that cannot decide
stays silent.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from agentscript.authoring.gates import gate_proofs
from agentscript.authoring.graph import agent_graph
from agentscript.authoring.lsp_positions import split_lines
from agentscript.check.outline import AgentOutline, SubagentInfo
from agentscript.diagnostics import Diagnostic, Span, warning
from agentscript.engine.program import Program, walk_statements
from agentscript.syntax.tree import (
    Block,
    CollectStmt,
    IfStmt,
    RunStmt,
    SetStmt,
    Template,
    TemplateStmt,
    TransitionStmt,
)

CHECK_BELOW_PROSE = "check-below-prose"
PROCEDURE_IN_LITERAL = "procedure-syntax-in-literal"
BARE_REFERENCE = "bare-reference-in-prose"
PROSE_CONDITIONAL = "prose-conditional"
REPEATED_PERSONA = "repeated-persona"
UNGUARDED_CONSEQUENTIAL = "unguarded-consequential-action"
UNREACHABLE_SUBAGENT = "unreachable-subagent"
SELF_TRANSITION = "self-transition-no-change"
WRITTEN_NEVER_READ = "variable-written-never-read"
GATE_NEVER_OPENS = "gate-never-opens"
CONFIRMATION_SKIPPED_BY_RUN = "confirmation-skipped-by-run"
MANTLE_COLLECT_NO_UTTERANCE = "collect-without-utterance"
MANTLE_CONSTRAINT_UNSATISFIABLE = "constraint-never-satisfiable"

LINT_CODES = (
    CHECK_BELOW_PROSE,
    PROCEDURE_IN_LITERAL,
    BARE_REFERENCE,
    PROSE_CONDITIONAL,
    REPEATED_PERSONA,
    UNGUARDED_CONSEQUENTIAL,
    UNREACHABLE_SUBAGENT,
    SELF_TRANSITION,
    WRITTEN_NEVER_READ,
    GATE_NEVER_OPENS,
    CONFIRMATION_SKIPPED_BY_RUN,
    MANTLE_COLLECT_NO_UTTERANCE,
    MANTLE_CONSTRAINT_UNSATISFIABLE,
)


@dataclass(frozen=True, slots=True)
class Fix:
    """Replace source lines ``start``..``end`` (1-based, inclusive) by ``lines``; ``insert_at``
    moves them instead: they are removed and inserted before line ``insert_at``."""

    start: int
    end: int
    lines: tuple[str, ...]
    insert_at: int | None = None


@dataclass(slots=True)
class Finding:
    diagnostic: Diagnostic
    fix: Fix | None = None


_PROCEDURE_SYNTAX = re.compile(r"^\s*(if\s.+:\s*$|run\s+@|set\s+@|transition\s+to\b)")
_BARE_REFERENCE = re.compile(r"(?<![{!\w])@(variables|outputs)\.(\w+)")
# Verbs that change the world, matched on the tool's and action's names (descriptions mention
# "payment" in read-only lookups too often to be a signal: 25 false hits in the corpus).
_CONSEQUENTIAL = re.compile(
    r"(?<![a-z])(refund|pay|charge|debit|delete|remove|cancel|transfer|update|modify|write|"
    r"close|terminate|withdraw|wire|purchase|book|submit|issue|create)(?![a-z])",
    re.IGNORECASE,
)
_PERSONA_MIN = 40  # shorter repeated lines are usually headings or one-word reminders


def lint_agent(outline: AgentOutline, source: str) -> list[Diagnostic]:
    """Every lint warning of a checked agent."""
    return [f.diagnostic for f in findings(outline, source)]


def findings(outline: AgentOutline, source: str) -> list[Finding]:
    # Numbered as the parser numbers the outline's spans (not ``str.splitlines``, which also
    # breaks at \f, \u2028 and the like): a lint quotes and fixes the line its span names.
    lines = split_lines(source)
    program = Program(outline)  # shared: building it is most of what the graph lints cost
    found: list[Finding] = []
    for rule in _AGENT_RULES:
        found.extend(rule(outline, lines, program))
    found.sort(key=lambda f: (f.diagnostic.span.line, f.diagnostic.span.column))
    return found


# -- prose and procedures -----------------------------------------------------------------


def _procedures(info: SubagentInfo) -> Iterator[tuple[str, Block]]:
    for where, block in (
        ("before_reasoning", info.before_reasoning),
        ("instructions", info.instructions),
        ("after_reasoning", info.after_reasoning),
    ):
        if isinstance(block, Block):
            yield where, block


def _templates(outline: AgentOutline) -> Iterator[tuple[SubagentInfo, Template]]:
    for info in outline.subagents.values():
        if isinstance(info.instructions, Template):
            yield info, info.instructions
        for _where, block in _procedures(info):
            yield from ((info, t) for t in _block_templates(block))


def _block_templates(block: Block) -> Iterator[Template]:
    for item in block.statements():
        if isinstance(item, TemplateStmt):
            yield item.template
        elif isinstance(item, IfStmt):
            yield from _block_templates(item.body)
            for branch in item.else_ifs:
                yield from _block_templates(branch.body)
            if item.else_clause is not None:
                yield from _block_templates(item.else_clause.body)
        elif isinstance(item, RunStmt) and item.body is not None:
            yield from _block_templates(item.body)


def _check_below_prose(
    outline: AgentOutline, lines: list[str], program: Program
) -> Iterator[Finding]:
    for info in outline.subagents.values():
        if not isinstance(info.instructions, Block):
            continue
        items = list(info.instructions.statements())
        first_prose: TemplateStmt | None = None
        for index, item in enumerate(items):
            if isinstance(item, TemplateStmt) and first_prose is None:
                first_prose = item
            if not (isinstance(item, IfStmt) and first_prose is not None):
                continue
            if not any(isinstance(s, TransitionStmt) for s in item.body.statements()):
                continue
            between = items[items.index(first_prose) : index]
            safe = all(isinstance(s, TemplateStmt) for s in between) and _moves_cleanly(
                item, [s for s in between if isinstance(s, TemplateStmt)]
            )
            fix = None
            if safe:
                start, end = item.span.line, _last_line(item)
                fix = Fix(
                    start, end, tuple(lines[start - 1 : end]), insert_at=first_prose.span.line
                )
            yield Finding(
                warning(
                    CHECK_BELOW_PROSE,
                    f"this check transitions after prose lines of {info.name}'s instructions "
                    f"(line {first_prose.span.line}): on re-resolution the model is given text "
                    "that the transition makes stale; put the check at the top of the "
                    "instructions",
                    item.span,
                ),
                fix,
            )


def _moves_cleanly(item: IfStmt, prose: list[TemplateStmt]) -> bool:
    """Whether moving ``item`` above ``prose`` leaves every path's prompt as it was. Its body
    transitions, so that path's prompt is discarded either way; a branch that goes on to the
    model must add no text (moved, it would come before the prose: `else:` then `| Ask ...`
    swapped two lines) and, when the prose interpolates values, write nothing (the prose would
    be rendered after the write). A branch that transitions itself is discarded too."""
    interpolates = any(not stmt.template.is_static for stmt in prose)
    branches = [clause.body for clause in item.else_ifs]
    if item.else_clause is not None:
        branches.append(item.else_clause.body)
    for branch in branches:
        if any(isinstance(stmt, TransitionStmt) for stmt in branch.statements()):
            continue
        for stmt in walk_statements(branch):
            if isinstance(stmt, TemplateStmt):
                return False
            if interpolates and isinstance(stmt, SetStmt | RunStmt | CollectStmt):
                return False
    return True


def _last_line(item: IfStmt) -> int:
    end = item.span.end_line
    for branch in [item.body, *(e.body for e in item.else_ifs)]:
        end = max(end, branch.span.end_line)
    if item.else_clause is not None:
        end = max(end, item.else_clause.body.span.end_line)
    return end


def _procedure_in_literal(
    outline: AgentOutline, lines: list[str], program: Program
) -> Iterator[Finding]:
    for info, template in _templates(outline):
        for offset, text in enumerate(template.lines):
            if _PROCEDURE_SYNTAX.match(text):
                line = _template_line(template, offset)
                yield Finding(
                    warning(
                        PROCEDURE_IN_LITERAL,
                        f"'{text.strip()}' is literal text in {info.name}'s instructions: the "
                        "model reads it verbatim and nothing runs; write it as a procedure "
                        "statement (instructions: -> with the statement outside '|' lines)",
                        Span(line, 1, line, len(lines[line - 1]) + 1 if line <= len(lines) else 2),
                    )
                )


def _template_line(template: Template, offset: int) -> int:
    return template.span.line + offset


_INTERPOLATION = re.compile(r"\{!.*?\}")


def _outside_interpolations(text: str) -> list[tuple[int, int]]:
    """The (start, end) column ranges of ``text`` not inside ``{!...}``."""
    ranges, position = [], 0
    for match in _INTERPOLATION.finditer(text):
        ranges.append((position, match.start()))
        position = match.end()
    ranges.append((position, len(text)))
    return ranges


def _bare_reference(outline: AgentOutline, lines: list[str], program: Program) -> Iterator[Finding]:
    seen: set[int] = set()
    for info, template in _templates(outline):
        if template.is_static and not any("@" in t for t in template.lines):
            continue
        for line in range(template.span.line, template.span.end_line + 1):
            if line in seen or line > len(lines):
                continue
            seen.add(line)
            text = lines[line - 1]
            found = [
                m
                for start, end in _outside_interpolations(text)
                for m in _BARE_REFERENCE.finditer(text, start, end)
            ]
            if not found:
                continue
            fixed = "".join(
                _BARE_REFERENCE.sub(lambda m: "{!" + m.group(0) + "}", text[start:end])
                + (text[end:next_start] if next_start is not None else "")
                for (start, end), next_start in zip(
                    _outside_interpolations(text),
                    [r[0] for r in _outside_interpolations(text)[1:]] + [None],
                    strict=True,
                )
            )
            for match in found:
                yield Finding(
                    warning(
                        BARE_REFERENCE,
                        f"'{match.group(0)}' in {info.name}'s prose reaches the model as the "
                        f"words '{match.group(0)}', not its value; write {{!{match.group(0)}}}",
                        Span(line, match.start() + 1, line, match.end() + 1),
                    ),
                    Fix(line, line, (fixed,)),
                )


def _prose_conditional(
    outline: AgentOutline, lines: list[str], program: Program
) -> Iterator[Finding]:
    flags: dict[str, list[str]] = {}
    for name, variable in outline.variables.items():
        if variable.type.lower() == "boolean":
            snake = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", name).lower()
            words = [w for w in snake.split("_") if w not in ("is", "has", "was", "")]
            if words:
                flags[name] = words
    if not flags:
        return
    for _info, template in _templates(outline):
        for offset, text in enumerate(template.lines):
            stripped = text.strip().lower()
            if _PROCEDURE_SYNTAX.match(text) or not stripped.startswith(
                ("if ", "when ", "unless ", "only if ")
            ):
                continue
            for name, words in flags.items():
                if all(re.search(rf"\b{re.escape(w)}", stripped) for w in words):
                    line = _template_line(template, offset)
                    yield Finding(
                        warning(
                            PROSE_CONDITIONAL,
                            f"this line asks the model to decide '{text.strip()}', but "
                            f"@variables.{name} already knows it; use "
                            f"'if @variables.{name}:' so the framework decides",
                            Span(line, 1, line, 2),
                        )
                    )
                    break


def _repeated_persona(
    outline: AgentOutline, lines: list[str], program: Program
) -> Iterator[Finding]:
    first: dict[str, str] = {}
    for info, template in _templates(outline):
        repeated: list[tuple[int, str]] = []
        for offset, text in enumerate(template.lines):
            key = " ".join(text.split())
            if len(key) < _PERSONA_MIN:
                continue
            owner = first.setdefault(key, info.name)
            if owner != info.name:
                repeated.append((offset, owner))
        if repeated:
            offset, owner = repeated[0]
            line = _template_line(template, offset)
            count = (
                f"{len(repeated)} lines of this text repeat"
                if len(repeated) > 1
                else ("this line repeats")
            )
            yield Finding(
                warning(
                    REPEATED_PERSONA,
                    f"{count} {owner}'s instructions; text every subagent needs belongs once "
                    "in system.instructions",
                    Span(line, 1, line, 2),
                )
            )


def _unguarded_consequential(
    outline: AgentOutline, lines: list[str], program: Program
) -> Iterator[Finding]:
    for info in outline.subagents.values():
        for binding in info.tools.values():
            if binding.kind != "action" or binding.available_when:
                continue
            action = info.actions.get(binding.target or "")
            if action is not None and action.require_user_confirmation:
                continue
            words = " ".join(filter(None, [binding.name, binding.target])).replace("_", " ")
            words = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", words)
            match = _CONSEQUENTIAL.search(words)
            if match is None:
                continue
            yield Finding(
                warning(
                    UNGUARDED_CONSEQUENTIAL,
                    f"{binding.name} looks consequential ('{match.group(0)}') but the model can "
                    "call it at any time; add 'available when' on the state that must hold, or "
                    "require_user_confirmation: True on the action",
                    binding.span,
                )
            )


def _confirmation_skipped_by_run(
    outline: AgentOutline, lines: list[str], program: Program
) -> Iterator[Finding]:
    # require_user_confirmation holds the model's calls of a tool (S13); a procedure's `run`
    # is the author's own step and runs at once, even in the callback of a tool the model
    # called. An author who marked the action may expect otherwise.
    for info in outline.subagents.values():
        blocks = [block for _where, block in _procedures(info)]
        blocks += [b.body for b in info.tools.values() if b.body is not None]
        for block in blocks:
            for stmt in walk_statements(block):
                if not isinstance(stmt, RunStmt):
                    continue
                action = program.action_of(info, stmt.target)
                if action is None or not action.require_user_confirmation:
                    continue
                yield Finding(
                    warning(
                        CONFIRMATION_SKIPPED_BY_RUN,
                        f"run @actions.{action.name} runs without asking the user: "
                        "require_user_confirmation holds only the model's calls of the action; "
                        "offer it as a tool for the model to call, or drop the run",
                        stmt.span,
                    )
                )


def _unreachable(outline: AgentOutline, lines: list[str], program: Program) -> Iterator[Finding]:
    if outline.start_agent is None:
        return
    graph = agent_graph(outline, program=program, guards=False)
    reached = graph.reachable(outline.start_agent)
    for info in outline.subagents.values():
        if info.name not in reached:
            yield Finding(
                warning(
                    UNREACHABLE_SUBAGENT,
                    f"nothing transitions or delegates to {info.name} from "
                    f"{outline.start_agent}: it can never run",
                    info.span,
                )
            )


def _self_transition(
    outline: AgentOutline, lines: list[str], program: Program
) -> Iterator[Finding]:
    for info in outline.subagents.values():
        for binding in info.tools.values():
            if binding.kind != "transition" or binding.target != info.name:
                continue
            body = binding.body
            # A change under an `if` of the callback counts: the node may restart changed.
            changes = body is not None and any(
                isinstance(s, SetStmt | RunStmt) for s in walk_statements(body)
            )
            if not changes:
                yield Finding(
                    warning(
                        SELF_TRANSITION,
                        f"{binding.name} transitions {info.name} to itself without changing "
                        "anything: the node restarts in the same state, a loop the turn limit "
                        "ends; set a variable in its callback or remove it",
                        binding.span,
                    )
                )


_VARIABLE_USE = re.compile(r"@variables\.(\w+)")
_WORD_CHAR = re.compile(r"\w")


def _is_write(source: str, at: int) -> bool:
    """Whether the ``@variables.x`` at ``at`` is the target of a ``set`` or ``collect``: the
    word before it, after white space, is one of them and starts a word (what the pattern
    ``\\b(?:set|collect)\\s+@variables`` says, without a regex search of the whole text,
    which alone cost more than half of the lints on a 100 KB file)."""
    end = at
    while end > 0 and source[end - 1].isspace():
        end -= 1
    if end == at:
        return False
    for word in ("set", "collect"):
        start = end - len(word)
        if (
            start >= 0
            and source.startswith(word, start)
            and (start == 0 or not _WORD_CHAR.match(source, start - 1))
        ):
            return True
    return False


def _written_never_read(
    outline: AgentOutline, lines: list[str], program: Program
) -> Iterator[Finding]:
    # Counted on the text in one pass each: every mention that is not the target of a `set`
    # or `collect` is a read (conditions, {!...}, `with` inputs, guards).
    source = "\n".join(lines)
    uses: dict[str, int] = {}
    writes: dict[str, int] = {}
    for match in _VARIABLE_USE.finditer(source):
        name = match.group(1)
        uses[name] = uses.get(name, 0) + 1
        if _is_write(source, match.start()):
            writes[name] = writes.get(name, 0) + 1
    for name, info in outline.variables.items():
        if info.is_mutable and writes.get(name) and writes[name] == uses.get(name):
            yield Finding(
                warning(
                    WRITTEN_NEVER_READ,
                    f"@variables.{name} is written but never read: no condition, text or "
                    "action input uses it; remove it or use it",
                    info.span,
                )
            )


def _gate_never_opens(
    outline: AgentOutline, lines: list[str], program: Program
) -> Iterator[Finding]:
    for proof in gate_proofs(outline, program):
        if proof.can_open:
            continue
        info = outline.subagents[proof.node]
        binding = info.tools.get(proof.tool)
        span = binding.span if binding is not None else info.span
        yield Finding(
            warning(
                GATE_NEVER_OPENS,
                f"{proof.tool} is offered only when {proof.guard}, and nothing in the agent can "
                "make that true; set the variable somewhere (an action output, a set, "
                "@utils.setVariables) or drop the gate",
                span,
            )
        )


_AGENT_RULES: tuple[Callable[[AgentOutline, list[str], Program], Iterator[Finding]], ...] = (
    _check_below_prose,
    _procedure_in_literal,
    _bare_reference,
    _prose_conditional,
    _repeated_persona,
    _unguarded_consequential,
    _unreachable,
    _self_transition,
    _written_never_read,
    _gate_never_opens,
    _confirmation_skipped_by_run,
)


# -- fixes ------------------------------------------------------------------------------


def apply_fixes(source: str, fixes: list[Fix]) -> str:
    """The source with every fix applied, later lines first so earlier line numbers hold.
    Overlapping fixes after the first are skipped."""
    # The fixes' line numbers are the parser's: split as it splits, or a \u2028 in a comment
    # would move each fix onto another line (and joining with \n would turn it into a break).
    lines = split_lines(source)
    trailing = ""
    if len(lines) > 1 and lines[-1] == "":
        lines.pop()  # the empty line after a final line break
        trailing = "\n"
    taken: list[tuple[int, int]] = []
    for fix in sorted(fixes, key=lambda f: f.start, reverse=True):
        low = min(fix.start, fix.insert_at or fix.start)
        if any(not (fix.end < a or low > b) for a, b in taken):
            continue
        taken.append((low, fix.end))
        if fix.insert_at is None:
            lines[fix.start - 1 : fix.end] = list(fix.lines)
        else:
            moved = lines[fix.start - 1 : fix.end]
            del lines[fix.start - 1 : fix.end]
            lines[fix.insert_at - 1 : fix.insert_at - 1] = moved
    return "\n".join(lines) + trailing


# -- Mantle -----------------------------------------------------------------------------


def lint_project(project: object) -> list[Diagnostic]:
    """Mantle lints: collect steps that the model must word, tool constraints nothing can
    satisfy."""
    from agentscript.mantle.model import Project, StepKind

    if not isinstance(project, Project):
        return []
    found: list[Diagnostic] = []
    for skill in project.skills.values():
        for block in skill.blocks.values():
            for step in block.steps:
                if step.kind != StepKind.COLLECT or step.utterance or not step.collect:
                    continue
                entry = step.collect.split(".")[-1]
                if f"utter_ask_{entry}" in project.responses:
                    continue
                diag = warning(
                    MANTLE_COLLECT_NO_UTTERANCE,
                    f"collect step '{step.id}' has no utterance and there is no "
                    f"utter_ask_{entry} response: the model words the question; add "
                    "'utterance:' so the framework asks it as written",
                    step.span,
                )
                diag.file = step.file
                found.append(diag)
    written = _mantle_written(project)
    for skill in project.skills.values():
        for constraint in skill.tool_constraints.values():
            condition = constraint.requires
            if condition is None:
                continue
            from agentscript.mantle.conditions import names_used

            for use in names_used(condition):
                name = ".".join(use.parts[-2:]) if len(use.parts) >= 2 else use.parts[0]
                if name in written:
                    continue
                diag = warning(
                    MANTLE_CONSTRAINT_UNSATISFIABLE,
                    f"tool {constraint.tool} requires '{condition.text}', but nothing writes "
                    f"{name} (no tool, collect step, set_memory step, seed or initial value); "
                    "the tool can never run",
                    constraint.span,
                )
                diag.file = constraint.file
                found.append(diag)
                break
    return found


def _mantle_written(project: object) -> set[str]:
    from agentscript.mantle.model import Project

    assert isinstance(project, Project)
    written: set[str] = set()
    entries = [*project.memory.values()]
    for skill in project.skills.values():
        entries.extend(skill.memory.values())
    for entry in entries:
        if entry.has_initial_value or entry.seed or entry.llm_settable:
            written.add(f"{entry.namespace}.{entry.name}")
    tools = [*project.shared_tools.values()]
    for skill in project.skills.values():
        tools.extend(skill.tools.values())
        for block in skill.blocks.values():
            for step in block.steps:
                if step.collect:
                    written.add(_qualified(step.collect, skill.id))
                for name in step.set_memory:
                    written.add(_qualified(name, skill.id))
    for tool in tools:
        for write in tool.writes:
            written.add(_qualified(write.name, tool.owner or "project"))
        if not tool.writes:
            # A tool whose writes are not declared may write anything its skill owns.
            written.update(f"{tool.owner}.{e}" for e in _skill_entries(project, tool.owner))
    return written


def _qualified(name: str, owner: str) -> str:
    parts = name.split(".")
    return ".".join(parts[-2:]) if len(parts) >= 2 else f"{owner}.{name}"


def _skill_entries(project: object, owner: str | None) -> list[str]:
    from agentscript.mantle.model import Project

    assert isinstance(project, Project)
    if owner is None or owner not in project.skills:
        return []
    return list(project.skills[owner].memory)


# -- entry points for validate and fmt ----------------------------------------------------

ASSERT_FAILED = "assert-failed"
ASSERT_INVALID = "assert-invalid"


def file_lints(path: str, outline: AgentOutline, source: str) -> list[Diagnostic]:
    """What ``validate`` adds for a checked ``.agent`` file without errors: the lint warnings
    and, when an ``agentscript.toml`` beside it declares ``[[assert]]`` rules, an error per
    rule a path violates."""
    from pathlib import Path

    from agentscript.authoring.gates import check_asserts, load_asserts
    from agentscript.diagnostics import error

    found = lint_agent(outline, source)
    rules, problems = load_asserts(Path(path), outline)
    for failure in check_asserts(outline, rules):
        found.append(
            error(
                ASSERT_FAILED,
                f"{failure.describe()} ({failure.assertion.source}); gate the tool with "
                "'available when' on the asserted condition",
                outline.subagents[failure.node].span,
            )
        )
    for diag in found:
        diag.file = path
    for problem in problems:
        # On the rule's line of agentscript.toml (the file's start when the text does not
        # show the rule): the agent's first line says nothing about it.
        line = problem.line or 1
        invalid = error(
            ASSERT_INVALID, f"{problem.message} (checking {path})", Span(line, 1, line, 2)
        )
        invalid.file = problem.file
        found.append(invalid)
    return found


def fix_source(source: str, path: str) -> tuple[str, int]:
    """``fmt --fix``: the source with every safe lint fix applied, and how many were applied.
    A file with errors, or whose fixed text would not check as cleanly, is returned unchanged."""
    from agentscript.check import check
    from agentscript.syntax import parse

    doc = parse(source, path)
    result = check(doc)
    if any(d.is_error for d in [*doc.diagnostics, *result.diagnostics]):
        return source, 0
    fixes = [f.fix for f in findings(result.outline, source) if f.fix is not None]
    if not fixes:
        return source, 0
    fixed = apply_fixes(source, fixes)
    again = parse(fixed, path)
    if any(d.is_error for d in [*again.diagnostics, *check(again).diagnostics]):
        return source, 0
    return fixed, len(fixes)
