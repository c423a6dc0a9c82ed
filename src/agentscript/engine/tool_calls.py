"""The model's tool calls in an Agent Script turn (S5, S7, S8, S13).

:class:`ToolCalls` takes one LLM step's calls: each is checked (known, offered now, arguments
within the kernel's bounds, declared and of the declared type) and then run by its kind: a
transition, a variable write, escalation, end of session, a delegated subagent, an action
(held for confirmation when it requires one). Refusals are ``REFUSED_STEP``s and error
results; transitions are deferred to the end of the step (the first one wins); every call gets
its answer in the history through the kernel's :class:`~.kernel.ToolCallWindow`, even when a
call ends the turn.
"""

from __future__ import annotations

import time
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agentscript.engine.confirmation import hold_for_confirmation
from agentscript.engine.kernel import TURN_ENDING, ToolCallWindow, bounds_problem, ran_then_failed
from agentscript.engine.procedures import ProcedureFailure, TransitionSignal
from agentscript.engine.program import ProgramNode, ProgramTool, ToolKind
from agentscript.errors import TurnError
from agentscript.expr.evaluate import EvalError
from agentscript.expr.values import TypeMismatch, coerce_to_type
from agentscript.models.base import Message, ModelResponse, ToolCall
from agentscript.not_offered import NotOffered, not_offered_message
from agentscript.syntax.tree import Block
from agentscript.trace import elapsed_ms
from agentscript.trace_steps import (
    ResponseKind,
    Source,
    StopReason,
    action_step,
    event_step,
    refused_step,
    response_step,
)

if TYPE_CHECKING:
    from agentscript.engine.turn import TurnRunner

# What running one tool call gives: (the result the model sees, a deferred transition target,
# why the turn stops: "escalate" | "end_session" | "confirmation").
ToolOutcome = tuple[dict[str, Any], str | None, StopReason | None]


@dataclass
class StepOutcome:
    transition: tuple[str, str] | None = None  # (target, via)
    stop: StopReason | None = None


class ToolCalls:
    """Runs the tool calls of the LLM steps of one turn."""

    def __init__(self, turn: TurnRunner) -> None:
        # A proxy, not the runner itself: the runner holds this object, and a strong reference
        # back would make every turn a reference cycle. Cycles leave a finished turn's trace and
        # history to the cycle collector, whose pauses (30-50 ms for a full collection) were
        # most of serve's p99 (docs/performance.md, issue 11).
        self.turn: TurnRunner = weakref.proxy(turn)
        self.procedures = turn.procedures
        self._step_mark = 0  # history length before the current step's tool calls
        self._escalation_text = ""
        # The text of the answer whose calls run now, until a call that ends the turn says it.
        self._answer_text = ""
        # Whether an answer that delegated to the running delegate (at any depth) had asked for
        # a transition before its delegation: a call held in the delegate must give way to it.
        self._transition_before_delegation = False
        # The answer of the running call once its action ran, for when its callback fails.
        self._ran: dict[str, Any] | None = None

    async def dispatch(
        self, node: ProgramNode, response: ModelResponse, visible: dict[str, ProgramTool]
    ) -> StepOutcome:
        turn = self.turn
        calls = response.tool_calls
        most = turn.limits.max_tool_calls_per_step
        self._step_mark = len(turn.state.history)
        window = ToolCallWindow(turn.state.history)
        window.open(response.text or "", calls)
        outcome = StepOutcome()
        # A delegate's answers run their own dispatch inside one of these calls.
        outer_text, self._answer_text = self._answer_text, response.text or ""
        outer_ran = self._ran
        try:
            for index, call in enumerate(calls):
                if index >= most:
                    reason = f"more than {most} tool calls in one step"
                    refused = self.refusal(node, call, reason, "max_tool_calls_per_step")
                    window.answer(call, refused[0])
                    continue
                if outcome.stop is not None:
                    reason = f"not run: the turn already ended ({outcome.stop})"
                    window.answer(call, self.refusal(node, call, reason)[0])
                    continue
                self._ran = None
                try:
                    # The first call is judged by the resolution's gates: nothing has run since.
                    result, transition, stop = await self.invoke(
                        node,
                        call,
                        visible,
                        recheck_gate=index > 0,
                        transition_requested=outcome.transition is not None,
                    )
                except TURN_ENDING as exc:
                    window.answer(call, self.cut_short_answer(exc))
                    raise
                window.answer(call, result)
                if transition is not None and outcome.transition is None:
                    outcome.transition = (transition, f"tool {call.name}")  # S7: the first wins
                if stop is not None:
                    outcome.stop = stop
        finally:
            window.close()
            self._answer_text = outer_text
            self._ran = outer_ran
        # What the engine said during the step follows the tool results: providers reject any
        # message between an assistant's tool calls and their results.
        if outcome.stop is StopReason.CONFIRMATION and turn.result.confirmation is not None:
            turn.state.history.append(Message("assistant", turn.result.confirmation))
        if outcome.stop is StopReason.ESCALATE and self._escalation_text:
            turn.state.history.append(Message("assistant", self._escalation_text))
        return outcome

    def ran(self, answer: dict[str, Any]) -> None:
        """The running call's action ran and ``answer`` is what the model is told; only its
        follow-up (callback) is left. Should that fail, the model still learns it ran."""
        self._ran = answer

    def cut_short_answer(self, error: TurnError) -> dict[str, Any]:
        """The answer of the running call when ``error`` ends the turn during it (S12): what
        its action returned if it ran, else that it was not completed."""
        if self._ran is not None:
            return ran_then_failed(self._ran, error)
        return {"error": f"not completed: {error}"}

    def refusal(
        self, node: ProgramNode, call: ToolCall, reason: str, limit: str | None = None
    ) -> ToolOutcome:
        """Record that ``call`` was refused; the model is told ``reason``. ``limit`` names the
        ``Limits`` field when a bound refused it."""
        self.record_refusal(node, call, reason, limit=limit)
        return {"error": reason}, None, None

    def record_refusal(self, node: ProgramNode, call: ToolCall, reason: str, **fields: Any) -> None:
        """The REFUSED_STEP of the model's ``call`` in ``node`` (``fields``: limit, cause)."""
        refused_step(
            self.turn.trace,
            name=call.name,
            reason=reason,
            node=node.name,
            source=Source.LLM,
            arguments=call.arguments,
            **fields,
        )

    async def invoke(
        self,
        node: ProgramNode,
        call: ToolCall,
        visible: dict[str, ProgramTool],
        *,
        recheck_gate: bool = False,
        transition_requested: bool = False,
    ) -> ToolOutcome:
        """Run one tool call; returns (result for the model, transition target, stop).
        ``recheck_gate``: earlier calls of the step ran, so the tool's ``available when`` is
        judged again against the variables they left (S5). ``transition_requested``: an
        earlier call of the step asked for a transition, which must not be lost (S7)."""
        turn = self.turn
        tool = node.tools.get(call.name)
        closed = None
        if tool is not None and recheck_gate and call.name in visible:
            closed = self.gate_closed(tool, node, since="after the earlier calls of this step")
        if tool is None:
            reason = f"unknown tool '{call.name}'; available tools: {sorted(visible)}"
            return self.refuse_not_offered(node, call, reason, NotOffered.UNKNOWN), None, None
        if call.name not in visible or closed is not None:
            return self.refuse_hidden(node, call, closed), None, None
        arguments, problem, limit = self.check_arguments(tool, call)
        if problem is not None:
            return self.refusal(node, call, problem, limit)
        kind = tool.kind
        if kind in (ToolKind.TRANSITION, ToolKind.CANCEL):
            turn.actions_run.append(tool.name)
            target = tool.target_node
            if target is None or target not in turn.program.nodes:
                return {"error": f"tool '{tool.name}' has no valid target"}, None, None
            if kind is ToolKind.CANCEL:
                turn.state.resume_node = None
            callback_transition = await self.run_tool_callback(tool, node, {})
            return {"status": f"transferring to {target}"}, callback_transition or target, None
        if kind in (ToolKind.SET_VARIABLES, ToolKind.CAPTURE):
            return await self.set_variables(tool, node, arguments)
        if kind is ToolKind.ESCALATE:
            turn.actions_run.append(tool.name)
            event_step(turn.trace, event="escalate", node=node.name, tool=tool.name)
            turn.result.escalated = True
            self.say_answer_text(node)
            self.say_escalation_message(node)
            return {"status": "escalated to a human agent"}, None, StopReason.ESCALATE
        if kind is ToolKind.END_SESSION:
            turn.actions_run.append(tool.name)
            event_step(turn.trace, event="end_session", node=node.name, tool=tool.name)
            turn.result.ended = True
            turn.state.ended = True
            self.say_answer_text(node)
            return {"status": "session ended"}, None, StopReason.END_SESSION
        if kind is ToolKind.DELEGATE:
            return await self.delegate(tool, node, transition_requested)
        if kind in (ToolKind.ACTION, ToolKind.CONNECTED) and tool.action is not None:
            if tool.requires_confirmation:
                waiting = self.transition_waiting(transition_requested)
                if waiting is not None:
                    # Holding would end the turn in this node and drop the transition the model
                    # was already told about; the first transition wins (S7), so this call
                    # gives way, neither held nor run.
                    return self.refusal(
                        node,
                        call,
                        f"'{call.name}' was not run: it needs the user's confirmation and "
                        f"{waiting}",
                    )
                self.say_answer_text(node)  # S13: said before the question, as in the history
                return hold_for_confirmation(turn, tool, node, call, arguments)
            return await self.run_tool_action(tool, node, arguments)
        return {"error": f"tool '{tool.name}' cannot be run by this runtime ({kind})"}, None, None

    def transition_waiting(self, transition_requested: bool) -> str | None:
        """Why a call needing confirmation must give way to a transition (S7), or None when no
        transition waits: one requested earlier in this answer, or in an answer that delegated
        to the running subagent before calling it (the delegate comes back to it only if
        nothing in it holds a call)."""
        if transition_requested:
            return "a transition was requested earlier in the same answer"
        if self._transition_before_delegation:
            return "a transition was requested before this subagent was called"
        return None

    def refuse_hidden(
        self, node: ProgramNode, call: ToolCall, closed: str | None = None
    ) -> dict[str, Any]:
        """S5: ``call`` names a tool not offered now (``closed``: why its gate shut since
        it was offered)."""
        reason = not_offered_message(call.name)
        if closed is not None:
            reason = f"{reason}: {closed}"
        return self.refuse_not_offered(node, call, reason, NotOffered.HIDDEN)

    def refuse_not_offered(
        self, node: ProgramNode, call: ToolCall, reason: str, cause: NotOffered
    ) -> dict[str, Any]:
        """The model gets one text for a hidden and an unknown tool, so it cannot tell a hidden
        tool exists; the REFUSED_STEP keeps the true cause and ``reason`` for the developer."""
        self.record_refusal(node, call, reason, cause=cause)
        return {"error": not_offered_message(call.name)}

    def gate_closed(self, tool: ProgramTool, node: ProgramNode, *, since: str) -> str | None:
        """Why ``tool``'s ``available when`` no longer holds (``since``: when it held, for the
        message), or None when it holds. Fails closed like the resolution's gating: a guard
        that cannot be evaluated hides the tool."""
        if tool.guard is None:
            return None
        procedures = self.procedures
        try:
            if procedures.value(tool.guard, procedures.env(node)):
                return None
        except EvalError as exc:
            return (
                f"its available when (line {exc.span.line}) cannot be evaluated {since}: "
                f"{exc.message}"
            )
        return f"its available when became false {since}"

    def say_answer_text(self, node: ProgramNode) -> None:
        """S13: the model's text next to a call that ends the turn (escalation, end of session,
        a call held for confirmation) is its last word to the user, since no text answer
        follows. Said before any escalation message or confirmation question: the history has
        that order too (the text is in the calls' message, the engine's text follows their
        results)."""
        text, self._answer_text = self._answer_text, ""
        if text:
            self.turn.speech.say(text, streamed=True)
            response_step(self.turn.trace, text=text, node=node.name, kind=ResponseKind.LLM)

    def say_escalation_message(self, node: ProgramNode) -> None:
        """The channel's `escalation_message` (messaging first), so the user is told."""
        turn = self.turn
        messages = turn.program.outline.escalation_messages
        text = messages.get("messaging") or next(iter(messages.values()), None)
        procedures = self.procedures
        rendered = procedures.render(text, procedures.env(node)) if text is not None else ""
        if rendered:
            self._escalation_text = rendered
            turn.speech.say(rendered)
            response_step(turn.trace, text=rendered, node=node.name, kind=ResponseKind.ESCALATION)

    def check_arguments(
        self, tool: ProgramTool, call: ToolCall
    ) -> tuple[dict[str, Any], str | None, str | None]:
        """Only declared parameters, required ones present, values of the declared type,
        within the kernel's size and depth bounds; returns (arguments, problem, the
        ``Limits`` field when a bound is the problem)."""
        if call.arguments is None:
            return (
                {},
                f"the arguments of '{call.name}' are not a JSON object: {call.raw_arguments[:200]!r}",
                None,
            )
        args = call.arguments
        unknown = sorted(set(args) - set(tool.parameters))
        if unknown:
            allowed = sorted(tool.parameters) or "none"
            return {}, f"unknown argument(s) {unknown} for '{call.name}'; allowed: {allowed}", None
        bound = bounds_problem(call.name, args, self.turn.limits)
        if bound is not None:
            return {}, bound[0], bound[1]
        checked: dict[str, Any] = {}
        for name, param in tool.parameters.items():
            if name not in args or args[name] is None:
                if param.required:
                    return {}, f"missing required argument '{name}' for '{call.name}'", None
                continue
            try:
                checked[name] = coerce_to_type(args[name], param.type)
            except TypeMismatch as exc:
                return {}, f"argument '{name}' of '{call.name}': {exc.message}", None
        return checked, None, None

    async def set_variables(
        self, tool: ProgramTool, node: ProgramNode, arguments: dict[str, Any]
    ) -> ToolOutcome:
        """S8: only declared mutable variables, values already type-checked."""
        turn = self.turn
        procedures = self.procedures
        turn.actions_run.append(tool.name)
        step = action_step(
            turn.trace,
            name=tool.name,
            action="@utils.setVariables" if tool.kind is ToolKind.SET_VARIABLES else "collect",
            node=node.name,
            source=Source.LLM,
            inputs=dict(arguments),
            pre_vars=procedures.snapshot(),
        )
        started = time.perf_counter()
        for name in arguments:
            declared = procedures.declared.get(name)
            if declared is None or not declared.is_mutable:
                step["error"] = f"@variables.{name} is not a mutable variable"
                step["postVars"] = procedures.snapshot()
                step["durationMs"] = elapsed_ms(started)
                return {"error": step["error"]}, None, None
        env = procedures.env(node)
        computed: dict[str, Any] = {}
        for name, expr in tool.bound_inputs.items():
            declared = procedures.declared.get(name)
            if declared is None or not declared.is_mutable:
                continue
            # S12: a `with` expression is authored code like `set`, so one that cannot be
            # evaluated, or whose value `set` would refuse (S8: type, JSON, size), ends the turn
            # as it does on an action tool; nothing of this call is written.
            try:
                computed[name] = procedures.storable(name, procedures.value(expr, env))
            except EvalError as exc:
                problem = exc.message
            except ValueError as exc:  # storable's refusal
                problem = str(exc)
            else:
                continue
            step["error"] = f"with {name} of tool '{tool.name}': {problem}"
            step["postVars"] = procedures.snapshot()
            step["durationMs"] = elapsed_ms(started)
            raise ProcedureFailure(step["error"])
        turn.state.variables.update(arguments)
        turn.state.variables.update(computed)
        updated = sorted({*arguments, *computed})
        answer = {"status": "updated", "variables": updated}
        self.ran(answer)
        transition = await self.run_tool_callback(tool, node, {}, step)
        step["output"] = {"updated": updated}
        step["postVars"] = procedures.snapshot()
        step["durationMs"] = elapsed_ms(started)
        return answer, transition, None

    def tool_inputs(
        self, tool: ProgramTool, node: ProgramNode, arguments: dict[str, Any]
    ) -> dict[str, Any]:
        assert tool.action is not None
        procedures = self.procedures
        env = procedures.env(node)
        inputs = procedures.defaults(tool.action, env)
        for name, expr in tool.bound_inputs.items():
            try:
                inputs[name] = procedures.value(expr, env)
            except EvalError as exc:
                raise ProcedureFailure(
                    f"with {name} of tool '{tool.name}': {exc.message}"
                ) from None
        inputs.update(arguments)
        return inputs

    async def run_tool_action(
        self, tool: ProgramTool, node: ProgramNode, arguments: dict[str, Any]
    ) -> ToolOutcome:
        """S7 and S12: run the action, then its callback; a failure goes back to the model."""
        assert tool.action is not None
        inputs = self.tool_inputs(tool, node, arguments)
        outputs, step = await self.procedures.call_action(
            tool.action, inputs, node, source=Source.LLM, tool=tool.name
        )
        if outputs is None:
            return {"error": step["error"] or "the action failed"}, None, None
        hidden = {k for k, p in tool.action.outputs.items() if p.filter_from_agent}
        answer = {k: v for k, v in outputs.items() if k not in hidden}
        self.ran(answer)
        transition = None
        if tool.after_response is not None:  # a connected subagent's own follow-up
            transition = await self.run_tool_callback(
                tool, node, outputs, step, tool.after_response
            )
        # The binding's callback runs too (its transition deferred like every tool's); the
        # first transition requested wins (S7).
        own = await self.run_tool_callback(tool, node, outputs, step)
        return answer, transition or own, None

    async def run_tool_callback(
        self,
        tool: ProgramTool,
        node: ProgramNode,
        outputs: dict[str, Any],
        step: dict[str, Any] | None = None,
        block: Block | None = None,
    ) -> str | None:
        """Run the binding's body (or ``block``); a transition there is deferred to the end of
        the step."""
        body = block if block is not None else tool.callback
        if body is None:
            return None
        try:
            await self.procedures.exec_callback(body, node, outputs, step)
        except TransitionSignal as signal:
            return signal.target
        return None

    async def delegate(
        self, tool: ProgramTool, node: ProgramNode, transition_requested: bool = False
    ) -> ToolOutcome:
        """``@subagent.x`` as a tool: run x (and wherever it transitions), return its reply.
        ``transition_requested``: the caller's answer asked for a transition before this call,
        so no call in x may be held (S7)."""
        turn = self.turn
        target = tool.target_node
        if target is None or target not in turn.program.nodes:
            return {"error": f"tool '{tool.name}' has no valid target"}, None, None
        turn.actions_run.append(tool.name)
        event_step(
            turn.trace, event="delegate_start", node=node.name, tool=tool.name, target=target
        )
        outer_messages = turn.result.messages
        turn.result.messages = []
        # The delegate sees the history before the caller's pending tool calls and its own
        # exchange stays out of the caller's history: its reply comes back as the tool result.
        outer_history = turn.state.history
        # The delegate's own steps move the mark; a second delegation in this step needs it.
        outer_mark = self._step_mark
        turn.state.history = list(outer_history[:outer_mark])
        entered = len(turn.result.path)
        outer_resume = turn.state.resume_node
        came_back = True
        outer_waiting = self._transition_before_delegation
        self._transition_before_delegation = outer_waiting or transition_requested
        try:
            await turn.drive(target, f"delegated by {node.name}")
            reply = "\n".join(turn.result.messages)
            came_back = not (
                turn.result.escalated or turn.state.ended or turn.result.confirmation is not None
            )
        finally:
            said = turn.result.messages
            turn.result.messages = outer_messages
            turn.state.history = outer_history
            self._step_mark = outer_mark
            self._transition_before_delegation = outer_waiting
            if came_back:
                # Control comes back: the delegate's nodes are reported apart from the path.
                turn.result.delegated.extend(turn.result.path[entered:])
                del turn.result.path[entered:]
                turn.state.current_node = node.name
                # A collect in the delegate must not outlive it (S1): the next turn starts
                # where the caller leaves the conversation, not in the delegate.
                turn.state.resume_node = outer_resume
            # Otherwise the delegate ended the turn, so the conversation goes on where it
            # ended, as after a transition: its nodes stay on the path and current_node stays.
        event_step(
            turn.trace,
            event="delegate_end",
            node=node.name,
            tool=tool.name,
            target=target,
            reply=reply,
        )
        if came_back:
            # The binding's own body runs as every tool's does (S7): a transition there is
            # deferred like theirs, where it was dropped unread.
            self.ran({"reply": reply})
            return {"reply": reply}, await self.run_tool_callback(tool, node, {}), None
        # The delegate's last words (the model's text with the call, the escalation message,
        # the confirmation question) end the caller's turn too, so they must reach the user,
        # after what the caller said with its call of the delegate.
        self.say_answer_text(node)
        turn.result.messages.extend(said)
        if turn.result.escalated:
            return {"reply": reply}, None, StopReason.ESCALATE
        if turn.state.ended:
            return {"reply": reply}, None, StopReason.END_SESSION
        return {"reply": reply}, None, StopReason.CONFIRMATION
