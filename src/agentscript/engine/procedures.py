"""The deterministic interpreter: ``set``, ``run``, ``if``, ``transition``, ``|`` and ``collect``.

Used for ``before_reasoning``/``after_reasoning`` hooks, for resolving
``reasoning.instructions`` before every LLM call (S3), and for tool callbacks (S7).

A transition is raised as :class:`TransitionSignal`, so the rest of the procedure does not run
(S4); a failing deterministic action or expression raises :class:`ProcedureFailure` (S12).
"""

from __future__ import annotations

import time
from typing import Any

from agentscript.actions.registry import ActionError, ActionRequest, ActionRunner
from agentscript.check.outline import ActionDef
from agentscript.engine.program import Program, ProgramNode, capture_tool_name, variable_of
from agentscript.engine.state import SessionState
from agentscript.errors import Signal, TurnError
from agentscript.expr.evaluate import Env, EvalError
from agentscript.expr.nodes import EllipsisExpr, Expr, Literal, reference_path
from agentscript.expr.values import TypeMismatch, coerce_to_type, parse_type, to_display
from agentscript.jsonsafe import UnsafeValue, json_safe, json_safe_sized
from agentscript.limits import Limits
from agentscript.syntax.tree import (
    Block,
    CollectStmt,
    IfStmt,
    Interpolation,
    RunStmt,
    SetStmt,
    Template,
    TemplatePart,
    TemplateStmt,
    TransitionStmt,
    WithStmt,
)
from agentscript.trace import TurnTrace, elapsed_ms
from agentscript.trace_steps import Source, action_ran, action_step


def render_text(
    program: Program, text: Template | Expr | None, env: Env, warnings: list[str]
) -> str:
    """Resolve a template or expression to prompt text; a failing ``{!expr}`` renders empty."""
    if text is None:
        return ""
    if isinstance(text, Literal) and isinstance(text.value, str) and "{!" in text.value:
        return render_parts(program, program.text_parts(text), env, warnings)
    if isinstance(text, Template):
        return render_parts(program, text.parts, env, warnings)
    try:
        return to_display(program.compiled(text)(env))
    except EvalError as exc:
        warnings.append(f"text at line {exc.span.line} rendered empty: {exc.message}")
        return ""


def render_parts(program: Program, parts: list[TemplatePart], env: Env, warnings: list[str]) -> str:
    out: list[str] = []
    for part in parts:
        if isinstance(part, Interpolation):
            try:
                out.append(to_display(program.compiled(part.expr)(env)))
            except EvalError as exc:
                warnings.append(
                    f"{{!{part.source}}} at line {exc.span.line} rendered empty: {exc.message}"
                )
        else:
            out.append(part)
    return "".join(out)


class TransitionSignal(Signal):
    """Control moves to ``target`` now; ``via`` says what caused it."""

    def __init__(self, target: str, via: str) -> None:
        super().__init__(target)
        self.target = target
        self.via = via


class ProcedureFailure(TurnError):
    """A deterministic step failed: the turn ends with ``system.messages.error``."""


class ProcedureExecutor:
    """Runs procedures against one session's state, recording every step in the trace."""

    def __init__(
        self,
        program: Program,
        state: SessionState,
        runner: ActionRunner,
        trace: TurnTrace,
        user_input: str,
        limits: Limits | None = None,
    ) -> None:
        self.program = program
        # The turn's bounds: output and variable size caps (checked outputs, `set`).
        self.limits = limits or Limits()
        self.state = state
        self.runner = runner
        self.trace = trace
        self.system_variables: dict[str, Any] = {"user_input": user_input}
        self.linked = {n for n, v in program.outline.variables.items() if v.is_linked}
        self.declared = program.outline.variables
        self.knowledge = program.outline.knowledge
        self.actions_run: list[str] = []
        # Characters this turn's kept action outputs took (Limits.max_turn_output_chars): the
        # executor is made anew every turn, so the budget is never saved with the session.
        self.output_chars = 0
        self.displayable: list[dict[str, Any]] = []
        self.warnings: list[str] = []
        # collect: the first unfilled slot found during this resolution
        self._asked_collect = False
        # This resolution's instruction pieces (one per `|` or collect question, in prompt
        # order) with the `if` branches that produced each (RESOLUTION_STEP.instructionLines),
        # and the branches the statement being run sits in, outermost first.
        self.instruction_lines: list[dict[str, Any]] = []
        self._within: list[dict[str, Any]] = []
        # The last Env built, and what it was built from: consecutive statements of a block
        # see the same namespaces (the variables dict is updated in place), so they share one
        # Env instead of building a dict and an Env each (about 25 per turn of seed 002).
        self._env: Env | None = None
        self._env_key: tuple[ProgramNode, dict[str, Any] | None, dict[str, Any]] | None = None

    # ------------------------------------------------------------------ evaluation

    def env(self, node: ProgramNode, outputs: dict[str, Any] | None = None) -> Env:
        key = self._env_key
        variables = self.state.variables
        # Identity, not equality: the key holds the objects, so none can be freed and reused.
        if (
            key is not None
            and key[0] is node
            and key[1] is outputs
            and key[2] is variables
            and self._env is not None
        ):
            return self._env
        namespaces: dict[str, Any] = {
            "variables": self.state.variables,
            "system_variables": self.system_variables,
            "actions": node.tool_names,
            "knowledge": self.knowledge,
        }
        if outputs is not None:
            namespaces["outputs"] = outputs
        self._env = Env(namespaces)
        self._env_key = (node, outputs, variables)
        return self._env

    def value(self, expr: Expr, env: Env) -> Any:
        return self.program.compiled(expr)(env)

    def condition(self, expr: Expr, env: Env) -> bool:
        """A condition that cannot be evaluated is false (fail closed), and noted."""
        try:
            return bool(self.value(expr, env))
        except EvalError as exc:
            self.warnings.append(
                f"condition at line {exc.span.line} treated as false: {exc.message}"
            )
            return False

    def render(self, text: Template | Expr | None, env: Env) -> str:
        return render_text(self.program, text, env, self.warnings)

    def snapshot(self) -> dict[str, Any]:
        return dict(self.state.variables)

    def begin_resolution(self) -> None:
        """Forget the previous resolution's warnings and collect question (S3 starts over)."""
        self.warnings = []
        self._asked_collect = False
        self.instruction_lines = []
        self._within = []

    # ------------------------------------------------------------------ statements

    async def exec_block(
        self,
        block: Block | None,
        node: ProgramNode,
        *,
        prompt: list[str] | None = None,
        outputs: dict[str, Any] | None = None,
    ) -> None:
        """Run ``block``; ``prompt`` collects ``|`` text (only when resolving instructions)."""
        if block is None:
            return
        for item in block.items:
            # Exact types (the statement classes have no subclasses): one identity test each
            # instead of an isinstance call, on the engine's hottest loop.
            if type(item) is TemplateStmt:
                if prompt is not None:
                    text = self.render(item.template, self.env(node, outputs))
                    prompt.append(text)
                    self.note_line(text, item.span.line)
            elif type(item) is SetStmt:
                self.exec_set(item, node, outputs)
            elif type(item) is RunStmt:
                await self.exec_run(item, node, outputs)
            elif type(item) is IfStmt:
                await self.exec_if(item, node, prompt, outputs)
            elif type(item) is TransitionStmt:
                target = self.program.node_of(item.targets[0]) if item.targets else None
                if target in self.program.outline.connected_subagents:
                    raise ProcedureFailure(
                        f"transition at line {item.span.line}: this runtime does not hand the "
                        f"conversation to connected subagent '{target}'; call it as a tool"
                    )
                if target is None or target not in self.program.nodes:
                    raise ProcedureFailure(
                        f"transition at line {item.span.line} has no valid target"
                    )
                raise TransitionSignal(target, f"transition at line {item.span.line}")
            elif (
                type(item) is CollectStmt
                and prompt is not None
                and self.exec_collect(item, node, prompt)
            ):
                self.note_line(prompt[-1], item.span.line)
            # `with`, `available when` and entries are declarations, not steps.

    def note_line(self, text: str, line: int | None) -> None:
        """Record an instruction piece just added to the prompt, with its branches."""
        self.instruction_lines.append({"text": text, "line": line, "branches": list(self._within)})

    def exec_set(self, stmt: SetStmt, node: ProgramNode, outputs: dict[str, Any] | None) -> None:
        name = self.program.variable_of(stmt.target)
        if name is None:
            raise ProcedureFailure(
                f"set at line {stmt.span.line}: the target must be @variables.<name>"
            )
        if name in self.linked:
            raise ProcedureFailure(
                f"set at line {stmt.span.line}: @variables.{name} is linked (read-only)"
            )
        try:
            value = self.value(stmt.value, self.env(node, outputs))
        except EvalError as exc:
            raise ProcedureFailure(
                f"set @variables.{name} at line {exc.span.line}: {exc.message}"
            ) from None
        try:
            self.state.variables[name] = self.storable(name, value)
        except ValueError as exc:
            raise ProcedureFailure(
                f"set @variables.{name} at line {stmt.span.line}: {exc}"
            ) from None

    def storable(self, name: str, value: Any) -> Any:
        """``value`` as it may be stored in ``@variables.name``: JSON-safe, within
        ``Limits.max_variable_chars``, of the declared type; otherwise ValueError saying why."""
        limit = self.limits.max_variable_chars
        try:
            value = json_safe(value, max_chars=limit)
        except UnsafeValue as exc:
            if exc.too_large:
                raise ValueError(
                    f"the value is larger than Limits.max_variable_chars ({limit} characters)"
                ) from None
            raise ValueError(f"the value is not JSON-safe: {exc}") from None
        declared = self.declared.get(name)
        if declared is not None:
            try:
                value = coerce_declared(value, declared.type)
            except TypeMismatch as exc:
                raise ValueError(f"@variables.{name} is {declared.type}: {exc.message}") from None
        return value

    async def exec_if(
        self,
        stmt: IfStmt,
        node: ProgramNode,
        prompt: list[str] | None,
        outputs: dict[str, Any] | None,
    ) -> None:
        env = self.env(node, outputs)
        # Which branch ran ("if", "elif 1", ..., "else"; "else" also when no branch ran), for
        # `agentscript test --coverage`; kept beside the steps so step order is unchanged.
        step = self.trace.add_branch(node.name, stmt.span.line)
        body: Block | None = None
        decided: Expr = stmt.condition  # for `else`: the `if`'s condition, which was false
        if self.condition(stmt.condition, env):
            step["taken"] = "if"
            body = stmt.body
        else:
            for index, clause in enumerate(stmt.else_ifs, start=1):
                if self.condition(clause.condition, env):
                    step["taken"] = f"elif {index}"
                    body, decided = clause.body, clause.condition
                    break
            else:
                if stmt.else_clause is not None:
                    body = stmt.else_clause.body
        if body is None:
            return
        if prompt is None:  # hooks and callbacks: no instruction lines to attribute
            await self.exec_block(body, node, outputs=outputs)
            return
        self._within.append(
            {
                "line": stmt.span.line,
                "taken": step["taken"],
                "condition": self.program.source(decided),
                "index": len(self.trace.branches) - 1,
            }
        )
        try:
            await self.exec_block(body, node, prompt=prompt, outputs=outputs)
        finally:
            self._within.pop()

    def exec_collect(self, stmt: CollectStmt, node: ProgramNode, prompt: list[str]) -> bool:
        """Ask for the first unfilled collect variable; later ones wait (multi-turn slot
        filling). True when a question was added to ``prompt``."""
        name = variable_of(stmt.target)
        if name is None or self.state.variables.get(name) is not None or self._asked_collect:
            return False
        self._asked_collect = True
        slot = next((s for s in node.collect_slots if s.statement is stmt), None)
        message = self.render(slot.message, self.env(node)) if slot and slot.message else ""
        variable = self.declared.get(name)
        what = message or (variable.description if variable and variable.description else name)
        tool = capture_tool_name(node.name)
        # A message is usually a full sentence ("Which city?"): do not add a second stop.
        end = "" if what.rstrip().endswith((".", "?", "!")) else "."
        prompt.append(
            f"Ask the user for: {what.rstrip()}{end} When they answer, call {tool} with the value."
        )
        return True

    async def exec_run(
        self, stmt: RunStmt, node: ProgramNode, outputs: dict[str, Any] | None
    ) -> None:
        action = self.program.action_of(node.info, stmt.target)
        if action is None:
            raise ProcedureFailure(
                f"run at line {stmt.span.line}: no action {_describe(stmt.target)} in '{node.name}'"
            )
        env = self.env(node, outputs)
        inputs = self.defaults(action, env)
        if stmt.body is not None:
            for item in stmt.body.items:
                if isinstance(item, WithStmt):
                    for binding in item.bindings:
                        if isinstance(binding.value, EllipsisExpr):
                            continue  # `...` has no meaning without an LLM; the input stays unset
                        try:
                            inputs[binding.param] = self.value(binding.value, env)
                        except EvalError as exc:
                            raise ProcedureFailure(
                                f"with {binding.param} at line {exc.span.line}: {exc.message}"
                            ) from None
        results, step = await self.call_action(action, inputs, node, source=Source.DETERMINISTIC)
        if results is None:
            raise ProcedureFailure(step["error"] or f"action '{action.name}' failed")
        await self.exec_callback(stmt.body, node, results, step)

    async def exec_callback(
        self,
        body: Block | None,
        node: ProgramNode,
        outputs: dict[str, Any],
        step: dict[str, Any] | None,
    ) -> None:
        """Run an action's callback ``body``; ``step`` (its ACTION_STEP) gets the variables
        as they are after it, even when it transitions or fails."""
        try:
            await self.exec_block(body, node, outputs=outputs)
        finally:
            if step is not None:
                step["postVars"] = self.snapshot()

    def defaults(self, action: ActionDef, env: Env) -> dict[str, Any]:
        inputs: dict[str, Any] = {}
        for name, param in action.inputs.items():
            if param.default is not None:
                try:
                    inputs[name] = self.value(param.default, env)
                except EvalError as exc:
                    raise ProcedureFailure(f"default of input '{name}': {exc.message}") from None
        return inputs

    # ------------------------------------------------------------------ actions

    async def call_action(
        self,
        action: ActionDef,
        inputs: dict[str, Any],
        node: ProgramNode,
        *,
        source: Source,
        tool: str | None = None,
    ) -> tuple[dict[str, Any] | None, dict[str, Any]]:
        """Run an action and record an ACTION_STEP; returns its outputs (None on failure,
        then the step's ``error`` says why) and the step."""
        step = action_step(
            self.trace,
            name=tool or action.name,
            action=action.name,
            target=action.target,
            node=node.name,
            source=source,
            inputs=dict(inputs),
            pre_vars=self.snapshot(),
        )
        started = time.perf_counter()
        self.actions_run.append(tool or action.name)
        request = ActionRequest(action.name, action.target, inputs)
        try:
            outputs = self.check_outputs(action, await self.runner.run(request))
        except ActionError as exc:
            action_ran(
                step, printed=request.printed, ran_target=request.ran, stubbed=request.stubbed
            )
            step["error"] = str(exc)
            step["durationMs"] = elapsed_ms(started)
            step["postVars"] = self.snapshot()
            return None, step
        step["durationMs"] = elapsed_ms(started)
        step["output"] = outputs
        action_ran(step, printed=request.printed, ran_target=request.ran, stubbed=request.stubbed)
        step["postVars"] = self.snapshot()
        shown = {
            k: v
            for k, v in outputs.items()
            if k in action.outputs and action.outputs[k].is_displayable
        }
        if shown:
            self.displayable.append({"action": action.name, "outputs": shown})
        return outputs, step

    def check_outputs(self, action: ActionDef, outputs: dict[str, Any]) -> dict[str, Any]:
        """``outputs`` as plain JSON within ``Limits.max_output_chars`` and what is left of
        ``Limits.max_turn_output_chars``, every declared output of its declared type (None, or a
        missing output, is "not set"); otherwise an ActionError saying why, so a hostile or
        broken action becomes an error result (S12), never a stored NaN, repr or giant trace."""
        bound, bounded_by = self.limits.output_bound(self.output_chars)
        try:
            clean: dict[str, Any]
            clean, used = json_safe_sized(outputs, max_chars=bound)
        except UnsafeValue as exc:
            if exc.too_large:
                raise ActionError(
                    f"action '{action.name}' returned outputs larger than {bounded_by}"
                ) from None
            raise ActionError(
                f"action '{action.name}' returned an output that is not JSON: "
                f"{'outputs.' + exc.path if exc.path else 'outputs'}: {exc.reason}"
            ) from None
        for name, value in clean.items():
            param = action.outputs.get(name)
            if param is None or value is None:
                continue
            try:
                clean[name] = coerce_declared(value, param.type)
            except TypeMismatch as exc:
                raise ActionError(
                    f"output '{name}' of action '{action.name}' is {param.type}: {exc.message}"
                ) from None
        # A declared output the action did not return (it returned None, or left it out) is
        # unset: callbacks read None, as for any unset value, instead of failing on a name.
        for name in action.outputs:
            clean.setdefault(name, None)
        self.output_chars += used  # kept: they count against the turn's budget
        return clean


def coerce_declared(value: Any, type_name: str) -> Any:
    """``value`` checked against a declared type; a type this runtime does not know (a
    platform type such as ``lightning__richTextType``) accepts any JSON value."""
    try:
        parse_type(type_name)
    except TypeMismatch:
        return value
    return coerce_to_type(value, type_name)


def _describe(expr: Expr) -> str:
    path = reference_path(expr)
    return "@" + ".".join(path) if path else "(not a reference)"
