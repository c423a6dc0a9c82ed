"""Which ``if:`` paragraph of the active skill wrote each part of a Mantle prompt
(``RESOLUTION_STEP.instructionLines``, docs/trace.md).

In: the instructions as resolved, the active skill and memory. Out: the instructions cut into
pieces, ``"\\n".join`` of their texts being the instructions: each kept ``if:`` paragraph is a
piece of its own with its condition as its branch (Mantle has no ``else``); the text between
them (the skill header, unconditioned prose, step guidance, ...) are pieces with no branch.
A piece ends with a newline where a blank line separated it from the next. Reads only.
"""

from __future__ import annotations

from typing import Any

from agentscript.mantle.model import Project, Skill
from agentscript.mantle.queries import Memory, holds, substitute


def instruction_lines(
    instructions: str, project: Project, skill: Skill | None, memory: Memory
) -> list[dict[str, Any]] | None:
    """The pieces of ``instructions``; None when no skill is active (the routing prompt)."""
    if skill is None:
        return None
    pieces: list[dict[str, Any]] = []
    at = 0
    for paragraph in skill.paragraphs:
        condition = paragraph.condition
        if paragraph.block_id is not None or condition is None or not holds(condition, memory):
            continue
        text = substitute(paragraph.text, memory, project).strip()
        start = instructions.find(text, at) if text else -1
        end = start + len(text)
        # Cut on the newline before and after the paragraph, so the pieces join back with "\n".
        if start <= at or instructions[start - 1] != "\n":
            continue
        if end < len(instructions) and instructions[end] != "\n":
            continue
        pieces.append({"text": instructions[at : start - 1], "line": None, "branches": []})
        branch = {
            "line": condition.span.line,
            "taken": "if",
            "condition": condition.text,
            "index": None,
        }
        pieces.append({"text": text, "line": paragraph.span.line, "branches": [branch]})
        at = end + 1
    if at <= len(instructions):
        pieces.append({"text": instructions[at:], "line": None, "branches": []})
    return pieces
