"""What the model sees in a Mantle turn: the system prompt, the turn-local instructions
and the engine tools (``activate_skill``, ``complete_skill``, ``cancel_skill``,
``set_fields``, ``resolve_tool_confirmation``).

Everything here is a pure function of the project and a memory snapshot; the orchestrator
decides which pieces apply.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from agentscript.mantle.model import (
    MemoryEntry,
    OrderedBlock,
    Project,
    ReferenceKind,
    Skill,
    Step,
    StepKind,
)
from agentscript.mantle.queries import (
    collect_key,
    engine_managed,
    holds,
    skill_prompt,
    substitute,
)
from agentscript.mantle.run.collect import question_name
from agentscript.mantle.run.delivery import render
from agentscript.models.base import ToolSpec

Memory = Mapping[str, Any]

MOMENT_FORMAT = "%A, %Y-%m-%d %H:%M %Z"
# The system prompt's one line that changes by itself (each minute). What compares prompts
# across time, as a recording's key does, reads them through ``without_moment``.
_MOMENT_LINE = re.compile(
    r"^Current date and time: \w+, \d{4}-\d{2}-\d{2} \d{2}:\d{2}\b.*$", re.MULTILINE
)

ACTIVATE, COMPLETE, CANCEL = "activate_skill", "complete_skill", "cancel_skill"
SET_FIELDS, RESOLVE = "set_fields", "resolve_tool_confirmation"
CANNOT_HELP, SEARCH_KNOWLEDGE = "cannot_help", "search_knowledge"
ENGINE_TOOLS = frozenset(
    {ACTIVATE, COMPLETE, CANCEL, SET_FIELDS, RESOLVE, CANNOT_HELP, SEARCH_KNOWLEDGE}
)

_JSON_OF = {
    "text": "string",
    "bool": "boolean",
    "int": "integer",
    "float": "number",
    "list": "array",
    "categorical": "string",
}


def without_moment(system: str) -> str:
    """``system`` with its current date and time replaced by ``<now>``.

    >>> without_moment("Persona\\n\\nCurrent date and time: Saturday, 2026-12-05 17:44 UTC")
    'Persona\\n\\nCurrent date and time: <now>'
    """
    return _MOMENT_LINE.sub("Current date and time: <now>", system)


def system_prompt(
    project: Project, memory: Memory | None = None, now: datetime | None = None
) -> str:
    """The documented sections, deploy-stable first: persona, rules, the skill glossary,
    then the current date and time and the project memory that is set (``[set]`` for PII).
    Without ``memory`` only the deploy-stable part is returned."""
    agent = project.agent
    parts = [agent.persona.strip()] if agent.persona.strip() else []
    if agent.rules:
        parts.append("Rules:\n" + "\n".join(f"- {rule}" for rule in agent.rules))
    glossary = [s for s in project.skills.values() if not s.disabled and not engine_managed(s)]
    if glossary:
        parts.append(
            "Skills of this agent:\n"
            + "\n".join(
                f"- {s.id} ({s.name or s.id}): {' '.join(s.description.split())}" for s in glossary
            )
        )
    if memory is None:
        return "\n\n".join(parts)
    moment = (now or datetime.now().astimezone()).strftime(MOMENT_FORMAT).strip()
    parts.append(f"Current date and time: {moment}")
    known = []
    for name, entry in project.memory.items():
        value = memory.get(entry.qualified_name)
        if value is not None:
            known.append(f"- {name}: {'[set]' if entry.pii else value}")
    if known:
        parts.append("What we know about this conversation (project memory):\n" + "\n".join(known))
    return "\n\n".join(parts)


def response_text(
    project: Project, name: str | None, memory: Memory, active: str | None
) -> str | None:
    """The text of response ``name`` as it is delivered while ``active`` is the active skill
    (the same memory scope, so the prompt never quotes what the user was not shown)."""
    rendered = render(project, None, memory, name, active)
    return None if rendered is None else rendered.text


def visible_skill_references(skill: Skill, memory: Memory) -> set[str]:
    """``@skill.x`` targets in the paragraphs the model can see now (``if:`` applied)."""
    out: set[str] = set()
    for paragraph in skill.paragraphs:
        if paragraph.block_id is None and holds(paragraph.condition, memory):
            out.update(r.target for r in paragraph.references if r.kind is ReferenceKind.SKILL)
    return out


def visible_block_references(skill: Skill, memory: Memory) -> list[str]:
    out: list[str] = []
    for paragraph in skill.paragraphs:
        if paragraph.block_id is None and holds(paragraph.condition, memory):
            for ref in paragraph.references:
                if ref.kind is ReferenceKind.BLOCK and ref.target not in out:
                    out.append(ref.target)
    return out


def routing_section(skills: list[Skill], paused: list[str], project: Project) -> str:
    lines = []
    custom = project.agent.prompts.get("routing_no_active_skill")
    if isinstance(custom, str) and custom.strip():
        lines.append(custom.strip())
    if skills:
        lines.append("Skills you can start with activate_skill:")
        lines.extend(f"- {s.id}: {' '.join(s.description.split())}" for s in skills)
    else:
        lines.append("No skill can be started right now.")
    if paused:
        lines.append(
            "Paused skills (the user changed topic): "
            + ", ".join(paused)
            + ". Offer to continue; if the user agrees call activate_skill with that skill, "
            "if not call cancel_skill to drop it."
        )
    return "\n".join(lines)


def skill_section(project: Project, skill: Skill, memory: Memory) -> str:
    lines = [f"Active skill: {skill.name or skill.id} ({skill.id})"]
    prose = skill_prompt(skill, memory, project=project).strip()
    if prose:
        lines.append(prose)
    blocks = visible_block_references(skill, memory)
    if blocks:
        lines.append(
            "To start an ordered block named as @block.<id> above, call activate_skill with "
            f"skill={skill.id!r} and block=<id> ({', '.join(blocks)})."
        )
    invoked = sorted(visible_skill_references(skill, memory))
    if invoked:
        lines.append(
            "A skill named as @skill.<id> above is started with activate_skill and returns "
            f"here when it finishes ({', '.join(invoked)})."
        )
    done = skill.complete_when
    if done is not None and done.criteria:
        met = done.condition is None or holds(done.condition, memory)
        lines.append(
            "Call complete_skill when all of these hold:\n"
            + "\n".join(f"- {c}" for c in done.criteria)
            + ("" if met else "\n(The skill's completion condition does not hold yet.)")
        )
    return "\n\n".join(lines)


def step_section(
    project: Project,
    skill: Skill,
    block: OrderedBlock,
    step: Step,
    memory: Memory,
    *,
    held: str | None = None,
) -> str:
    """Guidance for the step the block waits on."""
    head = f"Ordered block {block.id}, step {step.id}:"
    if step.kind is StepKind.COLLECT:
        key = collect_key(skill.id, step) or ""
        entry = project.memory_entry(key)
        name = key.split(".", 1)[1] if key.startswith(f"{skill.id}.") else key
        text = f"{head} collect {name}"
        if entry is not None and entry.description:
            text += f" ({entry.description})"
        if step.description:
            text += f". {step.description}"
        question = response_text(project, question_name(project, skill, step), memory, skill.id)
        if question:
            text += f'.\nThe user has been asked: "{question}". Do not ask it again.'
        else:
            text += ".\nAsk the user for it."
        text += f"\nWhen the user answers, record it with set_fields ({name})."
        if step.ask_before_filling:
            text += " Ask this question even if the user mentioned a value before."
        else:
            text += " If the user also gives answers to later questions, record them too."
        return text
    if step.kind is StepKind.INSTRUCTIONS:
        text = f"{head}\n{substitute(step.instructions or '', memory, project).strip()}"
        if step.complete_when is not None:
            text += f"\nThe step is done when: {step.complete_when.text}"
        return text
    return f"{head} {held or 'waiting'}"


def collected_section(skill: Skill, block: OrderedBlock, memory: Memory) -> str | None:
    done = []
    for step in block.steps:
        key = collect_key(skill.id, step)
        if key is not None and memory.get(key) is not None:
            done.append(f"- {key.split('.', 1)[1]}: {memory[key]}")
    if not done:
        return None
    return "Already collected (do not re-ask):\n" + "\n".join(done)


# --- engine tools -----------------------------------------------------------------------


def activate_spec(skills: list[str], blocks: list[str]) -> ToolSpec:
    properties: dict[str, Any] = {
        "skill": {"type": "string", "enum": skills, "description": "The skill id."}
    }
    if blocks:
        properties["block"] = {
            "type": "string",
            "enum": blocks,
            "description": "An ordered block of the skill to start (@block.<id>).",
        }
    return ToolSpec(
        ACTIVATE,
        "Start or resume a skill (and optionally one of its ordered blocks).",
        {"type": "object", "properties": properties, "required": ["skill"]},
    )


def complete_spec() -> ToolSpec:
    return ToolSpec(COMPLETE, "Finish the active skill: the user's request is done.")


def cancel_spec() -> ToolSpec:
    return ToolSpec(
        CANCEL, "Abandon the active skill (or, when none is active, drop the paused one)."
    )


KNOWLEDGE_NOTE = (
    "You searched the knowledge base this turn: answer from the passages search_knowledge "
    "returned, and say so when they do not answer the question."
)


def search_knowledge_spec() -> ToolSpec:
    return ToolSpec(
        SEARCH_KNOWLEDGE,
        "Search the knowledge base (the project's reference documents) for passages that "
        "answer a question.",
        {
            "type": "object",
            "properties": {"query": {"type": "string", "description": "What to look up."}},
            "required": ["query"],
        },
    )


def cannot_help_spec() -> ToolSpec:
    return ToolSpec(
        CANNOT_HELP,
        "Decline a request that no skill and no instruction covers (out of scope).",
    )


def resolve_spec() -> ToolSpec:
    return ToolSpec(
        RESOLVE,
        "Record the user's answer to the pending confirmation.",
        {
            "type": "object",
            "properties": {"confirmed": {"type": "boolean"}},
            "required": ["confirmed"],
        },
    )


def set_fields_spec(entries: Mapping[str, MemoryEntry]) -> ToolSpec:
    properties: dict[str, Any] = {}
    for name, entry in entries.items():
        prop: dict[str, Any] = {}
        json_type = _JSON_OF.get(entry.type)
        if json_type:
            prop["type"] = json_type
        if entry.type == "categorical" and entry.enum_values:
            prop["enum"] = list(entry.enum_values)
        if entry.description:
            prop["description"] = entry.description
        properties[name] = prop
    return ToolSpec(
        SET_FIELDS,
        "Record values the user gave (one or several at once).",
        {"type": "object", "properties": properties},
    )


def settable_entries(project: Project, skill: Skill) -> dict[str, MemoryEntry]:
    """Entries the model may write for ``skill``: ``llm_settable`` or owned by a collect."""
    out: dict[str, MemoryEntry] = {}
    for name, entry in skill.memory.items():
        if entry.llm_settable:
            out[name] = entry
    for block in skill.blocks.values():
        for step in block.steps:
            key = collect_key(skill.id, step)
            owned = project.memory_entry(key) if key else None
            if key and owned is not None:
                out[key.split(".", 1)[1] if key.startswith(f"{skill.id}.") else key] = owned
    return out
