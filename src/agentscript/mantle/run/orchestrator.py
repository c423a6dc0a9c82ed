"""One turn of a Mantle session: rules M1-M8 on the engine's Session/Reply/trace.

Per iteration the turn loop first settles everything that needs no model (block steps that
are deterministic, ``utter: when:`` triggers, skill completion by condition), then builds
the prompt from live state (:mod:`.resolution`), calls the model and dispatches its tool
calls through the gates (:mod:`.call_dispatch`). The loop ends on text, on a pause for a
confirmation, or on a limit. The pieces share one :class:`~.turn_context.TurnContext`.
"""

from __future__ import annotations

from typing import Any

from agentscript.engine.kernel import (
    LimitReached,
    TurnResult,
    fail_turn,
    read_yes_no,
    spend_llm_call,
)
from agentscript.engine.llm import call_model
from agentscript.limits import Limits
from agentscript.mantle.model import Skill
from agentscript.mantle.queries import holds
from agentscript.mantle.run import buttons, hooks, lifecycle
from agentscript.mantle.run import prompt as p
from agentscript.mantle.run.blocks import block_step
from agentscript.mantle.run.call_dispatch import dispatch
from agentscript.mantle.run.confirmation import (
    answerable,
    asked_in_own_words,
    live_pending,
    resolve,
)
from agentscript.mantle.run.resolution import resolve_prompt
from agentscript.mantle.run.stack import SkillStack
from agentscript.mantle.run.transitions import finish
from agentscript.mantle.run.turn_context import TurnContext
from agentscript.models.base import Message, ModelRequest, ModelResponse, ToolSpec
from agentscript.trace_steps import ResponseKind, Source, response_step, skill_event

__all__ = ["MAX_DETERMINISTIC_STEPS", "MantleTurnRunner"]

# Kept for existing importers; the bound is Limits.max_deterministic_steps.
MAX_DETERMINISTIC_STEPS = Limits().max_deterministic_steps


class StepLimitReached(LimitReached):
    """Block steps kept running without the model: a cycle the turn cannot leave."""


class MantleTurnRunner:
    """Runs one turn; the engine's :class:`Session` calls :meth:`run`."""

    def __init__(self, ctx: TurnContext) -> None:
        self.ctx = ctx
        # The session reads these after the turn (the same lists the turn fills).
        self.actions_run: list[str] = ctx.actions_run
        self.displayable: list[dict[str, Any]] = ctx.displayable

    async def run(self) -> TurnResult:
        ctx = self.ctx
        try:
            ctx.state.history.append(Message("user", ctx.text))
            offered = ctx.stack.take_offered()
            if not await lifecycle.before_turn(self):
                await buttons.apply_payload(ctx, offered)
                # A plain yes/no answers the held call only while its skill is the active
                # one (live_pending drops it otherwise) and only in a later turn (M5).
                pending = live_pending(ctx)
                if pending is not None and not ctx.stop and answerable(ctx, pending):
                    answer = read_yes_no(ctx.text)
                    if answer is not None:
                        since = hooks.mark(ctx)
                        await resolve(ctx, answer, via=Source.USER)
                        await hooks.after_writes(ctx, since, engine_made=True)
                if not ctx.stop:
                    await self.loop()
            await lifecycle.after_turn(self)
            await buttons.fill_source_buttons(ctx)
        except StepLimitReached as exc:
            self.fail(exc)
            self.unwind(str(exc))
        except Exception as exc:
            # TURN_ENDING's failures, and anything else (a bug, a raising step observer) as an
            # internal error, as in an Agent Script turn: never a traceback out of send() with
            # half a turn in the state. CancelledError is no Exception: it stays cancelled.
            self.fail(exc)
        # A tap applies only when its payload was offered with this turn's responses.
        ctx.stack.offer(
            [b["payload"] for b in ctx.result.buttons if isinstance(b.get("payload"), str)]
        )
        # The active skill, as the turn's trace names it, or None: a paused top frame (a
        # resume offer waiting for a yes) is not working on the conversation; the session's
        # skill stack still shows it.
        active = ctx.stack.active()
        ctx.state.current_node = active["skill"] if active is not None else None
        return ctx.result

    def spend_call(self) -> None:
        """Count one more LLM call of the turn (LimitReached past ``max_llm_calls``)."""
        self.ctx.llm_calls = spend_llm_call(self.ctx.llm_calls, self.ctx.limits)

    async def loop(self) -> None:
        ctx = self.ctx
        while True:
            await self.settle()
            if ctx.stop:
                return
            self.spend_call()
            ctx.unsaid = None  # the model speaks again: its earlier text stays unsaid (S13)
            instructions, tools = resolve_prompt(ctx)
            response = await self.ask_model(instructions, tools)
            if response.tool_calls:
                await dispatch(ctx, response)
                if ctx.stop:
                    return
                continue
            text = response.text or ""
            ctx.state.history.append(Message("assistant", text))
            ctx.speech.say(text, streamed=True)
            response_step(ctx.trace, text=text, node=ctx.node_name(), kind=ResponseKind.LLM)
            asked_in_own_words(ctx, text)
            return

    def unwind(self, reason: str) -> None:
        """Cancel every skill on the stack: the cycle that hit the step limit would hit it
        again on every later turn, so the session starts over from routing instead (memory
        is kept). Each cancellation is a trace step."""
        ctx = self.ctx
        while ctx.stack.frames:
            frame = ctx.stack.pop()
            skill_event(ctx.trace, event="cancelled", skill=frame["skill"], reason=reason)
        ctx.stack.pending = None
        ctx.stack.data["offer"] = None  # a resume offer names a skill no longer on the stack

    def fail(self, error: Exception) -> None:
        ctx = self.ctx
        ctx.close_calls()  # a window left open by the failure is answered first
        fail_turn(
            history=ctx.state.history,
            trace=ctx.trace,
            result=ctx.result,
            say=ctx.speech.say_failure,
            error=error,
            text="Sorry, something went wrong.",
            node=ctx.node_name(),
        )

    async def settle(self) -> None:
        """Run everything that needs no model until the model (or the user) is needed (M3)."""
        ctx = self.ctx
        while True:
            ctx.steps_run += 1
            most = ctx.limits.max_deterministic_steps
            if ctx.steps_run > most:
                raise StepLimitReached(
                    "max_deterministic_steps",
                    most,
                    f"more than {most} deterministic steps in one turn: the skills on the "
                    "stack loop without the model or the user (a call:/link: or next: cycle) "
                    "and were cancelled",
                )
            # A step or lifecycle transition may have paused or parked the skill holding a
            # confirmation; its held step asks again when reached again.
            live_pending(ctx)
            frame = ctx.stack.active()
            if frame is None:
                return
            skill = ctx.project.skills[frame["skill"]]
            self.fire_when_utters(skill)
            entry = SkillStack.block(frame)
            if entry is not None:
                progressed = await block_step(ctx, frame, skill, entry)
                if ctx.stop or not progressed:
                    return
                continue
            done = skill.complete_when
            if (
                done is not None
                and done.condition is not None
                and not done.criteria
                and holds(done.condition, ctx.memory)
            ):
                finish(ctx, frame, "completed", reason="complete_when holds")
                continue
            return

    def fire_when_utters(self, skill: Skill) -> None:
        """``utter: when:`` triggers: once per activation, the first time they hold."""
        ctx = self.ctx
        for trigger in skill.utter:
            key = f"{skill.id}:{trigger.response}"
            if trigger.when is None or ctx.stack.fired(key):
                continue
            if holds(trigger.when, ctx.memory):
                ctx.stack.mark_fired(key)
                ctx.utter(trigger.response, ResponseKind.UTTER)

    async def ask_model(self, instructions: str, tools: list[ToolSpec]) -> ModelResponse:
        ctx = self.ctx
        request = ModelRequest(
            system=p.system_prompt(ctx.project, ctx.memory),
            instructions=instructions,
            messages=list(ctx.state.history),
            tools=tools,
            node=ctx.node_name(),
        )
        return await call_model(
            ctx.model,
            request,
            ctx.trace,
            iteration=ctx.llm_calls,
            stream=ctx.speech.model_sink(),
            max_reply_chars=ctx.limits.max_reply_chars,
            spend_call=self.spend_call,
        )
