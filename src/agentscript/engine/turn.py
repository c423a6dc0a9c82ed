"""One turn of an Agent Script session: rules S1-S13 of the design.

``TurnRunner.run`` takes the user's utterance and drives nodes until one produces the reply:
router first (S1), ``before_reasoning`` once per node entry (S2), instructions resolved before
every LLM call (S3), one-way transitions (S4), gated tools (S5), the loop ending on text and
``after_reasoning`` (S6), limits (S11) and failures (S12). The model's tool calls are
:mod:`.tool_calls`' (S5, S7, S8, S13), held calls :mod:`.confirmation`'s (S13); what both
formats share (failure, budget, argument bounds, the history invariant) is :mod:`.kernel`'s.
The deterministic statements run in the :class:`ProcedureExecutor` the runner holds.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from agentscript.actions.registry import ActionRunner
from agentscript.engine.confirmation import resolve_confirmation
from agentscript.engine.kernel import (
    NO,
    TURN_ENDING,
    YES,
    LimitReached,
    TurnResult,
    fail_turn,
    spend_llm_call,
)
from agentscript.engine.llm import call_model
from agentscript.engine.procedures import ProcedureExecutor, TransitionSignal
from agentscript.engine.program import Program, ProgramNode, ProgramTool, ToolKind
from agentscript.engine.speech import Speech
from agentscript.engine.state import PendingConfirmation, SessionState
from agentscript.engine.tool_calls import ToolCalls
from agentscript.limits import Limits
from agentscript.models.base import Message, Model, ModelRequest, ModelResponse
from agentscript.syntax.tree import Block
from agentscript.trace import TurnTrace, elapsed_ms
from agentscript.trace_steps import (
    ResponseKind,
    hook_step,
    node_enter,
    resolution_step,
    response_step,
    transition_step,
)

# Kept importable from here for existing callers; their home is the kernel and limits.py.
__all__ = ["NO", "TURN_ENDING", "YES", "LimitReached", "Limits", "TurnResult", "TurnRunner"]


class TurnRunner:
    """Runs one turn of an Agent Script session; made anew for every turn."""

    def __init__(
        self,
        *,
        program: Program,
        state: SessionState,
        runner: ActionRunner,
        trace: TurnTrace,
        user_input: str,
        model: Model,
        limits: Limits,
        stream: Callable[[str], None] | None = None,
    ) -> None:
        self.procedures = ProcedureExecutor(program, state, runner, trace, user_input, limits)
        self.program = program
        self.state = state
        self.trace = trace
        self.user_input = user_input
        self.model = model
        self.limits = limits
        self.stream = stream
        self.result = TurnResult()
        self.speech = Speech(self.result, stream)  # every message of the reply goes through it
        # The session reads these after the turn (the same lists the procedures fill).
        self.actions_run: list[str] = self.procedures.actions_run
        self.displayable: list[dict[str, Any]] = self.procedures.displayable
        self.tool_calls = ToolCalls(self)
        self.llm_calls = 0
        self.transitions = 0

    async def run(self) -> TurnResult:
        """Run the turn (once: its counters and result start fresh only in ``__init__``)."""
        state = self.state
        try:
            if state.pending_confirmation is not None:
                await self.answer_confirmation(state.pending_confirmation)
            else:
                state.history.append(Message("user", self.user_input))
                await self.drive(*self.start_node())
        except Exception as exc:
            # TURN_ENDING's failures, and anything else (a bug, a raising step observer) as an
            # internal error: a failed turn, never a traceback out of send() with half a turn
            # in the state. CancelledError is no Exception: a cancelled turn stays cancelled.
            self.fail(exc)
        return self.result

    def start_node(self) -> tuple[str, str]:
        """S1: where a turn that answers no held call starts, and why."""
        state = self.state
        program = self.program
        resume = state.resume_node
        if resume is not None and not (
            resume in program.nodes and self.collecting(program.nodes[resume])
        ):
            # Filled since it was set (after_reasoning, a capture call in an answer that ended
            # the turn, the host's restore): nothing is left to collect, so the router decides.
            state.resume_node = resume = None
        if resume is not None:
            return resume, "collect in progress"
        if program.outline.reset_to_initial_node or not state.current_node:
            return program.start, "turn start (router)"
        return state.current_node, "turn start (previous subagent)"

    async def answer_confirmation(self, pending: PendingConfirmation) -> None:
        """S13: the held call's node goes on where it asked (already entered by
        :func:`resolve_confirmation`), or the turn goes where its confirmed call transitioned."""
        node_name, reason = await resolve_confirmation(self, pending)
        await self.drive(node_name, reason)

    def fail(self, error: Exception) -> None:
        procedures = self.procedures
        error_text = procedures.render(
            self.program.outline.messages.error, procedures.env(self.any_node())
        )
        fail_turn(
            history=self.state.history,
            trace=self.trace,
            result=self.result,
            say=self.speech.say_failure,
            error=error,
            text=error_text or "Sorry, something went wrong.",
            node=self.state.current_node,
        )

    def any_node(self) -> ProgramNode:
        name = self.state.current_node or self.program.start
        return self.program.nodes.get(name) or next(iter(self.program.nodes.values()))

    # ------------------------------------------------------------------ nodes

    async def drive(self, node_name: str, reason: str | None) -> None:
        """Run ``node_name`` and follow transitions until a node ends the turn. ``reason`` is
        the NODE_ENTER's; None when the node was already entered (:meth:`enter`) in this turn
        and goes on in the same entry."""
        current = node_name
        while True:
            try:
                await self.run_node(current, reason)
                return
            except TransitionSignal as signal:
                reason = f"transition from {current}"
                current = self.follow(current, signal)

    def follow(self, source: str, signal: TransitionSignal) -> str:
        self.transitions += 1
        if self.state.resume_node == source and signal.target != source:
            # Leaving the collecting subagent gives the next turn back to the router (S1) and
            # its checks; coming back to it in this turn collects (and resumes) again.
            self.state.resume_node = None
        transition_step(self.trace, source=source, target=signal.target, via=signal.via)
        if self.transitions > self.limits.max_transitions:
            raise LimitReached(
                "max_transitions",
                self.limits.max_transitions,
                f"more than {self.limits.max_transitions} transitions in one turn "
                f"(last: {source} -> {signal.target})",
            )
        return signal.target

    def enter(self, name: str, reason: str) -> None:
        """``name`` has control now: it is the current node, on the path, with a NODE_ENTER."""
        self.state.current_node = name
        self.result.path.append(name)
        node_enter(self.trace, node=name, reason=reason)

    async def run_node(self, name: str, reason: str | None) -> None:
        """S2: a new entry (``reason`` given) runs ``before_reasoning``, then the loop."""
        node = self.program.nodes[name]
        if reason is not None:
            self.enter(name, reason)
            if node.info.before_reasoning is not None:
                await self.run_hook(node, "before_reasoning")
        iteration = 0
        while True:
            iteration += 1
            self.spend_call()
            instructions, visible = await self.resolve(node, iteration)
            response = await self.ask_model(node, iteration, instructions, visible)
            if response.tool_calls:
                outcome = await self.tool_calls.dispatch(node, response, visible)
                if outcome.stop is not None:
                    return
                if outcome.transition is not None:
                    raise TransitionSignal(*outcome.transition)
                continue
            text = response.text or ""
            self.state.history.append(Message("assistant", text))
            self.speech.say(text, streamed=True)
            response_step(self.trace, text=text, node=name, kind=ResponseKind.LLM)
            if node.info.after_reasoning is not None:
                await self.run_hook(node, "after_reasoning")
            return

    async def run_hook(self, node: ProgramNode, hook: str) -> None:
        block = (
            node.info.before_reasoning if hook == "before_reasoning" else node.info.after_reasoning
        )
        procedures = self.procedures
        step = hook_step(self.trace, node=node.name, hook=hook, pre_vars=procedures.snapshot())
        started = time.perf_counter()
        try:
            await procedures.exec_block(block, node)
        except TransitionSignal as signal:
            step["transition"] = signal.target
            raise
        finally:
            step["postVars"] = procedures.snapshot()
            step["durationMs"] = elapsed_ms(started)

    # ------------------------------------------------------------------ resolution (S3, S5)

    async def resolve(
        self, node: ProgramNode, iteration: int
    ) -> tuple[str, dict[str, ProgramTool]]:
        procedures = self.procedures
        pre = procedures.snapshot()
        procedures.begin_resolution()
        prompt: list[str] = []
        started = time.perf_counter()
        instructions = node.info.instructions
        try:
            if isinstance(instructions, Block):
                await procedures.exec_block(instructions, node, prompt=prompt)
            elif instructions is not None:
                prompt.append(procedures.render(instructions, procedures.env(node)))
                procedures.note_line(prompt[-1], instructions.span.line)
        except TransitionSignal as signal:
            self.record_resolution(
                node, iteration, pre, started, transition=signal.target, discarded=prompt
            )
            raise
        text = "\n".join(prompt)
        visible, hidden = self.gate_tools(node)
        self.track_collect(node)
        self.record_resolution(
            node, iteration, pre, started, text=text, tools=list(visible), hidden=hidden
        )
        return text, visible

    def record_resolution(
        self,
        node: ProgramNode,
        iteration: int,
        pre: dict[str, Any],
        started: float,
        *,
        text: str = "",
        tools: list[str] | None = None,
        hidden: list[str] | None = None,
        transition: str | None = None,
        discarded: list[str] | None = None,
    ) -> None:
        # Added when done, so it follows the steps the resolution ran (its actions, say).
        resolution_step(
            self.trace,
            node=node.name,
            iteration=iteration,
            instructions=text,
            tools=tools or [],
            hidden_tools=hidden or [],
            pre_vars=pre,
            post_vars=self.procedures.snapshot(),
            duration_ms=elapsed_ms(started),
            warnings=self.procedures.warnings,
            transition=transition,
            discarded="\n".join(discarded) if discarded is not None else None,
            instruction_lines=self.procedures.instruction_lines,
        )

    def gate_tools(self, node: ProgramNode) -> tuple[dict[str, ProgramTool], list[str]]:
        """S5: a tool whose ``available when`` is false or fails to evaluate is hidden."""
        visible: dict[str, ProgramTool] = {}
        hidden: list[str] = []
        procedures = self.procedures
        env = procedures.env(node)
        for tool in node.tools.values():
            if tool.kind is ToolKind.CAPTURE:  # offered while a collected field is still missing
                shown = self.collecting(node)
            else:
                shown = tool.kind is not ToolKind.UNRESOLVED and (
                    tool.guard is None or procedures.condition(tool.guard, env)
                )
            if shown:
                visible[tool.name] = tool
            else:
                hidden.append(tool.name)
        return visible, hidden

    def collecting(self, node: ProgramNode) -> bool:
        """Whether some variable the node's ``collect`` statements ask for is still unset."""
        return any(self.state.variables.get(s.variable) is None for s in node.collect_slots)

    def track_collect(self, node: ProgramNode) -> None:
        """Start the next turn in ``node`` while it still collects; stop once all is known."""
        if not node.collect_slots:
            return
        if self.collecting(node):
            self.state.resume_node = node.name
        elif self.state.resume_node == node.name:
            self.state.resume_node = None

    # ------------------------------------------------------------------ the model

    def system_prompt(self, node: ProgramNode) -> str:
        """S9: the subagent's system instructions replace the global ones."""
        text = node.info.system_instructions
        if text is None:
            text = self.program.outline.system_instructions
        return self.procedures.render(text, self.procedures.env(node))

    def spend_call(self) -> None:
        """Count one more LLM call of the turn (LimitReached past ``max_llm_calls``)."""
        self.llm_calls = spend_llm_call(self.llm_calls, self.limits)

    async def ask_model(
        self, node: ProgramNode, iteration: int, instructions: str, visible: dict[str, ProgramTool]
    ) -> ModelResponse:
        request = ModelRequest(
            system=self.system_prompt(node),
            instructions=instructions,
            messages=list(self.state.history),
            tools=[tool.spec for tool in visible.values()],
            params=dict(node.params),
            model=node.model,
            node=node.name,
        )
        return await call_model(
            self.model,
            request,
            self.trace,
            iteration=iteration,
            stream=self.speech.model_sink(),
            max_reply_chars=self.limits.max_reply_chars,
            spend_call=self.spend_call,
        )
