"""Lifecycle skills the engine runs itself (Mantle "default skills").

- ``default_session_start`` runs at session start (the first turn, or a ``/session_start``
  message from a channel, which then never reaches the model). Built in, it says nothing. A
  ``/session_start`` once the session started, or while it ends, is ignored (``EVENT_STEP
  signal_ignored``). A session whose first message is ``/session_end`` never runs it.
- ``default_completed`` runs after a user skill completes and no skill on the stack is
  active or can resume: built in, it says ``utter_can_do_something_else``.
- The resume offer (``default_resume_offer``) runs after an interrupting skill ends while a
  paused skill that can resume waits (:func:`~.transitions.resumable`, the most recent one;
  one whose ``requires`` stopped holding or that was disabled is not offered and stays
  paused): it says ``utter_ask_wants_to_continue``; a plain yes on the next turn resumes the
  offered skill at the same step (its question is asked again), a plain no drops it from the
  stack and ``default_completed`` follows (the project's, as after any ending); any other
  answer goes to the model, which still sees the paused skill. A yes to a skill that cannot
  resume by then (:func:`resume_offered`) is refused and the model answers. Only its
  wording is the project's: a skill of that id is no override (``validate`` warns).
- ``default_unsupported_request_handler`` runs when the model calls the ``cannot_help``
  engine tool: built in, it says ``utter_cannot_help`` and ends the turn. A call of it when
  it was not offered (:func:`cannot_help_withheld`) is refused like any tool not offered.
- ``conversation.before_end`` skills run, in order, when a ``/session_end`` message arrives;
  the session ends once none of them is active any more. The skill being worked on then (and
  the parked callers waiting for it) is cancelled first (``SKILL_STEP cancelled``, reason
  ``/session_end``); paused skills stay paused. A ``/session_end`` while they run is
  ignored: the ending goes on where it is, a finished skill does not run again.

Each but the resume offer is overridable by a project skill of the same id (it then runs as an
engine-managed skill, also without a ``routing:`` key), and the wording of all of them by
redeclaring the response in the project's ``responses.yml``. A disabled skill is no
override; one whose ``requires`` does not hold does not start (M1, a ``REFUSED_STEP``) and
the built-in runs instead (a ``before_end`` skill, which has none, is skipped). Every run
is traced as ``SKILL_STEP`` events with ``kind: "engine"`` (``builtin: true`` when no
project skill overrides it).

An override is pushed on the stack like any skill, so it keeps the gates of a ``call:`` step
(M2: one frame per skill, ``Limits.max_stack_depth``; M1: its ``requires``). A refused start
pushes nothing: ``cannot_help`` answers the model with the reason (a ``REFUSED_STEP`` of the
call) and the turn goes on; the others are a ``REFUSED_STEP`` named after the skill, and what
was due goes on without it (the session still ends after ``before_end``).

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
from agentscript.mantle.run.stack import ACTIVE, PARKED
from agentscript.mantle.run.transitions import (
    activate,
    drop_paused,
    forget_pending,
    position,
    push_refusal,
    requires_refusal,
    resumable,
    start_refusal,
    start_skill,
)
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
    """Whether the project defines ``skill_id`` (a disabled skill is no override)."""
    skill = project.skills.get(skill_id)
    return skill is not None and not skill.disabled


def takes_over(ctx: TurnContext, skill_id: str) -> bool:
    """Whether the project's override of a built-in lifecycle skill runs now instead of the
    built-in: defined, not disabled, and its ``requires`` holds (M1). The framework enforces
    what the author wrote, so an override gated on memory does not run while the gate is
    closed; the built-in keeps the lifecycle working meanwhile (traced)."""
    if not overridden(ctx.project, skill_id):
        return False
    unmet = requires_refusal(ctx, ctx.project.skills[skill_id])
    if unmet is None:
        return True
    refuse_start(ctx, skill_id, f"{unmet}; the built-in runs instead")
    return False


def refuse_start(ctx: TurnContext, skill_id: str, reason: str) -> None:
    refuse(ctx, skill_id, f"cannot start '{skill_id}' now: {reason}")


def refuse(ctx: TurnContext, skill_id: str, reason: str) -> None:
    """A lifecycle transition of ``skill_id`` that does not happen: a ``REFUSED_STEP``."""
    refused_step(
        ctx.trace,
        name=skill_id,
        reason=reason,
        node=ctx.node_name(),
        source=Source.DETERMINISTIC,
        skill=skill_id,
    )


def ignore_signal(ctx: TurnContext, signal: str, reason: str) -> None:
    """A channel signal that changes nothing (a repeat): traced, never given to the model."""
    event_step(
        ctx.trace,
        event="signal_ignored",
        node=ctx.node_name(),
        tool=None,
        signal=signal,
        reason=reason,
    )


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
    """Push the project's lifecycle skill ``skill_id``; False, traced, when it cannot start
    now (the gates of a ``call:`` step: its ``requires``, the stack)."""
    refusal = start_refusal(ctx, skill_id)
    if refusal is not None:
        refuse_start(ctx, skill_id, refusal)
        return False
    start_skill(ctx, skill_id, "engine")
    return True


# --- session start ------------------------------------------------------------------------


def start_session(ctx: TurnContext) -> bool:
    """``default_session_start``: the project's skill, else the silent built-in. True when
    the project's skill was pushed (it runs with the turn)."""
    ctx.stack.data["started"] = True
    if takes_over(ctx, SESSION_START_SKILL):
        return start_override(ctx, SESSION_START_SKILL)
    run_builtin(ctx, SESSION_START_SKILL, None)
    return False


async def session_start_signal(runner: TurnLoop) -> None:
    """``/session_start``: starts the session once. The spec has the channel send it to let
    the agent speak first; once the session started (that signal or a first message) a
    repeat is ignored rather than pushing the start skill over the active one."""
    ctx = runner.ctx
    if ctx.stack.data["ending"] is not None:
        ignore_signal(ctx, SESSION_START_MESSAGE, "the session is ending")
    elif ctx.stack.data["started"]:
        ignore_signal(ctx, SESSION_START_MESSAGE, "the session has already started")
    elif start_session(ctx):
        await _run_engine_skill(runner, SESSION_START_SKILL)


async def session_end_signal(runner: TurnLoop) -> None:
    """``/session_end``: run the ``before_end`` skills, then end. A repeat while they run
    (a channel retrying, a user closing twice) neither restarts the list nor forces the
    end: the skill that is asking keeps waiting for its answer."""
    ctx = runner.ctx
    # A session that ends before it started (``/session_end`` as its first message) never
    # runs its start skill: not now, which would greet the user on the way out, and not on
    # the next message, which answers a ``before_end`` skill (left "not started", the session
    # started then, in the middle of the ending).
    ctx.stack.data["started"] = True
    if ctx.stack.data["ending"] is None:
        cancel_work_in_progress(ctx)
        ctx.stack.data["ending"] = before_end_skills(ctx.project)
    else:
        ignore_signal(ctx, SESSION_END_MESSAGE, "the session is already ending")
    await continue_ending(runner)


def cancel_work_in_progress(ctx: TurnContext) -> None:
    """The skill being worked on when ``/session_end`` arrives, and the parked callers that
    wait for it, are cancelled (a ``SKILL_STEP cancelled`` each, reason ``/session_end``): the
    channel says the conversation is over, so nothing resumes them, and the ``before_end``
    skills run and the session ends in this turn. Paused skills stay paused (the user had
    already left them; a ``before_end`` skill paused on the stack is still refused). A call
    waiting for confirmation goes with its skill."""
    frames = ctx.stack.frames
    while frames and frames[-1]["status"] in (ACTIVE, PARKED):
        frame = ctx.stack.pop()
        skill_event(
            ctx.trace,
            event="cancelled",
            skill=frame["skill"],
            reason=SESSION_END_MESSAGE,
            **position(frame),
        )
        forget_pending(ctx, frame)


SIGNALS = {
    SESSION_START_MESSAGE: session_start_signal,
    SESSION_END_MESSAGE: session_end_signal,
}


async def before_turn(runner: TurnLoop) -> bool:
    """Lifecycle work before the model is involved; True when the turn is fully handled."""
    ctx = runner.ctx
    signal = SIGNALS.get(ctx.text.strip())
    if signal is not None:
        ctx.state.history.pop()  # a channel signal, not something the user said
        await signal(runner)
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
            await resume_offered(runner, offer["skill"])
        else:
            drop_paused(ctx, offer["skill"])
            await follow_up(runner, completed=True)
        return True
    return False


async def resume_offered(runner: TurnLoop, skill_id: str) -> None:
    """The offer answered yes: the paused skill resumes at the same step, then the turn goes
    on. One that cannot resume now (:func:`resume_refusal`: its ``requires`` stopped holding,
    it was disabled) is refused like any other lifecycle start and stays paused: the user
    said yes to it, so only their no drops it. The model answers without it on offer."""
    ctx = runner.ctx
    refusal = activate(ctx, skill_id, None).get("error")
    if refusal is not None:
        refuse(ctx, skill_id, str(refusal))
    await runner.loop()


async def _run_engine_skill(runner: TurnLoop, skill_id: str) -> None:
    """Run a project lifecycle skill just pushed: its deterministic part, then the model when
    it still needs one (a prose override)."""
    ctx = runner.ctx
    await runner.settle()
    frame = ctx.stack.active()
    if not ctx.stop and frame is not None and frame["skill"] == skill_id:
        await runner.loop()


# --- after the turn -----------------------------------------------------------------------


async def after_turn(runner: TurnLoop) -> None:
    """Completion follow-up or resume offer, then the session end if it is due."""
    ctx = runner.ctx
    if ctx.result.error is None and not ctx.state.ended:
        engine_run = LIFECYCLE_SKILLS | set(before_end_skills(ctx.project))
        ended = [
            s
            for s in ctx.trace.steps
            if s["type"] == "SKILL_STEP"
            and s["event"] in ("completed", "cancelled")
            and s["skill"] not in engine_run
        ]
        if ended:
            await follow_up(runner, completed=any(s["event"] == "completed" for s in ended))
    if ctx.stack.data.get("ending") is not None:
        await continue_ending(runner)


async def follow_up(runner: TurnLoop, *, completed: bool) -> None:
    """What follows skills that ended (:func:`after_skills_ended`); a project override of
    ``default_completed`` runs this turn, whichever path ended them."""
    override = after_skills_ended(runner.ctx, completed=completed)
    if override is not None and start_override(runner.ctx, override):
        await _run_engine_skill(runner, override)


def after_skills_ended(ctx: TurnContext, *, completed: bool) -> str | None:
    """Offer to resume a paused skill, or run ``default_completed`` when none can resume.
    Returns the id of a project override to start (the caller runs it). Nothing while an
    offer made this turn waits (a "no" that dropped one skill offered the next already)."""
    data = ctx.stack.data
    if ctx.stack.active() is not None or data["ending"] is not None or data["offer"] is not None:
        return None
    # A paused skill that cannot resume now is not offered (a yes would be refused); it
    # stays paused until its gate holds again, and the ending is followed up as if it were
    # not there.
    candidates = resumable(ctx)
    if candidates:
        skill = ctx.project.skills[candidates[0]["skill"]]
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
    if not completed:
        return None
    if takes_over(ctx, COMPLETED_SKILL):
        return COMPLETED_SKILL
    run_builtin(ctx, COMPLETED_SKILL, ASK_ANYTHING_ELSE)
    return None


# --- out of scope -------------------------------------------------------------------------


def cannot_help(ctx: TurnContext, args: dict[str, Any]) -> dict[str, Any]:
    """The ``cannot_help`` engine tool: hand the request to the unsupported-request handler.
    The dispatcher has checked that it was offered (:func:`cannot_help_withheld`). An
    override the stack cannot take (paused on it, or a full stack) is an error result,
    checked before the active skill is parked: a refused call changes nothing."""
    if takes_over(ctx, UNSUPPORTED_SKILL):
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


def cannot_help_withheld(ctx: TurnContext) -> str | None:
    """Why ``cannot_help`` is not offered now (None: it is). The prompt leaves it out and
    the dispatcher refuses a call of it for the same reason: the model never reaches a tool
    it was not offered."""
    frame = ctx.stack.active()
    if frame is not None and frame["skill"] == UNSUPPORTED_SKILL:
        return (
            f"tool '{CANNOT_HELP}' is not offered while '{UNSUPPORTED_SKILL}' is the active skill"
        )
    if ctx.project.knowledge is not None and not ctx.searched:
        # With a knowledge base, the model must look there before declining.
        return f"tool '{CANNOT_HELP}' is withheld until search_knowledge has run this turn"
    return None


# --- session end --------------------------------------------------------------------------


def _not_a_skill(ctx: TurnContext, skill_id: str) -> str:
    if skill_id in ctx.project.skills:
        return "conversation.before_end names a disabled skill"
    return "conversation.before_end names a skill the project does not define"


def before_end_skills(project: Project) -> list[str]:
    """``conversation.before_end`` of agent.yml (its strings, in order; they may name skills
    the project does not define, which the ending skips)."""
    listed = project.agent.conversation.get("before_end")
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
                ctx.trace, event="skipped", skill=skill_id, reason=_not_a_skill(ctx, skill_id)
            )
            continue
        # Refused (its requires, on the stack already, a full stack): skipped, the user asked
        # to end; there is no built-in to run instead.
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
