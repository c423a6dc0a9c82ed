"""Cross-file checks of a loaded project: names, memory, responses, tools, step graphs."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from agentscript.diagnostics import Diagnostic, Severity, Span
from agentscript.mantle.buttons import parse_payload, payload_value, source_tool
from agentscript.mantle.conditions import names_used
from agentscript.mantle.load.cycles import call_cycles
from agentscript.mantle.load.tool_code import TOOL_NAME, make_stub
from agentscript.mantle.memory import MemoryWriteError, coerce_value, shown
from agentscript.mantle.model import (
    END_STEP,
    PROJECT_NAMESPACE,
    Button,
    Condition,
    MemoryEntry,
    OrderedBlock,
    Project,
    ReferenceKind,
    Skill,
    Step,
    StepKind,
    Tool,
    ToolRef,
    ToolWrite,
)
from agentscript.mantle.queries import tool_constraint
from agentscript.mantle.run.tool_handler import type_problem

# Tools the engine itself offers; a project tool must not take these names.
FRAMEWORK_TOOLS = frozenset(
    {
        "set_fields",
        "complete_skill",
        "cancel_skill",
        "resolve_tool_confirmation",
        "search_knowledge",
        "cannot_help",
        "activate",
        "activate_skill",
    }
)
_PROSE_CALL = re.compile(
    r"\b(?:call|calls|calling|run|use|prefer)\s+`?([a-z][a-z0-9]*_[a-z0-9_]+)`?"
)
_PROSE_ITEM = re.compile(r"^\s*[-*]\s+`?([a-z][a-z0-9]*_[a-z0-9_]+)`?\s*:")


def validate(project: Project, *, stub_missing_tools: bool = False) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    for skill in project.skills.values():
        out.extend(_skill(project, skill))
    out.extend(_responses(project))
    out.extend(check_buttons(project))
    out.extend(check_hooks(project))
    out.extend(resolve_tools(project, stub_missing_tools=stub_missing_tools))
    out.extend(call_cycles(project))
    return out


def _diag(
    code: str, message: str, file: str, span: Span, sev: Severity = Severity.ERROR
) -> Diagnostic:
    return Diagnostic(code, message, span, sev, file)


# --- memory references ------------------------------------------------------------------


def check_condition(
    project: Project, cond: Condition | None, reader: str | None
) -> list[Diagnostic]:
    """Every name in ``cond`` must be ``session.<ns>.<entry>`` for a readable declared entry.

    ``reader`` is the skill whose file holds the condition (None for project responses).
    """
    if cond is None:
        return []
    out: list[Diagnostic] = []
    for use in names_used(cond):
        if use.parts[0] != "session":
            out.append(
                _diag(
                    "mantle-condition-name",
                    f"unknown name '{use.dotted}' in condition: memory is read as "
                    "'session.<skill or project>.<entry>'",
                    cond.file,
                    use.span,
                )
            )
            continue
        if len(use.parts) != 3:
            out.append(
                _diag(
                    "mantle-condition-name",
                    f"'{use.dotted}' must have exactly three parts: session.<namespace>.<entry>",
                    cond.file,
                    use.span,
                )
            )
            continue
        problem = memory_problem(project, use.parts[1], use.parts[2], reader)
        if problem:
            out.append(_diag("mantle-undeclared-memory", problem, cond.file, use.span))
    return out


def memory_problem(project: Project, namespace: str, name: str, reader: str | None) -> str | None:
    """Why ``<namespace>.<name>`` cannot be read by ``reader``, or None when it can."""
    if namespace != PROJECT_NAMESPACE and namespace not in project.skills:
        return f"unknown memory namespace '{namespace}' (a skill id or 'project')"
    entry = project.memory_entry(f"{namespace}.{name}")
    if entry is None:
        where = (
            "project memory.yml"
            if namespace == PROJECT_NAMESPACE
            else f"skills/{namespace}/memory.yml"
        )
        return f"memory entry '{namespace}.{name}' is not declared in {where}"
    if entry.visibility == "private" and reader != namespace:
        return f"memory entry '{namespace}.{name}' is private to skill '{namespace}'"
    return None


def _bare_write_problem(project: Project, skill: Skill | None, name: str) -> str | None:
    if name.startswith(("session.", f"{PROJECT_NAMESPACE}.")) or "." in name:
        return f"write '{name}' by its bare entry name; qualified names are read-only syntax"
    if skill is not None and name in skill.memory:
        return None
    if name in project.memory:
        return None
    owner = f"skills/{skill.id}/memory.yml or " if skill else ""
    return f"memory entry '{name}' is written but not declared in {owner}the project memory.yml"


def _collect_problem(project: Project, skill: Skill, name: str) -> str | None:
    """A ``collect:`` fills an entry of its own skill (``queries.collect_key``): the model
    writes it with ``set_fields``, and the model never writes project memory. A bare name
    declared only in the project memory.yml could therefore never be filled, and the block
    would wait at the step for good."""
    problem = _bare_write_problem(project, skill, name)
    if problem is not None or name in skill.memory:
        return problem
    return (
        f"collect '{name}' fills the skill's own entry '{skill.id}.{name}', which is not "
        f"declared in skills/{skill.id}/memory.yml ('{name}' is a project entry, which the "
        "model never writes; collect steps fill the skill's own entries): declare it in the "
        "skill's memory.yml, or fill the project entry from a tool"
    )


# --- per skill --------------------------------------------------------------------------


def _skill(project: Project, skill: Skill) -> Iterator[Diagnostic]:
    yield from check_condition(project, skill.requires, skill.id)
    if skill.complete_when:
        yield from check_condition(project, skill.complete_when.condition, skill.id)
    for trigger in skill.utter:
        yield from check_condition(project, trigger.when, skill.id)
        yield from _response_ref(project, trigger.response, skill.file, trigger.span)
    for constraint in skill.tool_constraints.values():
        yield from check_condition(project, constraint.requires, skill.id)
        confirm = constraint.requires_confirmation
        names = [constraint.on_success, constraint.on_failure]
        if confirm:
            names += [confirm.utter_for_confirmation, confirm.utter_on_user_denial]
        for name in names:
            if name:
                yield from _response_ref(project, name, skill.file, constraint.span)
    for paragraph in skill.paragraphs:
        yield from check_condition(project, paragraph.condition, skill.id)
    for ref in skill.references:
        if ref.kind is ReferenceKind.SKILL and ref.target not in project.skills:
            yield _diag(
                "mantle-unknown-skill",
                f"'{ref.token}' names no skill in skills/",
                skill.file,
                ref.span,
            )
        elif ref.kind is ReferenceKind.BLOCK and ref.target not in skill.blocks:
            yield _diag(
                "mantle-unknown-block",
                f"'{ref.token}' names no ordered block of skill '{skill.id}'",
                skill.file,
                ref.span,
            )
        elif ref.kind is ReferenceKind.MEMORY:
            namespace, _, name = ref.target.partition(".")
            problem = memory_problem(project, namespace, name, skill.id)
            if problem:
                yield _diag("mantle-undeclared-memory", problem, skill.file, ref.span)
    for block in skill.blocks.values():
        yield from _block(project, skill, block)


def _response_ref(project: Project, name: str, file: str, span: Span) -> Iterator[Diagnostic]:
    if name not in project.responses:
        yield _diag(
            "mantle-unknown-response",
            f"response '{name}' is not defined in any responses.yml",
            file,
            span,
        )


def _block(project: Project, skill: Skill, block: OrderedBlock) -> Iterator[Diagnostic]:
    ids: dict[str, Step] = {}
    for step in block.steps:
        if step.id in ids:
            yield _diag(
                "mantle-duplicate-step",
                f"step id '{step.id}' is used twice in block '{block.id}'",
                step.file,
                step.span,
            )
        ids.setdefault(step.id, step)
        yield from _step(project, skill, block, step)
    for step in block.steps:
        for target in _explicit_targets(step):
            if target != END_STEP and target not in ids:
                yield _diag(
                    "mantle-next-target",
                    f"'next' of step '{step.id}' names no step of block '{block.id}'",
                    step.file,
                    step.next_span or step.span,
                )
    reachable = _reachable(block)
    for step in block.steps:
        if step.id not in reachable:
            yield _diag(
                "mantle-unreachable-step",
                f"step '{step.id}' of block '{block.id}' can never be reached",
                step.file,
                step.span,
                Severity.WARNING,
            )
    for cycle in _silent_cycles(block):
        first = ids[cycle[0]]
        shown = cycle if len(cycle) <= _CYCLE_SHOWN else [*cycle[:_CYCLE_SHOWN], "..."]
        count = f" ({len(cycle)} steps)" if len(cycle) > _CYCLE_SHOWN else ""
        yield _diag(
            "mantle-next-cycle",
            f"steps {' -> '.join(shown)} -> {cycle[0]}{count} loop without an instructions or "
            "collect step that waits for the user",
            first.file,
            first.span,
        )


def _step(project: Project, skill: Skill, block: OrderedBlock, step: Step) -> Iterator[Diagnostic]:
    yield from check_condition(project, step.complete_when, skill.id)
    if isinstance(step.next, list):
        for branch in step.next:
            yield from check_condition(project, branch.condition, skill.id)
    for value in step.parameters.values():
        if isinstance(value, Condition):
            yield from check_condition(project, value, skill.id)
    if step.action:
        yield from _response_ref(project, step.action, step.file, step.span)
    if step.utterance:
        yield from _response_ref(project, step.utterance, step.file, step.span)
    if step.kind is StepKind.COLLECT and step.collect:
        problem = _collect_problem(project, skill, step.collect)
        if problem:
            yield _diag("mantle-undeclared-memory", problem, step.file, step.span)
    for key in step.set_memory:
        name = str(key)
        parts = name.split(".")
        if len(parts) == 3 and parts[0] == "session":
            problem = memory_problem(project, parts[1], parts[2], skill.id)
        else:
            problem = _bare_write_problem(project, skill, name)
        if problem:
            yield _diag("mantle-undeclared-memory", problem, step.file, step.span)
    for target, what in ((step.call, "call"), (step.link, "link")):
        if target and target not in skill.blocks and target not in project.skills:
            yield _diag(
                "mantle-unknown-target",
                f"'{what}: {target}' names no block of this skill and no skill",
                step.file,
                step.span,
            )
    if step.kind is StepKind.EXECUTE_TOOL and step.execute_tool:
        tool = project.tools_for(skill.id).get(step.execute_tool)
        if tool is not None and not tool.is_stub:  # an unresolved tool is reported as such
            yield from check_step_arguments(project, skill, step, tool)


# --- execute_tool step arguments ---------------------------------------------------------

# Values standing for all a memory entry of each type holds at run time
# (``memory.coerce_value``), as far as a tool's declared type tells them apart: a float may be
# integral (which an ``int`` parameter takes) or not. ``bool`` and ``categorical`` entries
# hold few values, each checked; ``json`` and ``any`` hold any, which may fit.
_ENTRY_SAMPLES: dict[str, list[Any]] = {
    "text": [""],
    "int": [0],
    "float": [1.0, 0.5],
    "list": [[]],
}


def check_step_arguments(
    project: Project, skill: Skill, step: Step, tool: Tool
) -> Iterator[Diagnostic]:
    """``mantle-step-argument``: arguments of an ``execute_tool`` step that can never be ones
    its tool declares (a literal of another type, a memory entry whose declared type never
    fits, an argument the tool does not take, a required one not passed). The run checks a
    step's arguments as a model's call (``tool_handler.check_arguments``) and refuses such a
    call every time: the step fails and waits for memory that can never make it fit."""
    schema = tool.parameters_schema or {}
    properties: dict[str, Any] = schema.get("properties") or {}
    where = f"step '{step.id}' of skill '{skill.id}'"
    for name, value in step.parameters.items():
        span = value.span if isinstance(value, Condition) else step.span
        prop = properties.get(name)
        if prop is None:
            if schema.get("additionalProperties") is not True:
                allowed = ", ".join(sorted(properties)) or "none"
                yield _diag(
                    "mantle-step-argument",
                    f"{where} passes '{name}', which '{tool.name}' does not take "
                    f"(its parameters: {allowed}); the run refuses the call every time",
                    step.file,
                    span,
                )
            continue
        problem = _argument_problem(project, skill, prop, value)
        if problem is not None:
            yield _diag(
                "mantle-step-argument",
                f"{where} passes {problem} to '{name}' of '{tool.name}', declared "
                f"{_declared(prop)}; it never fits, and the run refuses the call every time",
                step.file,
                span,
            )
    for name in schema.get("required") or []:
        if step.parameters.get(name) is None:
            yield _diag(
                "mantle-step-argument",
                f"{where} does not pass '{name}', which '{tool.name}' requires; the run "
                "refuses the call every time",
                step.file,
                step.span,
            )


def _argument_problem(
    project: Project, skill: Skill, prop: dict[str, Any], value: Any
) -> str | None:
    """What the step passes (a literal, or a memory entry read by its bare ``session.``
    name) when no value of it fits ``prop``; None when one may (an expression, an entry
    another diagnostic reports, a type that may hold a fitting value)."""
    if not isinstance(value, Condition):
        return None if type_problem(prop, value) is None else shown(value)
    uses = names_used(value)
    if len(uses) != 1 or uses[0].dotted != value.text or len(uses[0].parts) != 3:
        return None  # an expression: its value's type is not declared
    _, namespace, name = uses[0].parts
    if memory_problem(project, namespace, name, skill.id) is not None:
        return None  # reported as mantle-undeclared-memory
    entry = project.memory_entry(f"{namespace}.{name}")
    if entry is None or _entry_may_fit(entry, prop):
        return None
    return f"{value.text} (a {entry.type} entry)"


def _entry_may_fit(entry: MemoryEntry, prop: dict[str, Any]) -> bool:
    if entry.type == "bool" or (entry.type == "categorical" and entry.enum_values):
        values = [True, False] if entry.type == "bool" else entry.enum_values
        return any(type_problem(prop, v) is None for v in values)
    samples = _ENTRY_SAMPLES.get(entry.type)
    if samples is None:
        return True  # json, any, categorical without values: any JSON value
    members = prop.get("enum")
    if isinstance(members, list) and not any(_may_equal(entry.type, m) for m in members):
        return False
    typed = {key: v for key, v in prop.items() if key != "enum"}
    return any(type_problem(typed, sample) is None for sample in samples)


def _may_equal(entry_type: str, member: Any) -> bool:
    """Whether an entry of ``entry_type`` may hold a value equal to ``member`` (as Python
    compares them, which the run's ``enum`` check does: 1 == 1.0)."""
    if entry_type == "text":
        return isinstance(member, str)
    if entry_type == "list":
        return isinstance(member, list)
    if not isinstance(member, int | float):
        return False
    return entry_type == "float" or isinstance(member, int) or float(member).is_integer()


def _declared(prop: dict[str, Any]) -> str:
    if "enum" in prop:
        return f"one of {shown(prop['enum'])}"
    kind = prop.get("type")
    return kind if isinstance(kind, str) else "as the tool's schema says"


_CYCLE_SHOWN = 10  # steps of a silent cycle named in its message; longer ones are cut


def _explicit_targets(step: Step) -> list[str]:
    if isinstance(step.next, str):
        return [step.next]
    if isinstance(step.next, list):
        return [b.target for b in step.next]
    return []


def successors(block: OrderedBlock, index: int) -> list[str]:
    """Step ids control can move to after ``block.steps[index]`` (END included)."""
    step = block.steps[index]
    if step.kind in (StepKind.END, StepKind.LINK):
        return []
    explicit = _explicit_targets(step)
    has_else = isinstance(step.next, list) and any(b.condition is None for b in step.next)
    fall = block.steps[index + 1].id if index + 1 < len(block.steps) else END_STEP
    if isinstance(step.next, str):
        return explicit
    # Branch lists without an else fall through when no branch matches.
    return explicit if has_else else [*explicit, fall]


def _reachable(block: OrderedBlock) -> set[str]:
    if not block.steps:
        return set()
    index = {s.id: i for i, s in reversed(list(enumerate(block.steps)))}
    seen: set[str] = set()
    todo = [block.steps[0].id]
    while todo:
        current = todo.pop()
        if current in seen or current not in index:
            continue
        seen.add(current)
        todo.extend(successors(block, index[current]))
    return seen


def _silent_cycles(block: OrderedBlock) -> list[list[str]]:
    """Cycles of the step graph with no step that hands the turn back to the user."""
    index = {s.id: i for i, s in reversed(list(enumerate(block.steps)))}
    graph = {s.id: [t for t in successors(block, index[s.id]) if t in index] for s in block.steps}
    waits = {s.id for s in block.steps if s.waits_for_user}
    found: list[list[str]] = []
    reported: set[frozenset[str]] = set()
    for scc in _sccs(graph):
        is_cycle = len(scc) > 1 or scc[0] in graph[scc[0]]
        if is_cycle and not (set(scc) & waits) and frozenset(scc) not in reported:
            reported.add(frozenset(scc))
            found.append(sorted(scc, key=lambda s: index[s]))
    return found


def _sccs(graph: dict[str, list[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components, iterative: a block of thousands of chained
    steps must not exhaust Python's recursion limit."""
    counter = 0
    low: dict[str, int] = {}
    num: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for root in graph:
        if root in num:
            continue
        num[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        work: list[tuple[str, int]] = [(root, 0)]  # (node, index of its next successor)
        while work:
            node, position = work[-1]
            successors_of = graph[node]
            if position < len(successors_of):
                work[-1] = (node, position + 1)
                nxt = successors_of[position]
                if nxt not in num:
                    num[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, 0))
                elif nxt in on_stack:
                    low[node] = min(low[node], num[nxt])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == num[node]:
                component: list[str] = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                out.append(component)
    return out


# --- responses --------------------------------------------------------------------------


def _responses(project: Project) -> Iterator[Diagnostic]:
    for response in project.responses.values():
        for variant in response.variants:
            yield from check_condition(project, variant.condition, response.owner)
            # Each name once: a line repeating one unknown name thousands of times is one
            # warning, not thousands of copies of the line.
            for placeholder in dict.fromkeys(variant.placeholders):
                problem = _placeholder_problem(project, placeholder, response.owner)
                if problem:
                    yield _diag(
                        "mantle-unknown-placeholder",
                        problem,
                        variant.file,
                        variant.span,
                        Severity.WARNING,
                    )


def _placeholder_problem(project: Project, placeholder: str, owner: str | None) -> str | None:
    parts = placeholder.split(".")
    if len(parts) == 3 and parts[0] == "session":
        return memory_problem(project, parts[1], parts[2], owner)
    if len(parts) != 1:
        return f"placeholder '{{{placeholder}}}' must be '{{entry}}' or '{{session.<ns>.<entry>}}'"
    name = parts[0]
    skill = project.skills.get(owner) if owner else None
    if (skill is not None and name in skill.memory) or name in project.memory:
        return None
    if owner is None and any(name in s.memory for s in project.skills.values()):
        return None
    return f"placeholder '{{{name}}}' names no declared memory entry"


# --- tools ------------------------------------------------------------------------------


def prose_tool_refs(skill: Skill) -> list[ToolRef]:
    """Tools a skill names only in prose ("call `lookup_x`", a "Tools:" bullet list)."""
    refs: list[ToolRef] = []
    seen: set[str] = set()
    for paragraph in skill.paragraphs:
        lines = paragraph.text.splitlines()
        tool_list = False
        for offset, line in enumerate(lines):
            line_no = paragraph.span.line + offset
            names = [m.group(1) for m in _PROSE_CALL.finditer(line)]
            item = _PROSE_ITEM.match(line)
            if item and tool_list:
                names.append(item.group(1))
            if "tool" in line.lower() and line.rstrip().endswith(":"):
                tool_list = True
            for name in names:
                if name not in seen and name not in FRAMEWORK_TOOLS:
                    seen.add(name)
                    refs.append(
                        ToolRef(name, "prose", skill.file, Span(line_no, 1, line_no, len(line) + 1))
                    )
    return refs


def resolve_tools(project: Project, *, stub_missing_tools: bool) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    out.extend(_tool_collisions(project))
    for skill in project.skills.values():
        refs = list(skill.tool_refs)
        if not refs:
            refs = _prose_with_lists(skill)
        reported: set[str] = set()
        for ref in refs:
            if ref.name in reported:
                continue
            problem = _tool_problem(project, skill, ref)
            if problem is None:
                continue
            reported.add(ref.name)
            code, message = problem
            if code == "mantle-unresolved-tool" and stub_missing_tools:
                skill.tools[ref.name] = make_stub(ref.name, skill.id, ref.file, ref.span)
                out.append(
                    _diag(
                        "mantle-tool-stubbed",
                        f"tool '{ref.name}' is stubbed: {message}",
                        ref.file,
                        ref.span,
                        Severity.INFO,
                    )
                )
                continue
            severity = Severity.WARNING if ref.via == "prose" else Severity.ERROR
            out.append(_diag(code, message, ref.file, ref.span, severity))
        for tool in skill.tools.values():
            out.extend(_tool_writes(project, skill, tool.writes))
    for tool in project.shared_tools.values():
        importers: list[Skill | None] = [
            s for s in project.skills.values() if tool.name in s.import_tools
        ]
        for importer in importers or [None]:
            out.extend(_tool_writes(project, importer, tool.writes))
    return out


def _prose_with_lists(skill: Skill) -> list[ToolRef]:
    """Prose mentions, including bullet lists that follow a "Tools ...:" paragraph."""
    refs = prose_tool_refs(skill)
    seen = {r.name for r in refs}
    after_tools_heading = False
    for paragraph in skill.paragraphs:
        if after_tools_heading:
            for offset, line in enumerate(paragraph.text.splitlines()):
                item = _PROSE_ITEM.match(line)
                if item and item.group(1) not in seen and item.group(1) not in FRAMEWORK_TOOLS:
                    seen.add(item.group(1))
                    line_no = paragraph.span.line + offset
                    refs.append(
                        ToolRef(
                            item.group(1),
                            "prose",
                            skill.file,
                            Span(line_no, 1, line_no, len(line) + 1),
                        )
                    )
        text = paragraph.text.strip()
        after_tools_heading = text.endswith(":") and "tool" in text.lower()
    return refs


def _tool_problem(project: Project, skill: Skill, ref: ToolRef) -> tuple[str, str] | None:
    name = ref.name
    if name.startswith("mcp/"):
        server, sep, tool = name[4:].partition(":")
        if not sep or not server or not tool:
            return "mantle-tool-name", f"write MCP tools as 'mcp/<server>:<tool>', not '{name}'"
        if project.mcp_servers and server not in project.mcp_servers:
            return "mantle-unknown-mcp-server", f"MCP server '{server}' is not in integrations.yml"
        if TOOL_NAME.fullmatch(tool) is None:
            # The tool is offered under the server's name for it: a name the model APIs refuse
            # would fail every request of the skill.
            return "mantle-tool-name", (
                f"MCP tool name {tool!r} in '{name}' is not usable: a tool name is 1 to 64 "
                "letters, digits, '_' or '-' (what the model APIs accept); import another tool "
                "or have the server rename it"
            )
        return None
    if name in skill.tools:
        return None
    shared = name in project.shared_tools
    if ref.via == "import_tools":
        if shared:
            return None
        owners = [s.id for s in project.skills.values() if name in s.tools]
        hint = f" (it is local to skill '{owners[0]}'; move it to tools/)" if owners else ""
        return (
            "mantle-unresolved-tool",
            f"imported tool '{name}' is not defined in the project tools/{hint}",
        )
    if shared:
        if name in skill.import_tools:
            return None
        return (
            "mantle-tool-not-imported",
            f"shared tool '{name}' is used but not listed in import_tools",
        )
    return "mantle-unresolved-tool", (
        f"tool '{name}' is not defined in skills/{skill.id}/tools.py, skills/{skill.id}/tools/ "
        "or the shared tools/"
    )


def _tool_writes(
    project: Project, skill: Skill | None, writes: list[ToolWrite]
) -> Iterator[Diagnostic]:
    for write in writes:
        problem = _bare_write_problem(project, skill, write.name)
        if problem:
            yield _diag("mantle-undeclared-memory-write", problem, write.file, write.span)


def _tool_collisions(project: Project) -> Iterator[Diagnostic]:
    for tool in [
        *project.shared_tools.values(),
        *(t for s in project.skills.values() for t in s.tools.values()),
    ]:
        if tool.is_stub:
            continue
        if tool.name in FRAMEWORK_TOOLS:
            yield _diag(
                "mantle-tool-collision",
                f"tool '{tool.name}' has the name of a built-in engine tool",
                tool.file,
                tool.span,
            )
        if tool.name in project.skills:
            yield _diag(
                "mantle-tool-collision",
                f"tool '{tool.name}' has the same name as a skill; rename one of them",
                tool.file,
                tool.span,
                Severity.WARNING,
            )
    for skill in project.skills.values():
        yield from _import_collisions(project, skill)
        for name, tool in skill.tools.items():
            if name in skill.import_tools and name in project.shared_tools and not tool.is_stub:
                yield _diag(
                    "mantle-tool-collision",
                    f"skill '{skill.id}' defines '{name}' and also imports the shared tool "
                    "of that name; the local one wins",
                    tool.file,
                    tool.span,
                    Severity.WARNING,
                )


def _import_collisions(project: Project, skill: Skill) -> Iterator[Diagnostic]:
    """Imports the model would see under one name: an MCP import ``mcp/S:T`` is offered as
    ``T`` (:meth:`Project.tools_for`), so two imports of one plain name would leave only the
    last, and a local tool of that name hides the import."""
    first: dict[str, str] = {}
    listed: set[str] = set()
    for ref in skill.tool_refs:
        if ref.via != "import_tools" or ref.name in listed:
            continue  # one import listed twice is offered once
        listed.add(ref.name)
        if ref.name.startswith("mcp/"):
            offered = ref.name.partition(":")[2]
        elif ref.name in project.shared_tools:
            offered = project.shared_tools[ref.name].name
        else:
            continue  # an unresolved import: reported by _tool_problem
        if not offered:
            continue
        if offered in first:
            yield _diag(
                "mantle-tool-collision",
                f"skill '{skill.id}' imports '{first[offered]}' and '{ref.name}', both offered "
                f"to the model as '{offered}', which would see only one; import one of them",
                ref.file,
                ref.span,
            )
            continue
        first[offered] = ref.name
        if not ref.name.startswith("mcp/"):
            continue  # a shared import shadowed by a local tool: warned about below
        if offered in FRAMEWORK_TOOLS:
            yield _diag(
                "mantle-tool-collision",
                f"'{ref.name}' would be offered as '{offered}', the name of a built-in engine "
                "tool; import another tool",
                ref.file,
                ref.span,
            )
        local = skill.tools.get(offered)
        if local is not None and local.hook_for is None and not local.is_stub:
            yield _diag(
                "mantle-tool-collision",
                f"skill '{skill.id}' defines '{offered}' and also imports '{ref.name}', offered "
                "under that name; the local one wins: rename the local tool or drop the import",
                ref.file,
                ref.span,
                Severity.WARNING,
            )


# --- buttons and post-write hooks -------------------------------------------------------


def check_buttons(project: Project) -> Iterator[Diagnostic]:
    """Malformed or impossible ``set:`` payloads, payloads that write a private entry (the
    engine never applies those) and unknown button source tools."""
    for response in project.responses.values():
        for variant in response.variants:
            for button in variant.buttons:
                parsed = parse_payload(button.payload) if button.payload is not None else None
                private = private_payload_problem(project, button, parsed)
                if private is not None:
                    yield Diagnostic(
                        "mantle-button-private-entry",
                        private,
                        button.span,
                        Severity.ERROR,
                        variant.file,
                    )
                    continue
                problem = payload_problem(project, button, parsed)
                if problem is not None:
                    yield Diagnostic(
                        "mantle-button", problem, button.span, Severity.ERROR, variant.file
                    )
            source = variant.buttons_source
            found = None if source is None else source_tool(project, source, response.owner)
            if source is not None and found is None:
                yield Diagnostic(
                    "mantle-button",
                    f"buttons of '{response.name}': source tool '{source}' is not defined in "
                    "any tools.py; define it or list the buttons",
                    variant.span,
                    Severity.ERROR,
                    variant.file,
                )
            elif found is not None and _needs_confirmation(project, found[0], source or ""):
                # The run never calls such a tool for buttons (mantle/run/buttons.py:
                # source_gate): nobody is asked at the end of a turn.
                yield Diagnostic(
                    "mantle-button",
                    f"buttons of '{response.name}': source tool '{source}' requires "
                    "confirmation, so it is never run to supply buttons; list the buttons or "
                    "use a tool without confirmation",
                    variant.span,
                    Severity.WARNING,
                    variant.file,
                )


def _needs_confirmation(project: Project, skill_id: str, tool_name: str) -> bool:
    constraint = tool_constraint(project, skill_id, tool_name)
    confirm = constraint.requires_confirmation if constraint else None
    return confirm is not None and confirm.enabled


def payload_problem(project: Project, button: Button, parsed: tuple[str, str] | None) -> str | None:
    """A listed ``set:`` payload that is malformed, names no memory entry, or sets a value
    the entry refuses (``parsed``: the payload read by :func:`parse_payload`)."""
    payload = button.payload
    # As the run reads a tap (parse_payload): spaces around the payload do not count.
    if payload is None or not payload.strip().startswith("set:"):
        return None  # an ordinary payload (a message the channel sends back)
    if parsed is None:
        return (
            f"button '{button.title}': payload '{payload}' must be "
            "'set:session.<skill or project>.<entry>=<value>'"
        )
    qualified, raw = parsed
    entry = project.memory_entry(qualified)
    if entry is None:
        return f"button '{button.title}': '{qualified}' is not a declared memory entry"
    if "{" in raw:
        return None  # filled at delivery; checked when tapped
    try:
        coerce_value(entry, payload_value(raw))
    except MemoryWriteError as exc:
        return f"button '{button.title}': {exc}"
    return None


def private_payload_problem(
    project: Project, button: Button, parsed: tuple[str, str] | None
) -> str | None:
    """A listed ``set:`` payload naming a private entry: a tap on it is always refused
    (:mod:`agentscript.mantle.run.buttons`), so the button can never do anything
    (``parsed``: the payload read by :func:`parse_payload`)."""
    if parsed is None:
        return None
    qualified = parsed[0]
    entry = project.memory_entry(qualified)
    if entry is None or entry.visibility != "private":
        return None
    return (
        f"button '{button.title}': '{qualified}' is a private memory entry, which a button "
        "can never set (the tap is refused at run time); make the entry public, or set it "
        "from a step or a tool"
    )


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
