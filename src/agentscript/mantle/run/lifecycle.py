"""Lifecycle skills the engine runs itself (Mantle "default skills").

- ``default_session_start`` runs at session start (the first turn, or a ``/session_start``
  message from a channel, which then never reaches the model). Built in, it says nothing.
- ``default_completed`` runs after a user skill completes and the stack is empty: built in,
  it says ``utter_can_do_something_else``.
- The resume offer (``default_resume_offer``) runs after an interrupting skill ends while a
  paused skill waits: it says ``utter_ask_wants_to_continue``; a plain yes on the next turn
  resumes the paused skill at the same step (its question is asked again), a plain no drops
  it from the stack; any other answer goes to the model, which still sees the paused skill.
- ``default_unsupported_request_handler`` runs when the model calls the ``cannot_help``
  engine tool: built in, it says ``utter_cannot_help`` and ends the turn.
- ``conversation.before_end`` skills run, in order, when a ``/session_end`` message arrives;
  the session ends once none of them is active any more.

Each is overridable by a project skill of the same id (it then runs as an engine-managed
skill, also without a ``routing:`` key) and its wording by redeclaring the response in the
project's ``responses.yml``. Every run is traced as ``SKILL_STEP`` events with
``kind: "engine"`` (``builtin: true`` when no project skill overrides it).

An override is pushed on the stack like any skill, so it keeps the stack rules (M2: one
frame per skill, ``Limits.max_stack_depth``). A refused start pushes nothing: ``cannot_help``
answers the model with the reason (a ``REFUSED_STEP`` of the call) and the turn goes on;
the others are a ``REFUSED_STEP`` named after the skill, and what was due goes on without it
(a ``/session_start`` does nothing more, the session still ends after ``before_end``).

The built-in wording and the load-time checks are in :mod:`agentscript.mantle.load.lifecycle`.
"""

from __future__ import annotations

from typing import Any, Protocol

from agentscript.engine.kernel import read_yes_no
from agentscript.mantle.model import (
    ASK_ANYTHING_ELSE,
    ASK_TO_CONTINUE,
    CANNOT_HELP_RESPONSE,
    COMPLETED_SKILL,
    LIFECYCLE_SKILLS,
    RESUME_OFFER_SKILL,
    SESSION_START_SKILL,
    UNSUPPORTED_SKILL,
    Project,
)
from agentscript.mantle.run.stack import PARKED
from agentscript.mantle.run.transitions import activate, drop_paused, push_refusal, start_skill
from agentscript.mantle.run.turn_context import TurnContext
from agentscript.trace_steps import ResponseKind, Source, event_step, refused_step, skill_event

SESSION_START_MESSAGE = "/session_start"
SESSION_END_MESSAGE = "/session_end"
CANNOT_HELP = "cannot_help"


class TurnLoop(Protocol):
    """What the lifecycle needs from the turn runner."""

    ctx: TurnContext

    async def settle(self) -> None: ...

    async def loop(self) -> None: ...


def overridden(project: Project, skill_id: str) -> bool:
    skill = project.skills.get(skill_id)
    return skill is not None and not skill.disabled


def run_builtin(ctx: TurnContext, skill_id: str, response: str | None, **say: Any) -> None:
    """A built-in lifecycle skill: activated, says its response, completed."""
    skill_event(ctx.trace, event="activated", skill=skill_id, kind="engine", builtin=True)
    if response is not None:
        rendered = ctx.render(response)
        if rendered is not None:
            text = rendered.text
            for key, value in say.items():
                text = text.replace("{" + key + "}", str(value))
            ctx.say(text, ResponseKind.LIFECYCLE, response=response, skill=skill_id)
    skill_event(ctx.trace, event="completed", skill=skill_id, builtin=True)


def start_override(ctx: TurnContext, skill_id: str) -> bool:
    """Push the project's lifecycle skill ``skill_id`` (False, traced, when the stack refuses)."""
    refusal = push_refusal(ctx, skill_id)
    if refusal is not None:
        refused_step(
            ctx.trace,
            name=skill_id,
            reason=f"cannot start '{skill_id}' now: {refusal}",
            node=ctx.node_name(),
            source=Source.DETERMINISTIC,
            skill=skill_id,
        )
        return False
    start_skill(ctx, skill_id, "engine")
    return True


# --- session start ------------------------------------------------------------------------


def start_session(ctx: TurnContext) -> bool:
    """``default_session_start``: the project's skill, else the silent built-in. False when
    the override could not start (already on the stack: a channel sent ``/session_start``
    again)."""
    ctx.stack.data["started"] = True
    if overridden(ctx.project, SESSION_START_SKILL):
        return start_override(ctx, SESSION_START_SKILL)
    run_builtin(ctx, SESSION_START_SKILL, None)
    return True


async def before_turn(runner: TurnLoop) -> bool:
    """Lifecycle work before the model is involved; True when the turn is fully handled."""
    ctx = runner.ctx
    text = ctx.text.strip()
    if text in (SESSION_START_MESSAGE, SESSION_END_MESSAGE):
        ctx.state.history.pop()  # a channel signal, not something the user said
        if text == SESSION_START_MESSAGE:
            if start_session(ctx):
                await _run_engine_skill(runner, SESSION_START_SKILL)
        else:
            ctx.stack.data["ending"] = before_end_skills(ctx)
            await continue_ending(runner)
        return True
    if not ctx.stack.data["started"]:
        start_session(ctx)
    offer = ctx.stack.data.get("offer")
    if offer is not None:
        ctx.stack.data["offer"] = None
        answer = read_yes_no(ctx.text)
        if answer is None:
            return False  # the model decides; the paused skill stays offered in the prompt
        skill_event(ctx.trace, event="completed", skill=RESUME_OFFER_SKILL, answer=answer)
        if answer:
            activate(ctx, offer["skill"], None)
            await runner.loop()
        else:
            drop_paused(ctx)
            after_skills_ended(ctx, completed=True)
        return True
    return False


async def _run_engine_skill(runner: TurnLoop, skill_id: str) -> None:
    """Run a project lifecycle skill this turn: its deterministic part, then the model when
    it still needs one (a prose override)."""
    ctx = runner.ctx
    if not overridden(ctx.project, skill_id):
        return
    await runner.settle()
    frame = ctx.stack.active()
    if not ctx.stop and frame is not None and frame["skill"] == skill_id:
        await runner.loop()


# --- after the turn -----------------------------------------------------------------------


async def after_turn(runner: TurnLoop) -> None:
    """Completion follow-up or resume offer, then the session end if it is due."""
    ctx = runner.ctx
    if ctx.result.error is None and not ctx.state.ended:
        engine_run = LIFECYCLE_SKILLS | set(before_end_skills(ctx))
        ended = [
            s
            for s in ctx.trace.steps
            if s["type"] == "SKILL_STEP"
            and s["event"] in ("completed", "cancelled")
            and s["skill"] not in engine_run
        ]
        if ended:
            completed = any(s["event"] == "completed" for s in ended)
            follow_up = after_skills_ended(ctx, completed=completed)
            if follow_up is not None and start_override(ctx, follow_up):
                await _run_engine_skill(runner, follow_up)
    if ctx.stack.data.get("ending") is not None:
        await continue_ending(runner)


def after_skills_ended(ctx: TurnContext, *, completed: bool) -> str | None:
    """Offer to resume a paused skill, or run ``default_completed`` when nothing is left.
    Returns the id of a project override to start (the caller runs it)."""
    if ctx.stack.active() is not None or ctx.stack.data.get("ending") is not None:
        return None
    paused = ctx.stack.paused()
    if paused:
        skill = ctx.project.skills[paused[0]["skill"]]
        ctx.stack.data["offer"] = {"skill": skill.id}
        skill_event(
            ctx.trace, event="activated", skill=RESUME_OFFER_SKILL, kind="engine", offers=skill.id
        )
        rendered = ctx.render(ASK_TO_CONTINUE)
        if rendered is not None:
            text = rendered.text.replace("{skill_name}", skill.name or skill.id)
            ctx.say(
                text, ResponseKind.LIFECYCLE, response=ASK_TO_CONTINUE, skill=RESUME_OFFER_SKILL
            )
        return None
    if ctx.stack.frames or not completed:
        return None
    if overridden(ctx.project, COMPLETED_SKILL):
        return COMPLETED_SKILL
    run_builtin(ctx, COMPLETED_SKILL, ASK_ANYTHING_ELSE)
    return None


# --- out of scope -------------------------------------------------------------------------


def cannot_help(ctx: TurnContext, args: dict[str, Any]) -> dict[str, Any]:
    """The ``cannot_help`` engine tool: hand the request to the unsupported-request handler.
    An override the stack cannot take (on it already, or full) is an error result, checked
    before the active skill is parked: a refused call changes nothing."""
    if overridden(ctx.project, UNSUPPORTED_SKILL):
        refusal = push_refusal(ctx, UNSUPPORTED_SKILL)
        if refusal is not None:
            return {"error": f"cannot hand the request to '{UNSUPPORTED_SKILL}': {refusal}"}
        active = ctx.stack.active()
        if active is not None:
            active["status"] = PARKED  # the handler returns to it, like an @skill invocation
            start_skill(ctx, UNSUPPORTED_SKILL, "invoked", invoked_by=active["skill"])
        else:
            start_skill(ctx, UNSUPPORTED_SKILL, "engine")
        return {"status": "handled", "skill": UNSUPPORTED_SKILL}
    run_builtin(ctx, UNSUPPORTED_SKILL, CANNOT_HELP_RESPONSE)
    ctx.stop = True
    return {"status": "declined"}


def cannot_help_offered(ctx: TurnContext) -> bool:
    """Offered unless the scope handler is the active skill."""
    frame = ctx.stack.active()
    if frame is not None and frame["skill"] == UNSUPPORTED_SKILL:
        return False
    # With a knowledge base, the model must look there before declining.
    return ctx.project.knowledge is None or ctx.searched


# --- session end --------------------------------------------------------------------------


def before_end_skills(ctx: TurnContext) -> list[str]:
    """``conversation.before_end`` of agent.yml (skill ids, in order)."""
    listed = ctx.project.agent.conversation.get("before_end")
    return [s for s in listed if isinstance(s, str)] if isinstance(listed, list) else []


async def continue_ending(runner: TurnLoop) -> None:
    """Run the next ``before_end`` skill when none is active; end the session after the last."""
    ctx = runner.ctx
    ending = ctx.stack.data["ending"]
    if ending is None:
        return
    while ctx.stack.active() is None and ending and not ctx.stop:
        skill_id = ending.pop(0)
        if not overridden(ctx.project, skill_id):
            skill_event(
                ctx.trace,
                event="skipped",
                skill=skill_id,
                reason="conversation.before_end names a skill the project does not define",
            )
            continue
        # Refused (on the stack already, or a full stack): skipped, the user asked to end.
        if start_override(ctx, skill_id):
            await _run_engine_skill(runner, skill_id)
    if ctx.stack.active() is None and not ending:
        ctx.stack.data["ending"] = None
        ctx.state.ended = True
        ctx.result.ended = True
        event_step(
            ctx.trace,
            event="session_ended",
            node=ctx.node_name(),
            tool=None,
            reason=SESSION_END_MESSAGE,
        )
