"""Checking a saved Mantle session against its project (see :mod:`agentscript.engine.restore`).

Memory holds exactly the declared entries, each value in its declared form; the skill stack
(``extra["mantle"]``, see :mod:`.stack`) names known skills, blocks and steps with valid
statuses and keeps the runtime's invariants (one frame per skill, only the top one active, a
parked frame below the skill it invoked, ``via_call`` only on an invoked frame, a block at
most once in a frame with only ``call:``-started blocks above the first); a held step has the
shape the runtime writes; a pending confirmation is one the live turn could have held (a tool
of its skill that needs confirmation, arguments as a live call's, its block and step where its
skill stands); the bookkeeping holds what the runtime writes (``written``: declared memory
entries and past turns; ``activations``: project skills, counted from 1; ``ending``: what is
left of ``conversation.before_end``; ``offer``: a paused skill on the stack, unless a
session-end turn has run since). Sizes are not held to the limits in force (lowering one must
strand no saved session), but a held call's arguments are, as the call was. Raises
SessionRestoreError at the first problem.
"""

from __future__ import annotations

from typing import Any

from agentscript.engine.kernel import bounds_problem
from agentscript.engine.restore import Checker, check_usage
from agentscript.limits import Limits
from agentscript.mantle.memory import MemoryWriteError, coerce_value, initial_memory
from agentscript.mantle.model import Condition, OrderedBlock, Project, Skill
from agentscript.mantle.queries import tool_constraint
from agentscript.mantle.run.confirmation import needs_confirmation
from agentscript.mantle.run.lifecycle import before_end_skills
from agentscript.mantle.run.stack import ACTIVE, PARKED, PAUSED
from agentscript.mantle.run.tool_handler import check_arguments, type_problem
from agentscript.trace_steps import Source

STATUSES = {ACTIVE, PARKED, PAUSED}
# How a frame's skill started: the kinds ``transitions.start_skill`` is given (routing, an
# @skill or ``call:`` invocation, an interruption, a lifecycle start; a ``link:`` keeps its
# frame's kind).
KINDS = {"routed", "invoked", "interrupt", "engine"}
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
# ``turn`` is absent in sessions saved before it was recorded (see ``PendingCall``).
REQUIRED_PENDING_FIELDS = PENDING_FIELDS - {"turn"}
# What ``hold_for_confirmation`` writes: the model's call, or an ``execute_tool`` block step's.
PENDING_SOURCES = {Source.LLM.value, Source.STEP.value}
HELD_FIELDS = {"step", "memory"}  # what ``block_pointer.hold`` writes


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


def check_mantle_state(
    project: Project, c: Checker, payload: dict[str, Any], limits: Limits | None = None
) -> dict[str, Any]:
    """The checked memory. ``limits`` bound the skill stack and a pending call's arguments as
    they bound a live turn (when not given: the checker's)."""
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
        _check_stack(
            project,
            c,
            c.mapping(extra["mantle"], "extra.mantle"),
            # The bounds the session will run with (the Checker carries them).
            limits or c.limits,
            c.count(payload.get("turn", 0), "turn"),
            payload.get("ended") is True,
        )
    return memory


def _check_stack(
    project: Project,
    c: Checker,
    data: dict[str, Any],
    limits: Limits,
    turn: int,
    ended: bool,
) -> None:
    c.keys(data, "extra.mantle", STACK_FIELDS, set())
    frames = c.listing(data.get("stack", []), "extra.mantle.stack")
    # One frame per skill (below), so never more frames than skills: refused before any is
    # read. Not Limits.max_stack_depth, which bounds new starts only: a limit lowered since
    # the save must not strand the sessions saved under it.
    if len(frames) > len(project.skills):
        c.fail(
            "extra.mantle.stack",
            f"{len(frames)} frames; one per skill, and the project has {len(project.skills)}",
        )
    seen: dict[str, int] = {}
    for index, raw in enumerate(frames):
        where = f"extra.mantle.stack[{index}]"
        frame = c.mapping(raw, where)
        c.keys(frame, where, FRAME_FIELDS, FRAME_FIELDS)
        skill = project.skills[c.one_of(frame["skill"], f"{where}.skill", project.skills)]
        if skill.id in seen:
            # transitions.push_refusal: one frame per skill (memory is per skill).
            c.fail(
                f"{where}.skill",
                f"'{skill.id}' is already on the stack (extra.mantle.stack[{seen[skill.id]}])",
            )
        seen[skill.id] = index
        c.one_of(frame["status"], f"{where}.status", STATUSES)
        c.one_of(frame["kind"], f"{where}.kind", KINDS)
        if c.boolean(frame["via_call"], f"{where}.via_call") and frame["kind"] != "invoked":
            # blocks.call_step starts the skill a call: step names as "invoked"; a link:
            # passes on its frame's kind with via_call, so via_call is never on another kind.
            c.fail(f"{where}.via_call", "only a skill invoked by a call: step has via_call")
        _check_blocks(c, skill, c.listing(frame["blocks"], f"{where}.blocks"), where, turn)
    for index, frame in enumerate(frames):
        where = f"extra.mantle.stack[{index}]"
        above = frames[index + 1] if index + 1 < len(frames) else None
        if frame["status"] == ACTIVE and above is not None:
            # SkillStack.active: only the top frame is worked on; a start pauses or parks
            # the frame below it.
            c.fail(f"{where}.status", "only the top frame of the stack can be active")
        if frame["status"] == PARKED and (above is None or above["kind"] != "invoked"):
            # A parked frame waits for the skill it invoked, right above it (transitions.finish
            # resumes it; SkillStack.move_to_top moves the two together).
            c.fail(f"{where}.status", "a parked frame must be right below the skill it invoked")
    pending = data.get("pending")
    if pending is not None:
        _check_pending(project, c, c.mapping(pending, "extra.mantle.pending"), frames, limits, turn)
    _check_bookkeeping(project, c, data, frames, turn, ended)


def _check_bookkeeping(
    project: Project,
    c: Checker,
    data: dict[str, Any],
    frames: list[dict[str, Any]],
    turn: int,
    ended: bool,
) -> None:
    for index, key in enumerate(c.listing(data.get("fired", []), "extra.mantle.fired")):
        c.string(key, f"extra.mantle.fired[{index}]")
    # TurnContext.write notes the session's turn for each memory entry it writes (every
    # write is to a declared entry, during a turn).
    memory = initial_memory(project)
    for key, value in c.mapping(data.get("written", {}), "extra.mantle.written").items():
        c.one_of(key, f"extra.mantle.written.{key}", memory)
        if c.count(value, f"extra.mantle.written.{key}") > turn:
            c.fail(
                f"extra.mantle.written.{key}", f"turn {value} is after the session's turn {turn}"
            )
    # transitions.start_skill counts each start of a project skill (1 or more).
    activations = c.mapping(data.get("activations", {}), "extra.mantle.activations")
    for key, value in activations.items():
        c.one_of(key, f"extra.mantle.activations.{key}", project.skills)
        if c.count(value, f"extra.mantle.activations.{key}") == 0:
            c.fail(f"extra.mantle.activations.{key}", "a skill is counted when it starts (0)")
    c.boolean(data.get("started", False), "extra.mantle.started")
    ending = data.get("ending")
    if ending is not None:
        names = c.listing(ending, "extra.mantle.ending")
        for index, skill_id in enumerate(names):
            c.string(skill_id, f"extra.mantle.ending[{index}]")
        listed = before_end_skills(project)
        # session_end_signal writes conversation.before_end; continue_ending takes skills
        # from its front: what is left is always a tail of it.
        if len(names) > len(listed) or names != listed[len(listed) - len(names) :]:
            c.fail(
                "extra.mantle.ending",
                f"not what is left of conversation.before_end {listed!r} to run",
            )
    offer = data.get("offer")
    if offer is not None:
        item = c.mapping(offer, "extra.mantle.offer")
        c.keys(item, "extra.mantle.offer", {"skill"}, {"skill"})
        skill_id = c.one_of(item["skill"], "extra.mantle.offer.skill", project.skills)
        # lifecycle.after_skills_ended offers a paused frame (resumable); the next turn
        # takes the offer before anything else runs. Only a /session_end signal turn (which
        # leaves the session ending or ended) runs skills with the offer still made.
        if (
            ending is None
            and not ended
            and not any(f["skill"] == skill_id and f["status"] == PAUSED for f in frames)
        ):
            c.fail("extra.mantle.offer.skill", f"'{skill_id}' is not a paused skill on the stack")
    for index, payload in enumerate(c.listing(data.get("offered", []), "extra.mantle.offered")):
        c.string(payload, f"extra.mantle.offered[{index}]")


def _check_blocks(c: Checker, skill: Skill, entries: list[Any], where: str, turn: int) -> None:
    """A frame's block entries (``SkillStack.enter_block``): the first started with the skill
    or by its prose, each one above it by a ``call:`` step of the one below (``call`` true; a
    ``link:`` keeps it). Call/link cycles are load errors (``mantle-call-cycle``), so no block
    is entered twice in one frame."""
    entered: dict[str, int] = {}
    for position, raw_entry in enumerate(entries):
        at = f"{where}.blocks[{position}]"
        entry = c.mapping(raw_entry, at)
        c.keys(entry, at, ENTRY_FIELDS | OPTIONAL_ENTRY_FIELDS, ENTRY_FIELDS)
        block = skill.blocks[c.one_of(entry["block"], f"{at}.block", skill.blocks)]
        if block.id in entered:
            c.fail(
                f"{at}.block",
                f"'{block.id}' is already entered in this frame ({where}.blocks"
                f"[{entered[block.id]}]); a block is never entered twice",
            )
        entered[block.id] = position
        steps = {s.id for s in block.steps}
        if entry["step"] is not None:
            c.one_of(entry["step"], f"{at}.step", steps)
        if c.boolean(entry["call"], f"{at}.call") != (position > 0):
            c.fail(
                f"{at}.call",
                "the first block of a frame is not started by a call: step"
                if position == 0
                else "a block above the first is started by a call: step (call must be true)",
            )
        for step_id, asked in c.mapping(entry["asked"], f"{at}.asked").items():
            c.one_of(step_id, f"{at}.asked.{step_id}", steps)
            if c.count(asked, f"{at}.asked.{step_id}") > turn:
                c.fail(f"{at}.asked.{step_id}", f"turn {asked} is after the session's turn {turn}")
        if entry["held"] is not None:
            _check_held(c, block, c.mapping(entry["held"], f"{at}.held"), f"{at}.held")
        if entry.get("spoken") is not None:
            c.one_of(entry["spoken"], f"{at}.spoken", steps)


def _check_held(c: Checker, block: OrderedBlock, held: dict[str, Any], at: str) -> None:
    """``{"step": step or null, "memory": fingerprint}`` (``block_pointer.hold``)."""
    c.keys(held, at, HELD_FIELDS, HELD_FIELDS)
    if held["step"] is not None:
        c.one_of(held["step"], f"{at}.step", {s.id for s in block.steps})
    c.string(held["memory"], f"{at}.memory")


def _check_pending(
    project: Project,
    c: Checker,
    item: dict[str, Any],
    frames: list[dict[str, Any]],
    limits: Limits,
    turn: int,
) -> None:
    """A call ``confirmation.hold_for_confirmation`` could have written: a tool of its skill
    that needs confirmation, held by the model (``source: llm``, no block or step; arguments
    checked like the model's, ``call_dispatch.call_skill_tool``) or by an ``execute_tool`` step
    (``source: step``; the step's block and step, where its skill's pointer stands, and the
    step's parameters), in a turn not after the session's."""
    where = "extra.mantle.pending"
    c.keys(item, where, PENDING_FIELDS, REQUIRED_PENDING_FIELDS)
    skill_id = c.one_of(item["skill"], f"{where}.skill", project.skills)
    skill = project.skills[skill_id]
    tools = project.tools_for(skill_id)
    tool = tools[c.one_of(item["tool"], f"{where}.tool", tools)]
    if not needs_confirmation(tool_constraint(project, skill_id, tool.name)):
        c.fail(f"{where}.tool", f"'{tool.name}' does not need a confirmation in '{skill_id}'")
    arguments = c.mapping(item["arguments"], f"{where}.arguments")
    source = c.one_of(item["source"], f"{where}.source", PENDING_SOURCES)
    if item.get("turn") is not None and c.count(item["turn"], f"{where}.turn") > turn:
        c.fail(f"{where}.turn", f"turn {item['turn']} is after the session's turn {turn}")
    # Calls waiting for confirmation go with their skill (transitions.forget_pending).
    frame = next((f for f in frames if f["skill"] == skill_id), None)
    if frame is None:
        c.fail(f"{where}.skill", f"'{skill_id}' is not on the skill stack")
    bound = bounds_problem(tool.name, arguments, limits)
    if bound is not None:
        reason, field = bound
        c.fail(f"{where}.arguments", f"{reason} (Limits.{field} = {getattr(limits, field)})")
    if source == Source.LLM:
        for name in ("block", "step"):
            if item[name] is not None:
                c.fail(f"{where}.{name}", "a call held from the model has no block or step")
        _, problem = check_arguments(tool, arguments)
        if problem is not None:
            c.fail(f"{where}.arguments", problem)
        return
    block = skill.blocks[c.one_of(item["block"], f"{where}.block", skill.blocks)]
    step = block.step(c.one_of(item["step"], f"{where}.step", {s.id for s in block.steps}))
    assert step is not None
    if step.execute_tool != tool.name:
        c.fail(f"{where}.step", f"step '{step.id}' does not run '{tool.name}'")
    entry = frame["blocks"][-1] if frame["blocks"] else None
    if entry is None or (entry["block"], entry["step"]) != (block.id, step.id):
        # The held step's pointer stays on it until the answer moves it (blocks.execute_step).
        c.fail(
            f"{where}.step",
            f"'{skill_id}' is not at step '{step.id}' of block '{block.id}'",
        )
    for name in sorted(set(arguments) | set(step.parameters)):
        if name not in step.parameters:
            c.fail(f"{where}.arguments.{name}", f"not a parameter of step '{step.id}'")
        if name not in arguments:
            c.fail(f"{where}.arguments.{name}", f"missing (a parameter of step '{step.id}')")
        given = step.parameters[name]
        if not isinstance(given, Condition):
            if arguments[name] != given:
                c.fail(f"{where}.arguments.{name}", f"step '{step.id}' passes {given!r}")
            continue
        # A value read from memory when the step ran: of the type (and among the values) the
        # tool declares, as a model's argument must be (tool_handler.check_arguments).
        properties = (tool.parameters_schema or {}).get("properties") or {}
        problem = type_problem(properties.get(name) or {}, arguments[name])
        if problem is not None:
            c.fail(f"{where}.arguments.{name}", problem)
