"""Pure questions an engine asks about a loaded project, given a memory snapshot.

``memory`` maps qualified names (``"project.authenticated"``, ``"card_replace.reason"``) to
values; a missing key means "unset". Conditions are evaluated through an ``evaluate``
callback so the engine keeps control of evaluation; :func:`default_evaluator` uses the
shared expression evaluator. Every gate fails closed (boundary rule 6): a condition that
raises counts as false.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from agentscript.expr.evaluate import Env, compile_expr
from agentscript.mantle.conditions import make_condition
from agentscript.mantle.model import (
    END_STEP,
    LIFECYCLE_SKILLS,
    Condition,
    OrderedBlock,
    Project,
    Response,
    ResponseVariant,
    Skill,
    Step,
    StepKind,
    Tool,
    ToolConstraint,
)

Memory = Mapping[str, Any]
Evaluator = Callable[[Condition, Memory], object]

_MEMORY_TOKEN = re.compile(r"@memory\.([A-Za-z0-9_\-]+)\.([A-Za-z0-9_\-]+)")
_TOOL_TOKEN = re.compile(r"`?@tool\.([A-Za-z0-9_\-]+)`?")
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][\w.]*)\}")


class _Namespace(Mapping[str, Any]):
    """One memory namespace where an unset entry reads as ``None`` (Mantle semantics)."""

    def __init__(self, values: dict[str, Any]) -> None:
        self._values = values

    def __getitem__(self, key: str) -> Any:
        return self._values.get(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)


def session_view(memory: Memory) -> dict[str, _Namespace]:
    """``{"project": {...}, "<skill>": {...}}`` built from qualified names."""
    grouped: dict[str, dict[str, Any]] = {}
    for qualified, value in memory.items():
        namespace, _, name = qualified.partition(".")
        grouped.setdefault(namespace, {})[name] = value
    return {ns: _Namespace(values) for ns, values in grouped.items()}


class _Session(Mapping[str, Any]):
    def __init__(self, memory: Memory) -> None:
        self._view = session_view(memory)

    def __getitem__(self, key: str) -> Any:
        return self._view.get(key, _Namespace({}))

    def __iter__(self) -> Iterator[str]:
        return iter(self._view)

    def __len__(self) -> int:
        return len(self._view)


def default_evaluator(condition: Condition, memory: Memory) -> object:
    """Evaluate with :mod:`agentscript.expr`; raises when the condition cannot be evaluated."""
    expr = condition.expr
    if expr is None:
        parsed, _ = make_condition(condition.text, condition.file, condition.span)
        if parsed.expr is None:
            raise ValueError(f"condition cannot be parsed: {condition.text}")
        expr = parsed.expr
    return compile_expr(expr)(Env(names={"session": _Session(memory)}))


def holds(
    condition: Condition | None, memory: Memory, evaluate: Evaluator = default_evaluator
) -> bool:
    """True when there is no condition; False when it is false *or* cannot be evaluated."""
    if condition is None:
        return True
    try:
        return bool(evaluate(condition, memory))
    except Exception:
        return False


# --- skills -----------------------------------------------------------------------------


def offered_skills(
    project: Project, memory: Memory, evaluate: Evaluator = default_evaluator
) -> list[Skill]:
    """Skills the router may offer now: enabled, not engine-managed, ``requires`` holds."""
    return [
        skill
        for skill in project.skills.values()
        if not skill.disabled
        and not engine_managed(skill)
        and holds(skill.requires, memory, evaluate)
    ]


def engine_managed(skill: Skill) -> bool:
    """Run by the engine, not routed: ``routing.engine_managed: true``, or a lifecycle skill
    override without a ``routing:`` key (it keeps the bundled value)."""
    if skill.engine_managed is None:
        return skill.id in LIFECYCLE_SKILLS
    return skill.engine_managed


def skill_prompt(
    skill: Skill,
    memory: Memory,
    *,
    evaluate: Evaluator = default_evaluator,
    project: Project | None = None,
) -> str:
    """The skill's prose as the model should see it now.

    ``if:`` paragraphs whose condition does not hold are dropped, block fences are left out
    (the engine runs blocks), ``@memory.ns.entry`` becomes the value when set (``[set]`` for
    PII entries when ``project`` is given), and ``@tool.x`` becomes the plain tool name.
    """
    kept = [
        p.text
        for p in skill.paragraphs
        if p.block_id is None and holds(p.condition, memory, evaluate)
    ]
    return substitute("\n\n".join(kept), memory, project)


def substitute(text: str, memory: Memory, project: Project | None = None) -> str:
    """Replace ``@memory`` tokens by current values; unset ones stay as written."""

    def memory_value(match: re.Match[str]) -> str:
        qualified = f"{match.group(1)}.{match.group(2)}"
        value = memory.get(qualified)
        if value is None:
            return match.group(0)
        entry = project.memory_entry(qualified) if project else None
        return "[set]" if entry is not None and entry.pii else _display(value)

    text = _MEMORY_TOKEN.sub(memory_value, text)
    return _TOOL_TOKEN.sub(lambda m: m.group(1), text)


def _display(value: object) -> str:
    if isinstance(value, bool):
        return "True" if value else "False"
    return str(value)


# --- ordered blocks ---------------------------------------------------------------------


def first_step(block: OrderedBlock) -> Step | None:
    return block.steps[0] if block.steps else None


def next_step_id(
    block: OrderedBlock, step: Step, memory: Memory, evaluate: Evaluator = default_evaluator
) -> str:
    """Where control goes after ``step``: explicit ``next``, first matching branch, else the
    step below (``END`` after the last step)."""
    if step.kind is StepKind.END:
        return END_STEP
    if isinstance(step.next, str):
        return step.next
    if isinstance(step.next, list):
        for branch in step.next:
            if branch.condition is None or holds(branch.condition, memory, evaluate):
                return branch.target
    index = next(i for i, s in enumerate(block.steps) if s is step)
    return block.steps[index + 1].id if index + 1 < len(block.steps) else END_STEP


def collect_key(skill_id: str, step: Step) -> str | None:
    """The qualified memory name a collect step fills (bare names belong to the skill)."""
    if step.collect is None:
        return None
    name = step.collect
    if name.startswith("session."):
        name = name[len("session.") :]
    return name if "." in name else f"{skill_id}.{name}"


def step_satisfied(
    skill_id: str, step: Step, memory: Memory, evaluate: Evaluator = default_evaluator
) -> bool:
    """A collect step whose entry is set; an instructions step whose ``complete_when`` holds."""
    if step.kind is StepKind.COLLECT:
        key = collect_key(skill_id, step)
        return key is not None and memory.get(key) is not None
    if step.kind is StepKind.INSTRUCTIONS:
        return step.complete_when is not None and holds(step.complete_when, memory, evaluate)
    return False


def current_step(
    skill_id: str,
    block: OrderedBlock,
    pointer: str | None,
    memory: Memory,
    evaluate: Evaluator = default_evaluator,
) -> Step | None:
    """The step that needs attention, starting at ``pointer`` (None: the first step).

    Collect steps already filled are passed over in order (boundary rule 7) unless they set
    ``ask_before_filling``; the walk stops at the first other step, so the pointer never
    moves past an unsatisfied step. Returns None when the block has reached END.
    """
    step = block.step(pointer) if pointer else first_step(block)
    seen: set[str] = set()
    while step is not None and step.id not in seen:
        seen.add(step.id)
        if step.kind is StepKind.END:
            return None
        skippable = step.kind is StepKind.COLLECT and not step.ask_before_filling
        if not (skippable and step_satisfied(skill_id, step, memory, evaluate)):
            return step
        target = next_step_id(block, step, memory, evaluate)
        step = None if target == END_STEP else block.step(target)
    return step


# --- tools ------------------------------------------------------------------------------


def tool_constraint(project: Project, skill_id: str, tool_name: str) -> ToolConstraint | None:
    skill = project.skills.get(skill_id)
    return skill.tool_constraints.get(tool_name) if skill else None


def tool_allowed(
    project: Project,
    skill_id: str,
    tool_name: str,
    memory: Memory,
    evaluate: Evaluator = default_evaluator,
) -> bool:
    """Whether the tool may be shown or dispatched now (its ``requires`` holds)."""
    constraint = tool_constraint(project, skill_id, tool_name)
    return constraint is None or holds(constraint.requires, memory, evaluate)


def visible_tools(
    project: Project, skill_id: str, memory: Memory, evaluate: Evaluator = default_evaluator
) -> list[Tool]:
    """Tools of the active skill that the model may see now (gated ones withheld)."""
    return [
        tool
        for name, tool in project.tools_for(skill_id).items()
        if tool_allowed(project, skill_id, name, memory, evaluate)
    ]


# --- responses --------------------------------------------------------------------------


def select_variant(
    response: Response, memory: Memory, evaluate: Evaluator = default_evaluator
) -> ResponseVariant | None:
    """First conditioned variant that holds, else the default (else the first variant)."""
    for variant in response.variants:
        if variant.condition is not None and holds(variant.condition, memory, evaluate):
            return variant
    return response.default_variant or (response.variants[0] if response.variants else None)


def render_response_text(text: str, memory: Memory, skill: str | None) -> str:
    """Fill ``{session.ns.entry}`` and a bare ``{entry}`` (``skill``'s entry first, then the
    project's: the response's own skill, else the skill it is delivered for, see
    :func:`agentscript.mantle.run.delivery.render`); placeholders without a value are left
    as written."""

    def fill(match: re.Match[str]) -> str:
        name = match.group(1)
        if name.startswith("session."):
            keys = [name[len("session.") :]]
        else:
            keys = [f"{skill}.{name}"] if skill else []
            keys.append(f"project.{name}")
        for key in keys:
            value = memory.get(key)
            if value is not None:
                return _display(value)
        return match.group(0)

    return _PLACEHOLDER.sub(fill, text)
