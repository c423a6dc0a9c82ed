"""Every effective prompt of an Agent Script agent, per node, by symbolic resolution.

What a reviewer signs off: for each node, each distinct thing the model can be told, labelled
with the condition that selects it. The walk mirrors the engine's resolution (rule S3): the
node's ``before_reasoning`` hook, then ``reasoning.instructions`` from the top, ``if`` /
``else if`` / ``else`` picking branches, ``|`` lines adding text, ``set`` and ``run`` as side
effects, ``transition to`` ending the path (rule S4: the partly resolved prompt is discarded and
the model is not called). Tool visibility follows rule S5: a tool is offered, hidden, or offered only when its
``available when`` holds, where the path does not decide it.

Nothing runs: an action's outputs are unknown, so a variable set from ``@outputs`` is labelled
"set at run time by <action>", and ``{!expr}`` whose value is not known on the path is shown as
written. Paths that contradict themselves (``is_verified == False`` then ``is_verified ==
True``) are dropped. Cases with the same text, tools, effects and ending are merged, and their
labels simplified (``a and b`` or ``a and not b`` is ``a``).

In: an :class:`~agentscript.check.outline.AgentOutline` (a checked agent). Out:
:class:`NodePrompts` per node. Never raises on a checked outline; the number of paths per node is
capped by ``max_cases`` (a path past the cap is reported, not explored).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from agentscript.authoring.facts import (
    Atom,
    Facts,
    assume,
    readable,
    sub_expressions,
    truth,
    variable_name,
)
from agentscript.check.outline import AgentOutline
from agentscript.engine.program import Program, ProgramNode
from agentscript.expr.nodes import AtName, Expr, Literal, Member, reference_path
from agentscript.expr.printer import print_expr
from agentscript.expr.values import to_display
from agentscript.syntax.tree import (
    Block,
    CollectStmt,
    IfStmt,
    Interpolation,
    RunStmt,
    SetStmt,
    Template,
    TemplatePart,
    TemplateStmt,
    TransitionStmt,
)

MAX_CASES = 256


@dataclass(slots=True)
class PromptCase:
    """One distinct effective prompt of a node and the conditions that select it."""

    conditions: list[list[str]]  # a disjunction of conjunctions; [[]] means "always"
    system: str
    instructions: str
    tools: list[str]
    conditional_tools: dict[str, str]  # tool -> its guard, undecided on this path
    hidden_tools: dict[str, str]  # tool -> the guard that hides it
    effects: list[str]
    transition: str | None = None  # the path leaves the node before any LLM call

    @property
    def label(self) -> str:
        parts = [" and ".join(c) if c else "always" for c in self.conditions]
        if len(parts) == 1:
            return parts[0]
        return " or ".join(f"({p})" if " and " in p else p for p in parts)

    def to_json(self) -> dict[str, Any]:
        return {
            "condition": self.label,
            "conditions": self.conditions,
            "system": self.system,
            "instructions": self.instructions,
            "tools": self.tools,
            "conditionalTools": self.conditional_tools,
            "hiddenTools": self.hidden_tools,
            "effects": self.effects,
            "transition": self.transition,
        }


@dataclass(slots=True)
class NodePrompts:
    node: str
    cases: list[PromptCase]
    truncated: bool = False
    # Mantle: this skill's line in the skill catalogue of the system prompt (None when the
    # catalogue does not list it). The catalogue is in every case's system prompt; it is shown
    # once (``SkillCatalogue``), each case's ``system`` holding a reference to it.
    catalogue_line: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "node": self.node,
            "cases": [c.to_json() for c in self.cases],
            "truncated": self.truncated,
        }
        if self.catalogue_line is not None:
            out["catalogueLine"] = self.catalogue_line
        return out


@dataclass(slots=True)
class _Path:
    facts: Facts
    lines: list[str] = field(default_factory=list)
    effects: list[str] = field(default_factory=list)
    transition: str | None = None

    def fork(self, facts: Facts) -> _Path:
        return _Path(facts, list(self.lines), list(self.effects), self.transition)


class _Walker:
    def __init__(self, program: Program, node: ProgramNode, max_cases: int) -> None:
        self.program = program
        self.node = node
        self.max_cases = max_cases
        self.truncated = False

    # -- statements ------------------------------------------------------------------

    def block(
        self, block: Block | None, paths: list[_Path], action: str | None = None
    ) -> list[_Path]:
        if block is None:
            return paths
        for item in block.statements():
            live = [p for p in paths if p.transition is None]
            done = [p for p in paths if p.transition is not None]
            if not live:
                break
            paths = done + self.statement(item, live, action)
        return paths

    def statement(self, item: object, paths: list[_Path], action: str | None) -> list[_Path]:
        if isinstance(item, TemplateStmt):
            for p in paths:
                p.lines.append(self.text(item.template.parts, p.facts))
            return paths
        if isinstance(item, SetStmt):
            for p in paths:
                self.set(item, p, action)
            return paths
        if isinstance(item, RunStmt):
            return self.run(item, paths)
        if isinstance(item, IfStmt):
            return self.branch(item, paths, action)
        if isinstance(item, TransitionStmt):
            target = self.program.node_of(item.targets[0]) if item.targets else None
            for p in paths:
                p.transition = target or "?"
            return paths
        if isinstance(item, CollectStmt):
            name = variable_name(item.target)
            for p in paths:
                p.effects.append(f"collect {name or print_expr(item.target)}")
            return paths
        return paths

    def set(self, stmt: SetStmt, path: _Path, action: str | None) -> None:
        name = variable_name(stmt.target)
        path.effects.append(f"set {readable(stmt.target)} = {readable(stmt.value)}")
        if name is None:
            return
        value = path.facts.value_of(stmt.value)
        uses_outputs = _reads_outputs(stmt.value)
        if uses_outputs and action is not None:
            path.facts.forget(name, set_by=action)
        elif isinstance(stmt.value, Literal) or variable_name(stmt.value) in path.facts.equal:
            path.facts.know(name, value)
        else:
            path.facts.forget(name)

    def run(self, stmt: RunStmt, paths: list[_Path]) -> list[_Path]:
        ref = reference_path(stmt.target)
        name = ref[-1] if ref else print_expr(stmt.target)
        for p in paths:
            p.effects.append(f"run {name}")
        return self.block(stmt.body, paths, action=name)

    def branch(self, stmt: IfStmt, paths: list[_Path], action: str | None) -> list[_Path]:
        arms: list[tuple[list[tuple[Expr, bool]], Block | None]] = []
        previous: list[tuple[Expr, bool]] = []
        chain: list[tuple[Expr, Block]] = [(stmt.condition, stmt.body)]
        chain += [(e.condition, e.body) for e in stmt.else_ifs]
        for condition, arm in chain:
            arms.append(([*previous, (condition, True)], arm))
            previous.append((condition, False))
        arms.append((previous, stmt.else_clause.body if stmt.else_clause else None))
        out: list[_Path] = []
        for path in paths:
            for assumptions, body in arms:
                facts: Facts | None = path.facts
                for condition, holds in assumptions:
                    facts = assume(condition, holds, facts) if facts is not None else None
                if facts is None:
                    continue
                if len(out) >= self.max_cases:
                    self.truncated = True
                    break
                out.extend(self.block(body, [path.fork(facts)], action))
        return out

    # -- text ------------------------------------------------------------------------

    def text(self, parts: list[TemplatePart], facts: Facts) -> str:
        out: list[str] = []
        for part in parts:
            if isinstance(part, Interpolation):
                out.append(self.interpolate(part, facts))
            else:
                out.append(part)
        return "".join(out)

    def interpolate(self, part: Interpolation, facts: Facts) -> str:
        expr = part.expr
        if (
            isinstance(expr, Member)
            and isinstance(expr.obj, AtName)
            and expr.obj.namespace == "actions"
        ):
            return self.node.tool_names.get(expr.name, expr.name)
        value = facts.value_of(expr)
        if isinstance(expr, Literal) or variable_name(expr) in facts.equal:
            return to_display(value)
        return "{!" + part.source.strip() + "}"

    def static(self, text: Template | Expr | None) -> str:
        if text is None:
            return ""
        if isinstance(text, Template):
            return self.text(text.parts, Facts({}))
        if isinstance(text, Literal) and isinstance(text.value, str):
            if "{!" in text.value:
                return self.text(self.program.text_parts(text), Facts({}))
            return text.value
        return "{!" + print_expr(text) + "}"

    # -- tools -----------------------------------------------------------------------

    def tools(self, path: _Path) -> tuple[list[str], dict[str, str], dict[str, str]]:
        """Offered, offered only under a guard this path cannot decide, and hidden tools.

        An undecided guard does not split the case: n independent gates would make 2**n
        cases that differ only in one tool each (seen in the corpus: 1,650 for one node)."""
        shown: list[str] = []
        maybe: dict[str, str] = {}
        hidden: dict[str, str] = {}
        for tool in self.node.tools.values():
            known = True if tool.guard is None else truth(tool.guard, path.facts)
            if known is True:
                shown.append(tool.name)
            elif known is False:
                hidden[tool.name] = readable(tool.guard) if tool.guard is not None else ""
            else:
                maybe[tool.name] = readable(tool.guard) if tool.guard is not None else ""
        return shown, maybe, hidden


def _walk_nodes(
    outline: AgentOutline, max_cases: int, only: str | None = None
) -> Iterator[tuple[ProgramNode, _Walker, str, list[_Path]]]:
    """Each node (or the node named ``only``) with its walker, system text and resolved paths."""
    program = Program(outline)
    types = {name: info.type for name, info in outline.variables.items()}
    for node in program.nodes.values():
        if only is not None and node.name != only:
            continue
        walker = _Walker(program, node, max_cases)
        info = node.info
        system = walker.static(info.system_instructions or outline.system_instructions)
        paths = walker.block(info.before_reasoning, [_Path(Facts(types))])
        if isinstance(info.instructions, Block):
            paths = walker.block(info.instructions, paths)
        else:
            text = walker.static(info.instructions)
            for p in paths:
                if p.transition is None and text:
                    p.lines.append(text)
        yield node, walker, system, paths


def node_prompts(
    outline: AgentOutline, max_cases: int = MAX_CASES, only: str | None = None
) -> list[NodePrompts]:
    """The effective prompts of every node (or of the node named ``only``), in source order."""
    result: list[NodePrompts] = []
    for node, walker, system, paths in _walk_nodes(outline, max_cases, only):
        cases: list[PromptCase] = []
        for path in paths:
            if path.transition is not None:
                cases.append(_case(path, system, [], {}, {}))
            else:
                cases.append(_case(path, system, *walker.tools(path)))
        result.append(NodePrompts(node.name, _merge(cases), walker.truncated))
    return result


def node_prompts_with_facts(
    outline: AgentOutline, max_cases: int = MAX_CASES
) -> Iterator[tuple[str, str, Facts, dict[str, Expr | None]]]:
    """Every path that reaches the model: node, label, what the path knows, and the tools that
    can be offered on it (``None``: always; else the guard still to hold)."""
    for node, _walker, _system, paths in _walk_nodes(outline, max_cases):
        for path in paths:
            if path.transition is not None:
                continue
            offered: dict[str, Expr | None] = {}
            for tool in node.tools.values():
                known = True if tool.guard is None else truth(tool.guard, path.facts)
                if known is True:
                    offered[tool.name] = None
                elif known is None:
                    offered[tool.name] = tool.guard
            label = " and ".join(a.label() for a in path.facts.atoms) or "always"
            yield node.name, label, path.facts, offered


def _case(
    path: _Path,
    system: str,
    shown: list[str],
    maybe: dict[str, str],
    hidden: dict[str, str],
) -> PromptCase:
    atoms = [a.label() for a in path.facts.atoms]
    return PromptCase(
        conditions=[atoms],
        system=system,
        instructions="\n".join(path.lines) if path.transition is None else "",
        tools=shown,
        conditional_tools=maybe,
        hidden_tools=hidden,
        effects=path.effects,
        transition=path.transition,
    )


def _merge(cases: list[PromptCase]) -> list[PromptCase]:
    groups: dict[tuple[object, ...], PromptCase] = {}
    for case in cases:
        key = (
            case.instructions,
            tuple(case.tools),
            tuple(sorted(case.conditional_tools.items())),
            tuple(sorted(case.hidden_tools.items())),
            tuple(case.effects),
            case.transition,
        )
        if key in groups:
            groups[key].conditions.extend(case.conditions)
        else:
            groups[key] = case
    for case in groups.values():
        case.conditions = simplify(case.conditions)
    return list(groups.values())


def simplify(terms: list[list[str]]) -> list[list[str]]:
    """Merge conjunctions that differ only in one complementary atom (``a and b`` or ``a and
    not b`` is ``a``) until none do; drop duplicates. Atoms are compared by text, so the
    complement of ``x == True`` on a boolean must read ``x == False`` (``facts`` shows it so)."""
    current = [list(t) for t in terms]
    changed = True
    while changed:
        changed = False
        for i in range(len(current)):
            for j in range(i + 1, len(current)):
                merged = _combine(current[i], current[j])
                if merged is not None:
                    current = [t for k, t in enumerate(current) if k not in (i, j)] + [merged]
                    changed = True
                    break
            if changed:
                break
    unique: list[list[str]] = []
    for term in current:
        if term not in unique:
            unique.append(term)
    return unique or [[]]


def _combine(a: list[str], b: list[str]) -> list[str] | None:
    if a == b:
        return a
    if len(a) != len(b):
        return None
    diff = [(x, y) for x, y in zip(a, b, strict=True) if x != y]
    if len(diff) != 1:
        return None
    x, y = diff[0]
    if _complementary(x, y):
        return [t for t in a if t != x]
    return None


def _complementary(x: str, y: str) -> bool:
    x, y = x.split(" [", 1)[0], y.split(" [", 1)[0]
    if x == f"not ({y})" or y == f"not ({x})":
        return True
    for op, neg in (("==", "!="), ("<", ">="), (">", "<="), (" in ", " not in ")):
        if op in x and x.replace(op, neg, 1) == y:
            return True
        if op in y and y.replace(op, neg, 1) == x:
            return True
    for a, b in ((x, y), (y, x)):
        if a.endswith(" == True") and b == a[: -len("True")] + "False":
            return True
    return False


def _reads_outputs(expr: Expr) -> bool:
    return any(
        isinstance(node, AtName) and node.namespace == "outputs" for node in sub_expressions(expr)
    )


def _mantle_types(project: Any) -> dict[str, str]:
    """Memory entry types under every name a condition may use for them."""
    types: dict[str, str] = {}
    entries = list(project.memory.values())
    for skill in project.skills.values():
        entries.extend(skill.memory.values())
    for entry in entries:
        qualified = f"{entry.namespace}.{entry.name}"
        for key in (qualified, f"session.{qualified}", f"memory.{qualified}", entry.name):
            types.setdefault(key, entry.type)
    return types


@dataclass(slots=True)
class SkillCatalogue:
    """The "Skills of this agent" section of a Mantle system prompt: skill id -> its line.

    Every case of every skill has the same system prompt, and its catalogue grows with the
    skills: repeating it per case made ``prompts`` quadratic (1.2 GB for 2,000 skills). So a
    case's ``system`` holds ``reference`` where the catalogue stands, and ``lines`` is shown
    once."""

    entries: dict[str, str]

    heading = "Skills of this agent:"

    @property
    def lines(self) -> list[str]:
        return list(self.entries.values())

    @property
    def reference(self) -> str:
        count = len(self.entries)
        return f"{self.heading} [the skill catalogue of {count} skills, listed once, not per case]"


def skill_catalogue(project: Any) -> SkillCatalogue:
    """The skill catalogue of ``project``'s system prompt (its lines as the model reads them)."""
    from agentscript.mantle.queries import engine_managed

    return SkillCatalogue(
        {
            s.id: f"- {s.id} ({s.name or s.id}): {' '.join(s.description.split())}"
            for s in project.skills.values()
            if not s.disabled and not engine_managed(s)
        }
    )


def _system_without_catalogue(project: Any, catalogue: SkillCatalogue) -> str:
    from agentscript.mantle.run.prompt import system_prompt

    system = system_prompt(project)
    if not catalogue.entries:
        return system
    section = catalogue.heading + "\n" + "\n".join(catalogue.lines)
    # The catalogue is the last deploy-stable section; if the prompt's layout ever changes so
    # that it is not, the full text is kept rather than a wrong cut made.
    if system.endswith(section):
        return system[: -len(section)] + catalogue.reference
    return system


def skill_prompts(
    project: Any, max_cases: int = MAX_CASES, only: str | None = None
) -> list[NodePrompts]:
    """Mantle: per skill (or the skill named ``only``), its prose for each combination of the
    ``if:`` markers that shape it (rule M4), then one case per ordered-block step with what that
    step puts before the model. Each case's ``system`` refers to the skill catalogue
    (``skill_catalogue``) instead of repeating it."""
    catalogue = skill_catalogue(project)
    system = _system_without_catalogue(project, catalogue)
    types = _mantle_types(project)
    result: list[NodePrompts] = []
    for skill in project.skills.values():
        if only is not None and skill.id != only:
            continue
        paths: list[tuple[Facts, list[str]]] = [(Facts(types), [])]
        truncated = False
        for paragraph in skill.paragraphs:
            if paragraph.block_id is not None:
                continue
            condition = paragraph.condition
            if condition is None or condition.expr is None:
                for _facts, lines in paths:
                    lines.append(paragraph.text)
                continue
            grown: list[tuple[Facts, list[str]]] = []
            for facts, lines in paths:
                for holds in (True, False):
                    after = assume(condition.expr, holds, facts)
                    if after is None:
                        continue
                    if len(grown) >= max_cases:
                        truncated = True
                        break
                    grown.append((after, [*lines, paragraph.text] if holds else list(lines)))
            paths = grown
        tools = sorted(project.tools_for(skill.id))
        cases = [
            PromptCase(
                [[a.label() for a in facts.atoms]], system, "\n\n".join(lines), tools, {}, {}, []
            )
            for facts, lines in paths
        ]
        for block in skill.blocks.values():
            for step in block.steps:
                text = step.instructions or step.utterance or step.description or ""
                cases.append(
                    PromptCase(
                        [[f"block {block.id}, step {step.id} ({step.kind})"]],
                        system,
                        text,
                        tools,
                        {},
                        {},
                        _step_effects(step),
                    )
                )
        result.append(
            NodePrompts(skill.id, _merge(cases), truncated, catalogue.entries.get(skill.id))
        )
    return result


def _step_effects(step: Any) -> list[str]:
    effects: list[str] = []
    if step.collect:
        effects.append(f"collect {step.collect}")
    if step.execute_tool:
        effects.append(f"run {step.execute_tool}")
    if step.action:
        effects.append(f"action {step.action}")
    for name, value in step.set_memory.items():
        effects.append(f"set {name} = {value!r}")
    if step.call:
        effects.append(f"call skill {step.call}")
    if step.link:
        effects.append(f"link skill {step.link}")
    return effects


__all__ = [
    "MAX_CASES",
    "Atom",
    "NodePrompts",
    "PromptCase",
    "SkillCatalogue",
    "node_prompts",
    "simplify",
    "skill_catalogue",
    "skill_prompts",
]
