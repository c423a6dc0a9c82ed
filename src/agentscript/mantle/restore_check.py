"""Checking a saved Mantle session against its project (see :mod:`agentscript.engine.restore`).

Memory holds exactly the declared entries, each value in its declared form; the skill stack
(``extra["mantle"]``, see :mod:`.stack`) names known skills, blocks and steps with valid
statuses; a pending confirmation names a tool of its skill; the bookkeeping maps have the
types the turn code reads. Raises SessionRestoreError at the first problem.
"""

from __future__ import annotations

from typing import Any

from agentscript.engine.restore import Checker, check_usage
from agentscript.mantle.memory import MemoryWriteError, coerce_value, initial_memory
from agentscript.mantle.model import Project
from agentscript.mantle.run.stack import ACTIVE, PARKED, PAUSED

STATUSES = {ACTIVE, PARKED, PAUSED}
KINDS = {"routed", "invoked", "interrupt", "engine", "start"}
STACK_FIELDS = {
    "stack",
    "pending",
    "fired",
    "written",
    "activations",
    "started",
    "offer",  # a resume offer waiting for the user's yes/no (lifecycle)
    "ending",  # conversation.before_end skills still to run (lifecycle)
    "offered",  # the button payloads offered by the last turn
}
FRAME_FIELDS = {"skill", "status", "kind", "via_call", "blocks"}
ENTRY_FIELDS = {"block", "step", "call", "asked", "held"}
OPTIONAL_ENTRY_FIELDS = {"spoken"}  # the collect step whose question was said
PENDING_FIELDS = {"skill", "tool", "arguments", "source", "block", "step", "turn"}


def project_shape(project: Project) -> dict[str, Any]:
    """What a saved session depends on: memory entries and types, skills, blocks, steps, tools."""
    return {
        "memory": {e.qualified_name: e.type for e in project.all_memory()},
        "skills": {
            skill_id: {
                "blocks": {b: [s.id for s in block.steps] for b, block in skill.blocks.items()},
                "tools": sorted(project.tools_for(skill_id)),
            }
            for skill_id, skill in sorted(project.skills.items())
        },
    }


def check_mantle_state(project: Project, c: Checker, payload: dict[str, Any]) -> dict[str, Any]:
    """The checked memory."""
    declared = {name: "" for name in initial_memory(project)}

    def coerce(name: str, value: Any) -> Any:
        entry = project.memory_entry(name)
        assert entry is not None
        try:
            coerced = coerce_value(entry, value)
        except MemoryWriteError as exc:
            raise ValueError(str(exc)) from None
        if coerced != value:
            raise ValueError(f"expected a {entry.type} value, got {value!r}")
        return coerced

    memory = c.variables(payload["variables"], declared, coerce)
    for field in ("current_node", "resume_node"):
        value = payload.get(field)
        if value is not None:
            c.one_of(value, field, {*project.skills, "router"})
    if payload.get("pending_confirmation") is not None:
        c.fail("pending_confirmation", "Mantle sessions keep confirmations in the skill stack")
    extra = c.mapping(payload.get("extra", {}), "extra")
    c.keys(extra, "extra", {"mantle", "usage"}, set())
    check_usage(c, extra)
    if "mantle" in extra:
        _check_stack(project, c, c.mapping(extra["mantle"], "extra.mantle"))
    return memory


def _check_stack(project: Project, c: Checker, data: dict[str, Any]) -> None:
    c.keys(data, "extra.mantle", STACK_FIELDS, set())
    for index, raw in enumerate(c.listing(data.get("stack", []), "extra.mantle.stack")):
        where = f"extra.mantle.stack[{index}]"
        frame = c.mapping(raw, where)
        c.keys(frame, where, FRAME_FIELDS, FRAME_FIELDS)
        skill = project.skills[c.one_of(frame["skill"], f"{where}.skill", project.skills)]
        c.one_of(frame["status"], f"{where}.status", STATUSES)
        c.one_of(frame["kind"], f"{where}.kind", KINDS)
        c.boolean(frame["via_call"], f"{where}.via_call")
        for position, raw_entry in enumerate(c.listing(frame["blocks"], f"{where}.blocks")):
            at = f"{where}.blocks[{position}]"
            entry = c.mapping(raw_entry, at)
            c.keys(entry, at, ENTRY_FIELDS | OPTIONAL_ENTRY_FIELDS, ENTRY_FIELDS)
            block = skill.blocks[c.one_of(entry["block"], f"{at}.block", skill.blocks)]
            if entry["step"] is not None:
                c.one_of(entry["step"], f"{at}.step", {s.id for s in block.steps})
            c.boolean(entry["call"], f"{at}.call")
            for step_id, turn in c.mapping(entry["asked"], f"{at}.asked").items():
                c.count(turn, f"{at}.asked.{step_id}")
            if entry["held"] is not None:
                c.mapping(entry["held"], f"{at}.held")
            if entry.get("spoken") is not None:
                c.one_of(entry["spoken"], f"{at}.spoken", {s.id for s in block.steps})
    pending = data.get("pending")
    if pending is not None:
        where = "extra.mantle.pending"
        item = c.mapping(pending, where)
        c.keys(item, where, PENDING_FIELDS, {"skill", "tool", "arguments"})
        skill_id = c.one_of(item["skill"], f"{where}.skill", project.skills)
        c.one_of(item["tool"], f"{where}.tool", project.tools_for(skill_id))
        c.mapping(item["arguments"], f"{where}.arguments")
        if item.get("turn") is not None:
            c.count(item["turn"], f"{where}.turn")
    for index, key in enumerate(c.listing(data.get("fired", []), "extra.mantle.fired")):
        c.string(key, f"extra.mantle.fired[{index}]")
    for name in ("written", "activations"):
        for key, value in c.mapping(data.get(name, {}), f"extra.mantle.{name}").items():
            c.count(value, f"extra.mantle.{name}.{key}")
    c.boolean(data.get("started", False), "extra.mantle.started")
    offer = data.get("offer")
    if offer is not None:
        item = c.mapping(offer, "extra.mantle.offer")
        c.keys(item, "extra.mantle.offer", {"skill"}, {"skill"})
        c.one_of(item["skill"], "extra.mantle.offer.skill", project.skills)
    for index, payload in enumerate(c.listing(data.get("offered", []), "extra.mantle.offered")):
        c.string(payload, f"extra.mantle.offered[{index}]")
    ending = data.get("ending")
    if ending is not None:
        for index, skill_id in enumerate(c.listing(ending, "extra.mantle.ending")):
            c.string(skill_id, f"extra.mantle.ending[{index}]")
