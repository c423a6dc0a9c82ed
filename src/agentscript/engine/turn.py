"""One turn of an Agent Script session: rules S1-S13 of the design.

``TurnRunner.run`` takes the user's utterance and drives nodes until one produces the reply:
router first (S1), ``before_reasoning`` once per node entry (S2), instructions resolved before
every LLM call (S3), one-way transitions (S4), gated tools (S5), the loop ending on text and
``after_reasoning`` (S6), tool calls with deferred transitions (S7), checked variable writes
(S8), limits (S11), failures (S12), escalation, end of session and confirmation (S13).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from agentscript.engine.llm import TurnError, call_model
from agentscript.engine.procedures import ProcedureExecutor, ProcedureFailure, TransitionSignal
from agentscript.engine.program import Node, Tool
from agentscript.engine.state import PendingConfirmation
from agentscript.expr.evaluate import EvalError
from agentscript.expr.values import TypeMismatch, coerce_to_type, nested_deeper_than
from agentscript.models.base import (
    Message,
    Model,
    ModelRequest,
    ModelResponse,
    ToolCall,
)
from agentscript.syntax.tree import Block
from agentscript.trace import elapsed_ms

YES = frozenset(
    {
        "yes",
        "y",
        "yeah",
        "yep",
        "sure",
        "ok",
        "okay",
        "confirm",
        "confirmed",
        "go ahead",
        "please do",
        "do it",
    }
)
NO = frozenset({"no", "n", "nope", "cancel", "stop", "don't", "do not", "decline", "never mind"})


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-turn bounds (S11) and hostile-input bounds on tool arguments."""

    max_llm_calls: int = 16
    max_transitions: int = 10
    max_tool_calls_per_step: int = 8
    max_argument_chars: int = 20_000
    max_argument_depth: int = 16
    action_timeout: float = 30.0  # seconds, for every action without its own entry below
    action_timeouts: Mapping[str, float] = field(default_factory=dict)  # by action name


# What running one tool call gives: (the result the model sees, a deferred transition target,
# why the turn stops: "escalate" | "end_session" | "confirmation").
ToolOutcome = tuple[dict[str, Any], str | None, str | None]


class LimitReached(Exception):
    pass


# The failures that end a turn; the runner answers them with the agent's error message.
TURN_ENDING = (TurnError, ProcedureFailure, LimitReached)


@dataclass
class StepOutcome:
    transition: tuple[str, str] | None = None  # (target, via)
    stop: str | None = None  # "escalate" | "end_session" | "confirmation"


@dataclass
class TurnResult:
    messages: list[str] = field(default_factory=list)
    path: list[str] = field(default_factory=list)
    escalated: bool = False
    ended: bool = False
    error: str | None = None
    exhausted: bool = False  # the scripted model had no move left
    confirmation: str | None = None
    buttons: list[dict[str, Any]] = field(default_factory=list)  # Mantle response buttons


class TurnRunner(ProcedureExecutor):
    """Runs one turn of an Agent Script session; made anew for every turn."""

    def __init__(
        self,
        *args: Any,
        model: Model,
        limits: Limits,
        stream: Callable[[str], None] | None = None,
    ) -> None:
        super().__init__(*args)
        self.model = model
        self.limits = limits
        self.stream = stream
        self.result = TurnResult()
        self.llm_calls = 0
        self.transitions = 0
        self._step_mark = 0
        self._escalation_text = ""

    async def run(self) -> TurnResult:
        """Run the turn (once: its counters and result start fresh only in ``__init__``)."""
        state = self.state
        program = self.program
        try:
            if state.pending_confirmation is not None:
                node_name, transitioned = await self.resolve_confirmation(
                    state.pending_confirmation
                )
                reason = (
                    "transition after confirmation" if transitioned else "confirmation resolved"
                )
                await self.drive(node_name, reason, skip_before=not transitioned)
            else:
                state.history.append(Message("user", self.system_variables["user_input"]))
                if state.resume_node and state.resume_node in program.nodes:
                    start, reason = state.resume_node, "collect in progress"
                elif program.outline.reset_to_initial_node or not state.current_node:
                    start, reason = program.start, "turn start (router)"
                else:
                    start, reason = state.current_node, "turn start (previous subagent)"
                await self.drive(start, reason)
        except TURN_ENDING as exc:
            self.result.exhausted = getattr(exc, "exhausted", False)
            self.fail(str(exc))
        return self.result

    def fail(self, message: str) -> None:
        self.trace.add("ERROR_STEP", message=message, node=self.state.current_node)
        self.result.error = message
        error_text = self.render(self.program.outline.messages.error, self.env(self.any_node()))
        text = error_text or "Sorry, something went wrong."
        self.result.messages.append(text)
        # The model sees next turn that this one failed, and the history alternates properly.
        self.state.history.append(Message("assistant", text))
        self.trace.add("RESPONSE_STEP", text=text, node=self.state.current_node, kind="error")

    def any_node(self) -> Node:
        name = self.state.current_node or self.program.start
        return self.program.nodes.get(name) or next(iter(self.program.nodes.values()))

    # ------------------------------------------------------------------ nodes

    async def drive(self, node_name: str, reason: str, *, skip_before: bool = False) -> None:
        """Run ``node_name`` and follow transitions until a node ends the turn."""
        current = node_name
        while True:
            try:
                await self.run_node(current, reason, skip_before)
                return
            except TransitionSignal as signal:
                reason = f"transition from {current}"
                current = self.follow(current, signal)
                skip_before = False

    def follow(self, source: str, signal: TransitionSignal) -> str:
        self.transitions += 1
        self.trace.add(
            "TRANSITION_STEP", **{"from": source, "to": signal.target, "via": signal.via}
        )
        if self.transitions > self.limits.max_transitions:
            raise LimitReached(
                f"more than {self.limits.max_transitions} transitions in one turn "
                f"(last: {source} -> {signal.target}); the turn was stopped"
            )
        return signal.target

    async def run_node(self, name: str, reason: str, skip_before: bool) -> None:
        node = self.program.nodes[name]
        self.state.current_node = name
        self.result.path.append(name)
        self.trace.add("NODE_ENTER", node=name, reason=reason)
        if not skip_before and node.info.before_reasoning is not None:
            await self.run_hook(node, "before_reasoning")
        iteration = 0
        while True:
            iteration += 1
            self.llm_calls += 1
            if self.llm_calls > self.limits.max_llm_calls:
                raise LimitReached(
                    f"more than {self.limits.max_llm_calls} LLM calls in one turn; the turn was stopped"
                )
            instructions, visible = await self.resolve(node, iteration)
            response = await self.ask_model(node, iteration, instructions, visible)
            if response.tool_calls:
                outcome = await self.dispatch(node, response, visible)
                if outcome.stop is not None:
                    return
                if outcome.transition is not None:
                    raise TransitionSignal(*outcome.transition)
                continue
            text = response.text or ""
            self.state.history.append(Message("assistant", text))
            self.result.messages.append(text)
            self.trace.add("RESPONSE_STEP", text=text, node=name)
            if node.info.after_reasoning is not None:
                await self.run_hook(node, "after_reasoning")
            return

    async def run_hook(self, node: Node, hook: str) -> None:
        block = (
            node.info.before_reasoning if hook == "before_reasoning" else node.info.after_reasoning
        )
        step = self.trace.add(
            "HOOK_STEP", node=node.name, hook=hook, preVars=self.snapshot(), postVars=None
        )
        started = time.perf_counter()
        try:
            await self.exec_block(block, node)
        except TransitionSignal as signal:
            step["transition"] = signal.target
            raise
        finally:
            step["postVars"] = self.snapshot()
            step["durationMs"] = elapsed_ms(started)

    # ------------------------------------------------------------------ resolution (S3, S5)

    async def resolve(self, node: Node, iteration: int) -> tuple[str, dict[str, Tool]]:
        pre = self.snapshot()
        self._asked_collect = False
        self.warnings = []
        prompt: list[str] = []
        started = time.perf_counter()
        step: dict[str, Any] = {
            "node": node.name,
            "iteration": iteration,
            "instructions": "",
            "tools": [],
            "hiddenTools": [],
            "preVars": pre,
            "postVars": None,
        }
        instructions = node.info.instructions
        try:
            if isinstance(instructions, Block):
                await self.exec_block(instructions, node, prompt=prompt)
            elif instructions is not None:
                prompt.append(self.render(instructions, self.env(node)))
        except TransitionSignal as signal:
            step.update(
                postVars=self.snapshot(), transition=signal.target, discarded="\n".join(prompt)
            )
            self.record_resolution(step, started)
            raise
        text = "\n".join(prompt)
        visible, hidden = self.gate_tools(node)
        self.track_collect(node)
        step.update(
            instructions=text, tools=list(visible), hiddenTools=hidden, postVars=self.snapshot()
        )
        self.record_resolution(step, started)
        return text, visible

    def record_resolution(self, step: dict[str, Any], started: float) -> None:
        step["durationMs"] = elapsed_ms(started)
        if self.warnings:
            step["warnings"] = list(self.warnings)
        # Added when done, so it follows the steps the resolution ran (its actions, say).
        self.trace.add("RESOLUTION_STEP", **step)

    def gate_tools(self, node: Node) -> tuple[dict[str, Tool], list[str]]:
        """S5: a tool whose ``available when`` is false or fails to evaluate is hidden."""
        visible: dict[str, Tool] = {}
        hidden: list[str] = []
        env = self.env(node)
        for tool in node.tools.values():
            if tool.kind == "capture":  # offered while a collected field is still missing
                shown = self.collecting(node)
            else:
                shown = tool.kind != "unresolved" and (
                    tool.guard is None or self.condition(tool.guard, env)
                )
            if shown:
                visible[tool.name] = tool
            else:
                hidden.append(tool.name)
        return visible, hidden

    def collecting(self, node: Node) -> bool:
        """Whether some variable the node's ``collect`` statements ask for is still unset."""
        return any(self.state.variables.get(s.variable) is None for s in node.collect_slots)

    def track_collect(self, node: Node) -> None:
        """Start the next turn in ``node`` while it still collects; stop once all is known."""
        if not node.collect_slots:
            return
        if self.collecting(node):
            self.state.resume_node = node.name
        elif self.state.resume_node == node.name:
            self.state.resume_node = None

    # ------------------------------------------------------------------ the model

    def system_prompt(self, node: Node) -> str:
        """S9: the subagent's system instructions replace the global ones."""
        text = node.info.system_instructions
        if text is None:
            text = self.program.outline.system_instructions
        return self.render(text, self.env(node))

    async def ask_model(
        self, node: Node, iteration: int, instructions: str, visible: dict[str, Tool]
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
            self.model, request, self.trace, iteration=iteration, stream=self.stream
        )

    # ------------------------------------------------------------------ tool calls (S5, S7, S8, S13)

    async def dispatch(
        self, node: Node, response: ModelResponse, visible: dict[str, Tool]
    ) -> StepOutcome:
        calls = response.tool_calls
        self._step_mark = len(self.state.history)  # history before this step's tool calls
        self.state.history.append(Message("assistant", response.text or "", tool_calls=list(calls)))
        outcome = StepOutcome()
        for index, call in enumerate(calls):
            if index >= self.limits.max_tool_calls_per_step:
                self.refuse(
                    call, f"more than {self.limits.max_tool_calls_per_step} tool calls in one step"
                )
                continue
            if outcome.stop is not None:
                self.refuse(call, f"not run: the turn already ended ({outcome.stop})")
                continue
            try:
                result, transition, stop = await self.invoke(node, call, visible)
            except TURN_ENDING as exc:
                self.answer_unfinished(calls[index:], exc)
                raise
            self.state.history.append(Message.tool_result(call, result))
            if transition is not None and outcome.transition is None:
                outcome.transition = (transition, f"tool {call.name}")  # S7: the first one wins
            if stop is not None:
                outcome.stop = stop
        # What the engine said during the step follows the tool results: providers reject any
        # message between an assistant's tool calls and their results.
        if outcome.stop == "confirmation" and self.result.confirmation is not None:
            self.state.history.append(Message("assistant", self.result.confirmation))
        if outcome.stop == "escalate" and self._escalation_text:
            self.state.history.append(Message("assistant", self._escalation_text))
        return outcome

    def answer_unfinished(self, calls: list[ToolCall], failure: Exception) -> None:
        """The turn ends, but the history must stay valid for the next request: providers
        reject tool calls that have no result."""
        for call in calls:
            self.state.history.append(
                Message.tool_result(call, {"error": f"not completed: {failure}"})
            )

    def refuse(self, call: ToolCall, reason: str) -> None:
        """Answer a call that is not run at all (over the step's limit, after a stop)."""
        result, _, _ = self.refusal(call, reason)
        self.state.history.append(Message.tool_result(call, result))

    def refusal(self, call: ToolCall, reason: str) -> ToolOutcome:
        """Record that ``call`` was refused; the model is told ``reason``."""
        self.trace.add("REFUSED_STEP", name=call.name, reason=reason, arguments=call.arguments)
        return {"error": reason}, None, None

    async def invoke(self, node: Node, call: ToolCall, visible: dict[str, Tool]) -> ToolOutcome:
        """Run one tool call; returns (result for the model, transition target, stop)."""
        tool = node.tools.get(call.name)
        if tool is None:
            return self.refusal(
                call, f"unknown tool '{call.name}'; available tools: {sorted(visible)}"
            )
        if call.name not in visible:
            return self.refusal(call, f"tool '{call.name}' is not available now")
        arguments, problem = self.check_arguments(tool, call)
        if problem is not None:
            return self.refusal(call, problem)
        kind = tool.kind
        if kind in ("transition", "cancel"):
            self.actions_run.append(tool.name)
            target = tool.target_node
            if target is None or target not in self.program.nodes:
                return {"error": f"tool '{tool.name}' has no valid target"}, None, None
            if kind == "cancel":
                self.state.resume_node = None
            callback_transition = await self.run_tool_callback(tool, node, {})
            return {"status": f"transferring to {target}"}, callback_transition or target, None
        if kind in ("set_variables", "capture"):
            return await self.set_variables(tool, node, arguments)
        if kind == "escalate":
            self.actions_run.append(tool.name)
            self.trace.add("EVENT_STEP", event="escalate", node=node.name, tool=tool.name)
            self.result.escalated = True
            self.say_escalation_message(node)
            return {"status": "escalated to a human agent"}, None, "escalate"
        if kind == "end_session":
            self.actions_run.append(tool.name)
            self.trace.add("EVENT_STEP", event="end_session", node=node.name, tool=tool.name)
            self.result.ended = True
            self.state.ended = True
            return {"status": "session ended"}, None, "end_session"
        if kind == "delegate":
            return await self.delegate(tool, node)
        if kind in ("action", "connected") and tool.action is not None:
            if tool.requires_confirmation:
                return self.hold_for_confirmation(tool, node, call, arguments)
            return await self.run_tool_action(tool, node, arguments)
        return {"error": f"tool '{tool.name}' cannot be run by this runtime ({kind})"}, None, None

    def say_escalation_message(self, node: Node) -> None:
        """The channel's `escalation_message` (messaging first), so the user is told."""
        messages = self.program.outline.escalation_messages
        text = messages.get("messaging") or next(iter(messages.values()), None)
        rendered = self.render(text, self.env(node)) if text is not None else ""
        if rendered:
            self._escalation_text = rendered
            self.result.messages.append(rendered)
            self.trace.add("RESPONSE_STEP", text=rendered, node=node.name, kind="escalation")

    def check_arguments(self, tool: Tool, call: ToolCall) -> tuple[dict[str, Any], str | None]:
        """Only declared parameters, required ones present, values of the declared type."""
        if call.arguments is None:
            return (
                {},
                f"the arguments of '{call.name}' are not a JSON object: {call.raw_arguments[:200]!r}",
            )
        args = call.arguments
        unknown = sorted(set(args) - set(tool.parameters))
        if unknown:
            allowed = sorted(tool.parameters) or "none"
            return {}, f"unknown argument(s) {unknown} for '{call.name}'; allowed: {allowed}"
        size = len(json.dumps(args, default=repr))
        if size > self.limits.max_argument_chars:
            return {}, f"arguments of '{call.name}' are too large ({size} characters)"
        if nested_deeper_than(args, self.limits.max_argument_depth):
            return {}, f"arguments of '{call.name}' are nested too deeply"
        checked: dict[str, Any] = {}
        for name, param in tool.parameters.items():
            if name not in args or args[name] is None:
                if param.required:
                    return {}, f"missing required argument '{name}' for '{call.name}'"
                continue
            try:
                checked[name] = coerce_to_type(args[name], param.type)
            except TypeMismatch as exc:
                return {}, f"argument '{name}' of '{call.name}': {exc.message}"
        return checked, None

    async def set_variables(self, tool: Tool, node: Node, arguments: dict[str, Any]) -> ToolOutcome:
        """S8: only declared mutable variables, values already type-checked."""
        self.actions_run.append(tool.name)
        step = self.trace.add(
            "ACTION_STEP",
            name=tool.name,
            action="@utils.setVariables" if tool.kind == "set_variables" else "collect",
            node=node.name,
            source="llm",
            input=dict(arguments),
            output=None,
            error=None,
            preVars=self.snapshot(),
            postVars=None,
        )
        for name in arguments:
            declared = self.declared.get(name)
            if declared is None or not declared.is_mutable:
                step["error"] = f"@variables.{name} is not a mutable variable"
                step["postVars"] = self.snapshot()
                return {"error": step["error"]}, None, None
        env = self.env(node)
        computed: dict[str, Any] = {}
        for name, expr in tool.bound_inputs.items():
            try:
                computed[name] = self.value(expr, env)
            except EvalError as exc:
                step["error"] = f"with {name}: {exc.message}"
                step["postVars"] = self.snapshot()
                return {"error": step["error"]}, None, None
        self.state.variables.update(arguments)
        for name, value in computed.items():
            declared = self.declared.get(name)
            if declared is not None and declared.is_mutable:
                self.state.variables[name] = value
        transition = await self.run_tool_callback(tool, node, {}, step)
        step["output"] = {"updated": sorted({*arguments, *computed})}
        step["postVars"] = self.snapshot()
        return {"status": "updated", "variables": sorted({*arguments, *computed})}, transition, None

    def tool_inputs(self, tool: Tool, node: Node, arguments: dict[str, Any]) -> dict[str, Any]:
        assert tool.action is not None
        env = self.env(node)
        inputs = self.defaults(tool.action, env)
        for name, expr in tool.bound_inputs.items():
            try:
                inputs[name] = self.value(expr, env)
            except EvalError as exc:
                raise ProcedureFailure(
                    f"with {name} of tool '{tool.name}': {exc.message}"
                ) from None
        inputs.update(arguments)
        return inputs

    async def run_tool_action(
        self, tool: Tool, node: Node, arguments: dict[str, Any]
    ) -> ToolOutcome:
        """S7 and S12: run the action, then its callback; a failure goes back to the model."""
        assert tool.action is not None
        inputs = self.tool_inputs(tool, node, arguments)
        outputs, step = await self.call_action(
            tool.action, inputs, node, source="llm", tool=tool.name
        )
        if outputs is None:
            return {"error": step["error"] or "the action failed"}, None, None
        transition = None
        if tool.after_response is not None:  # a connected subagent's own follow-up
            transition = await self.run_tool_callback(
                tool, node, outputs, step, tool.after_response
            )
        if transition is None:
            transition = await self.run_tool_callback(tool, node, outputs, step)
        hidden = {k for k, p in tool.action.outputs.items() if p.filter_from_agent}
        return {k: v for k, v in outputs.items() if k not in hidden}, transition, None

    async def run_tool_callback(
        self,
        tool: Tool,
        node: Node,
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
            await self.exec_callback(body, node, outputs, step)
        except TransitionSignal as signal:
            return signal.target
        return None

    async def delegate(self, tool: Tool, node: Node) -> ToolOutcome:
        """``@subagent.x`` as a tool: run x (and wherever it transitions), return its reply."""
        target = tool.target_node
        if target is None or target not in self.program.nodes:
            return {"error": f"tool '{tool.name}' has no valid target"}, None, None
        self.actions_run.append(tool.name)
        self.trace.add(
            "EVENT_STEP", event="delegate_start", node=node.name, tool=tool.name, target=target
        )
        outer_messages = self.result.messages
        self.result.messages = []
        # The delegate sees the history before the caller's pending tool calls and its own
        # exchange stays out of the caller's history: its reply comes back as the tool result.
        outer_history = self.state.history
        # The delegate's own steps move the mark; a second delegation in this step needs it.
        outer_mark = self._step_mark
        self.state.history = list(outer_history[:outer_mark])
        try:
            await self.drive(target, f"delegated by {node.name}")
            reply = "\n".join(self.result.messages)
        finally:
            self.result.messages = outer_messages
            self.state.history = outer_history
            self._step_mark = outer_mark
            self.state.current_node = node.name
        self.trace.add(
            "EVENT_STEP",
            event="delegate_end",
            node=node.name,
            tool=tool.name,
            target=target,
            reply=reply,
        )
        if self.result.escalated:
            return {"reply": reply}, None, "escalate"
        if self.state.ended:
            return {"reply": reply}, None, "end_session"
        if self.result.confirmation is not None:
            # A call held inside the delegate ends the caller's turn too, and the question
            # (said in the delegate's messages) must reach the user.
            self.result.messages.append(self.result.confirmation)
            return {"reply": reply}, None, "confirmation"
        return {"reply": reply}, None, None

    # ------------------------------------------------------------------ confirmation (S13)

    def hold_for_confirmation(
        self, tool: Tool, node: Node, call: ToolCall, arguments: dict[str, Any]
    ) -> ToolOutcome:
        assert tool.action is not None
        self.state.pending_confirmation = PendingConfirmation(
            node.name, tool.name, call.id, arguments
        )
        label = tool.action.label or humanize_action(tool.action.name)
        question = f"Before I run {label}, please confirm: yes or no?"
        self.trace.add(
            "EVENT_STEP",
            event="confirmation_requested",
            node=node.name,
            tool=tool.name,
            arguments=arguments,
        )
        self.result.messages.append(question)
        self.result.confirmation = question
        return {"status": "waiting for the user to confirm"}, None, "confirmation"

    async def resolve_confirmation(self, pending: PendingConfirmation) -> tuple[str, bool]:
        """The user's answer to a held call: run it on yes, report a refusal on no."""
        self.state.pending_confirmation = None
        answer = self.system_variables["user_input"].strip().lower().rstrip(".!")
        confirmed = answer in YES
        node = self.program.nodes.get(pending.node)
        tool = node.tools.get(pending.tool) if node else None
        self.trace.add(
            "EVENT_STEP",
            event="confirmation_resolved",
            node=pending.node,
            tool=pending.tool,
            confirmed=confirmed,
        )
        self.state.history.append(Message("user", self.system_variables["user_input"]))
        if node is None or tool is None:
            return self.program.start, True
        self.state.current_node = node.name
        call = ToolCall(f"{pending.call_id}-confirmed", tool.name, dict(pending.arguments))
        self.state.history.append(Message("assistant", "", tool_calls=[call]))
        if not confirmed:
            result: dict[str, Any] = {"status": "the user did not confirm; the action was not run"}
            transition = None
        else:
            try:
                result, transition, _ = await self.run_tool_action(
                    tool, node, dict(pending.arguments)
                )
            except TURN_ENDING as exc:
                self.answer_unfinished([call], exc)
                raise
        self.state.history.append(Message.tool_result(call, result))
        if transition is not None:
            self.follow(node.name, TransitionSignal(transition, f"tool {tool.name}"))
            return transition, True
        return node.name, False


def humanize_action(name: str) -> str:
    return name.replace("_", " ")
