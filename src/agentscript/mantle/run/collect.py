"""Collect steps spoken by the framework (Mantle step table: "the framework collects one
memory entry; the LLM only extracts the value").

When a block stops at an unsatisfied ``collect:`` step, its question is delivered verbatim
(variant selection and ``{...}`` interpolation as for any response) and the turn ends; on the
next message the model extracts the value with ``set_fields`` (or handles a digression).
The question is the step's ``utterance``, else the response ``utter_ask_<entry>`` when the
project defines it, else none: then the model words the question (the prompt says so).

The block entry remembers the step whose question was spoken (``entry["spoken"]``) so the
question is said once per wait; resuming a paused skill clears it, so a resumed block asks
its step's question again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentscript.mantle.model import Project, Skill, Step
from agentscript.mantle.queries import collect_key
from agentscript.mantle.run.stack import BlockEntry, Frame
from agentscript.trace_steps import ResponseKind

if TYPE_CHECKING:
    from agentscript.mantle.run.turn_context import TurnContext

ASK_PREFIX = "utter_ask_"


def question_name(project: Project, skill: Skill, step: Step) -> str | None:
    """The response that asks for the step's entry (None: the model asks)."""
    if step.utterance:
        return step.utterance
    key = collect_key(skill.id, step)
    if key is None:
        return None
    fallback = ASK_PREFIX + key.split(".", 1)[1]
    return fallback if fallback in project.responses else None


def ask(ctx: TurnContext, skill: Skill, block_id: str, entry: BlockEntry, step: Step) -> bool:
    """Say the step's question unless it was already said for this wait; True when said
    (the turn then ends and waits for the user)."""
    if entry.get("spoken") == step.id:
        return False
    name = question_name(ctx.project, skill, step)
    if name is None:
        return False
    before = len(ctx.result.messages)
    ctx.utter(
        name, ResponseKind.COLLECT, skill=skill.id, block=block_id, step=step.id, ends_turn=True
    )
    if len(ctx.result.messages) == before:
        return False  # rendered empty: the model asks instead
    entry["spoken"] = step.id
    ctx.stop = True
    return True


def reask(frame: Frame) -> None:
    """A resumed skill asks its waiting collect question again."""
    for entry in frame["blocks"]:
        entry["spoken"] = None
