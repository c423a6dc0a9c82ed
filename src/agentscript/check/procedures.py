"""Phase 2: procedures, reasoning action bindings and every expression, with scopes."""

from __future__ import annotations

import re

from agentscript.check import schema
from agentscript.check.context import Context, suggest
from agentscript.check.exprs import ExprChecker, Scope
from agentscript.check.outline import ParamInfo, SubagentInfo, ToolBinding, action_name_in
from agentscript.check.schema import BlockSpec
from agentscript.check.structure import Jobs, StructureChecker
from agentscript.check.types import base_type, compatible, static_type
from agentscript.check.values import string_of
from agentscript.diagnostics import Span
from agentscript.expr.nodes import EllipsisExpr, Expr, Literal, reference_path
from agentscript.syntax.tree import (
    AvailableWhenStmt,
    Block,
    CollectStmt,
    Entry,
    ErrorNode,
    ExprValue,
    IfStmt,
    Item,
    RunStmt,
    SequenceItem,
    SetStmt,
    Template,
    TemplateStmt,
    TransitionStmt,
    WithStmt,
)

# `{@variables.x}`: an interpolation written without its `!`.
_MISSING_BANG = re.compile(r"\{\s*@[A-Za-z_]")

_MODE_NAMES = {
    "instructions": "reasoning.instructions",
    "deterministic": "before_reasoning/after_reasoning",
    "binding": "a reasoning action",
    "set_variables": "@utils.setVariables",
    "after_response": "after_response",
    "run": "a run block",
}
# Statements allowed per procedure mode.
_ALLOWED: dict[str, frozenset[type]] = {
    "instructions": frozenset(
        {TemplateStmt, SetStmt, RunStmt, IfStmt, TransitionStmt, CollectStmt}
    ),
    "deterministic": frozenset({SetStmt, RunStmt, IfStmt, TransitionStmt}),
    "binding": frozenset({SetStmt, RunStmt, IfStmt, TransitionStmt, WithStmt, AvailableWhenStmt}),
    "set_variables": frozenset({SetStmt, WithStmt, AvailableWhenStmt}),
    "after_response": frozenset({SetStmt, RunStmt, IfStmt, TransitionStmt}),
    "run": frozenset({SetStmt, RunStmt, IfStmt, TransitionStmt, WithStmt}),
}
_COLLECT_BODY = BlockSpec("collect", {"message": schema.S})


class ProcedureChecker:
    """Phase 2 of one check run: the jobs of phase 1, against the complete outline."""

    def __init__(self, ctx: Context, structure: StructureChecker) -> None:
        self.ctx = ctx
        self.exprs = ExprChecker(ctx)
        self.structure = structure
        self.variables = ctx.outline.variables

    def run(self, jobs: Jobs) -> None:
        """Check every queued expression, template, reasoning action and procedure."""
        check = self.exprs.check
        for expr, scope in jobs.exprs:
            check(expr, scope)
        for template, scope in jobs.templates:
            self.template(template, scope)
        for node, entry in jobs.bindings:
            self.binding(node, entry)
        for block, mode, scope in jobs.procedures:
            self.procedure(block, mode, scope, in_if=False)

    # ------------------------------------------------------------ templates

    def template(self, template: Template, scope: Scope) -> None:
        """Check the interpolations of ``template``; note ``{@...}`` written without ``!``."""
        newlines = 0  # lines consumed by earlier parts, to place the info on the right line
        for part in template.parts:
            if isinstance(part, str):
                match = _MISSING_BANG.search(part)
                if match is not None:
                    line = template.span.line + newlines + part.count("\n", 0, match.start())
                    self.ctx.info(
                        "instruction-template-syntax",
                        "This looks like an interpolation without '!': write {!@...} to insert "
                        "the value; {@...} is literal text.",
                        Span(line, template.span.column, line, template.span.column + 1),
                    )
                newlines += part.count("\n")
            else:
                newlines += part.source.count("\n")
                self.exprs.check(part.expr, scope.for_template())

    # ------------------------------------------------------------ procedures

    def procedure(self, block: Block, mode: str, scope: Scope, *, in_if: bool) -> None:
        """Check the statements of ``block`` as a procedure of ``mode`` (a key of ``_ALLOWED``);
        ``in_if`` inside an ``if``/``else`` body, where a nested ``if`` is reported."""
        allowed = _ALLOWED[mode]
        terminated: Span | None = None
        reported = False
        for item in block.items:
            if isinstance(item, ErrorNode):
                continue
            if terminated is not None and not reported and not isinstance(item, Entry):
                self.ctx.warning(
                    "unreachable-code",
                    "This never runs: the procedure already transitioned "
                    f"(line {terminated.line}). Move it before the transition or remove it.",
                    item.span,
                )
                reported = True
            if isinstance(item, Entry | SequenceItem):
                self.ctx.error(
                    "unexpected-entry",
                    f"'{_item_text(item)}' is not a statement; {_MODE_NAMES[mode]} holds "
                    "statements (set, run, if, transition, ...).",
                    item.span,
                )
                continue
            if type(item) not in allowed:
                self._not_allowed(item, mode)
                continue
            self.statement(item, mode, scope, in_if=in_if)
            if terminated is None and _always_transitions(item):
                terminated = item.span

    def _not_allowed(self, item: Item, mode: str) -> None:
        where = _MODE_NAMES[mode]
        if isinstance(item, TemplateStmt) and mode in ("deterministic", "after_response"):
            self.ctx.error(
                "template-in-deterministic-procedure",
                f"`|` text is only for reasoning.instructions, not {where}; use set/run/if/"
                "transition here.",
                item.span,
            )
            return
        names = {
            TemplateStmt: "`|` text",
            SetStmt: "`set`",
            WithStmt: "`with`",
            RunStmt: "`run`",
            IfStmt: "`if`",
            TransitionStmt: "`transition`",
            AvailableWhenStmt: "`available when`",
            CollectStmt: "`collect`",
        }
        what = names.get(type(item), "This statement")
        hint = ""
        if isinstance(item, WithStmt):
            hint = " `with` binds inputs under `run @actions.X` or a reasoning action."
        elif isinstance(item, AvailableWhenStmt):
            hint = " `available when` guards a reasoning action."
        self.ctx.error(
            "statement-not-allowed", f"{what} is not allowed in {where}.{hint}", item.span
        )

    def guard_type(self, item: AvailableWhenStmt) -> None:
        """A guard whose type is known and not boolean is probably a mistake (it is still
        evaluated by truthiness: an empty string hides the tool, any other shows it)."""
        kind = static_type(item.condition, self.ctx.outline)
        if kind is not None and base_type(kind) != "boolean":
            self.ctx.warning(
                "available-when-non-boolean",
                f"This guard is {kind}, not boolean: the tool shows whenever it is non-empty "
                'or non-zero. Compare it, e.g. `available when @variables.x != ""`.',
                item.condition.span,
            )

    def statement(self, item: Item, mode: str, scope: Scope, *, in_if: bool) -> None:
        """Check one statement already known to be allowed in ``mode``."""
        check = self.exprs.check
        if isinstance(item, TemplateStmt):
            self.template(item.template, scope)
        elif isinstance(item, SetStmt):
            self.set_statement(item, scope)
        elif isinstance(item, WithStmt):
            for binding in item.bindings:
                check(binding.value, scope, allow_ellipsis=True)
                self._quoted_interpolation(binding.param, binding.value)
        elif isinstance(item, RunStmt):
            self.run_statement(item, scope, in_if=in_if)
        elif isinstance(item, IfStmt):
            if in_if:
                # `if <condition>`: the span of the statement line may run on over a trailing
                # comment, which is not part of the problem.
                self._nested_if(item.span.to(item.condition.span))
            check(item.condition, scope)
            self.procedure(item.body, mode, scope, in_if=True)
            for branch in item.else_ifs:
                check(branch.condition, scope)
                self.procedure(branch.body, mode, scope, in_if=True)
            if item.else_clause is not None:
                self.procedure(item.else_clause.body, mode, scope, in_if=True)
        elif isinstance(item, TransitionStmt):
            self.transition(item.targets, item.span, scope)
        elif isinstance(item, AvailableWhenStmt):
            check(item.condition, scope)
            self.guard_type(item)
        elif isinstance(item, CollectStmt):
            node = scope.node
            if node is not None and node.is_start:
                self.ctx.error(
                    "collect-in-start-agent",
                    "`collect` is not allowed in start_agent (the router); move it to a subagent.",
                    item.span,
                )
            self.set_target(item.target, scope, "collect")
            if item.body is not None:
                found = self.structure.fields(item.body, _COLLECT_BODY, item.span)
                if "message" in found:
                    value = found["message"].value
                    if isinstance(value, Template):
                        self.template(value, scope)

    def _quoted_interpolation(self, param: str, value: Expr) -> None:
        """`with x="Turn: {!@variables.n}"` passes those characters, not the value: say so."""
        if isinstance(value, Literal) and isinstance(value.value, str) and "{!" in value.value:
            self.ctx.info(
                "literal-interpolation-in-input",
                f"the input '{param}' receives the text {value.value!r} as written: '{{!...}}' "
                "is only filled in prompt text and messages; pass the value itself "
                f"(with {param}=@variables.x) or join text with '+'",
                value.span,
            )

    def _nested_if(self, span: Span) -> None:
        message = (
            "`if` inside another `if`/`else` body is not supported by Agentforce; combine the "
            "conditions with `and`, or use an `else if` chain."
        )
        if self.ctx.agentforce:
            self.ctx.error("unsupported-nested-if", message, span)
        else:
            self.ctx.warning(
                "unsupported-nested-if",
                "Nested `if` runs here but the Agentforce toolchain rejects it; combine the "
                "conditions or use `else if` to stay portable.",
                span,
            )

    def set_target(self, target: Expr, scope: Scope, what: str) -> str | None:
        """Check the target of ``set``/``collect``; the variable's name when the target is
        exactly ``@variables.name`` (not a member inside one), else None."""
        path = reference_path(target)
        if path is None or path[0] != "variables" or len(path) < 2:
            self.ctx.error(
                "invalid-set-target",
                f"`{what}` needs a variable target like @variables.name.",
                target.span,
            )
            if path is None:
                self.exprs.check(target, scope)
            return None
        self.exprs.resolve(path, target.span, scope)
        var = self.variables.get(path[1])
        if var is not None and var.is_linked:
            self.ctx.error(
                "set-linked-variable",
                f"'{path[1]}' is a linked variable (read-only, supplied by the caller); "
                "declare it `mutable` to assign it.",
                target.span,
            )
        return path[1] if len(path) == 2 else None

    def set_statement(self, item: SetStmt, scope: Scope) -> None:
        """Check ``set``: its target, its value, and (a warning) their types."""
        name = self.set_target(item.target, scope, "set")
        self.exprs.check(item.value, scope)
        if name is None or name not in self.variables:
            return
        declared = self.variables[name].type
        actual: str | None
        value_path = reference_path(item.value)
        if value_path is not None and value_path[0] == "outputs" and len(value_path) == 2:
            output = (scope.outputs or {}).get(value_path[1])
            actual = output.type if output is not None else None
        else:
            actual = static_type(item.value, self.ctx.outline)
        if actual is not None and not compatible(declared, actual):
            self.ctx.warning(
                "type-mismatch",
                f"'@variables.{name}' is '{declared}' but is set to a {actual} value.",
                item.value.span,
            )

    def run_statement(self, item: RunStmt, scope: Scope, *, in_if: bool) -> None:
        """Check ``run @actions.X`` and its callback, where ``@outputs`` are X's outputs."""
        outputs: dict[str, ParamInfo] | None = None
        inputs: dict[str, ParamInfo] | None = None
        owner = action_name_in(reference_path(item.target))
        if owner is None:
            self.ctx.error(
                "invalid-run-target",
                "`run` needs an action defined in this subagent: `run @actions.Name`.",
                item.target.span,
            )
        else:
            node = scope.node
            action = node.actions.get(owner) if node is not None else None
            if action is None:
                candidates = list(node.actions) if node is not None else []
                self.ctx.error(
                    "undefined-reference",
                    f"'{owner}' is not an action defined in "
                    f"{'this subagent' if node else 'this scope'}.{suggest(owner, candidates)}",
                    item.target.span,
                )
            else:
                outputs, inputs = action.outputs, action.inputs
        if item.body is None:
            return
        inner = scope.with_outputs(owner, outputs)
        self.procedure(item.body, "run", inner, in_if=in_if)
        if inputs is not None and owner is not None:
            for stmt in item.body.items:
                if isinstance(stmt, WithStmt):
                    for binding in stmt.bindings:
                        self._input(owner, inputs, binding.param, binding.value, binding.span)

    def _input(
        self, owner: str, inputs: dict[str, ParamInfo], param: str, value: Expr, span: Span
    ) -> None:
        spec = inputs.get(param)
        if spec is None:
            self.ctx.error(
                "action-unknown-input",
                f"'{param}' is not a defined input of action '{owner}'.{suggest(param, inputs)}",
                span,
            )
            return
        actual = static_type(value, self.ctx.outline)
        if actual is not None and not compatible(spec.type, actual):
            self.ctx.warning(
                "type-mismatch",
                f"Input '{param}' of '{owner}' expects '{spec.type}' but gets a {actual}.",
                value.span,
            )

    def transition(self, targets: list[Expr], span: Span, scope: Scope) -> str | None:
        """Check the targets of a transition; the target's name when it is well formed."""
        if not targets:
            self.ctx.error(
                "transition-missing-target",
                "`transition` needs a target: `transition to @subagent.name`.",
                span,
            )
            return None
        if len(targets) > 1:
            self.ctx.error(
                "transition-multiple-targets",
                "`transition` takes exactly one target; use `if` to choose between several.",
                targets[1].span,
            )
        target = targets[0]
        path = reference_path(target)
        if path is None or len(path) != 2 or path[0] not in schema.TRANSITION_NAMESPACES:
            self.ctx.error(
                "invalid-transition-target",
                "A transition goes to a subagent: `@subagent.name` (or @topic, @start_agent, "
                "@connected_subagent).",
                target.span,
            )
            if path is None:
                self.exprs.check(target, scope)
            return None
        self.exprs.resolve(path, target.span, scope)
        return path[1]

    # ------------------------------------------------------------ reasoning actions

    def binding(self, node: SubagentInfo, entry: Entry) -> None:
        """Resolve the reasoning action ``entry`` of ``node`` (filling its ToolBinding) and
        check its body."""
        name = str(entry.key)
        tool = node.tools[name]
        scope = Scope(node=node)
        ctx = self.ctx
        value = entry.value
        if not isinstance(value, ExprValue):
            ctx.error(
                "missing-action-reference",
                f"Reasoning action '{name}' needs a target: `{name}: @actions.X`, "
                "`@utils.transition to @subagent.Y`, `@utils.setVariables`, ...",
                entry.key.span,
            )
            self._binding_body(tool, entry, "binding", scope, None)
            return
        path = reference_path(value.expr)
        inputs: dict[str, ParamInfo] | None = None
        outputs: dict[str, ParamInfo] | None = None
        mode = "binding"
        owner: str | None = None
        if path is None or len(path) != 2:
            ctx.error(
                "invalid-action-reference",
                f"'{name}' must bind @actions.X, @utils.transition/setVariables/escalate/"
                "end_session, @subagent.X or @connected_subagent.X.",
                value.expr.span,
            )
            self.exprs.check(value.expr, scope)
        else:
            ns, member = path
            if ns == "actions":
                tool.kind = "action"
                action = node.actions.get(member)
                if action is None:
                    ctx.error(
                        "undefined-reference",
                        f"'{member}' is not an action defined in subagent '{node.name}'."
                        f"{suggest(member, node.actions)}",
                        value.expr.span,
                    )
                else:
                    tool.target = member
                    inputs, outputs, owner = action.inputs, action.outputs, member
            elif ns == "utils":
                kinds = {
                    "transition": "transition",
                    "setVariables": "set_variables",
                    "escalate": "escalate",
                    "end_session": "end_session",
                }
                self.exprs.resolve(path, value.expr.span, scope)
                kind = kinds.get(member)
                tool.kind = kind  # type: ignore[assignment]
                if kind == "set_variables":
                    mode = "set_variables"
                if kind == "transition":
                    tool.target = self.transition(
                        [value.to] if value.to is not None else [], entry.key.span, scope
                    )
            elif ns in schema.NODE_NAMESPACES:
                tool.kind = "delegate"
                tool.target = member
                self.exprs.resolve(path, value.expr.span, scope)
            elif ns == "connected_subagent":
                tool.kind = "connected"
                tool.target = member
                self.exprs.resolve(path, value.expr.span, scope)
                connected = ctx.outline.connected_subagents.get(member)
                if connected is not None:
                    inputs, owner = connected.inputs, member
            else:
                ctx.error(
                    "invalid-action-reference",
                    f"'@{ns}.{member}' cannot be bound as a reasoning action; bind @actions.X, "
                    "@utils.*, @subagent.X or @connected_subagent.X.",
                    value.expr.span,
                )
            if value.to is not None and tool.kind != "transition":
                ctx.error(
                    "unexpected-transition-target",
                    "`to` is only used with @utils.transition.",
                    value.to.span,
                )
        inner = scope.with_outputs(owner, outputs) if tool.kind == "action" else scope
        self._binding_body(tool, entry, mode, inner, inputs if owner else None)
        if tool.kind in ("action", "connected") and inputs is not None and owner is not None:
            provided = set(tool.inputs)
            for param, info in inputs.items():
                if param in provided or info.default is not None or info.is_required is False:
                    continue
                # Our runtime lets the LLM fill unbound inputs, connected agents included.
                ctx.info(
                    "action-missing-input",
                    f"Input '{param}' of '{owner}' has no `with` clause; the LLM will fill it in.",
                    value.expr.span,
                )

    def _binding_body(
        self,
        tool: ToolBinding,
        entry: Entry,
        mode: str,
        scope: Scope,
        inputs: dict[str, ParamInfo] | None,
    ) -> None:
        block = entry.block
        if block is None:
            return
        tool.body = block
        ctx = self.ctx
        for item in block.items:
            if isinstance(item, Entry):
                key = str(item.key)
                if key not in ("description", "label"):
                    ctx.error(
                        "unknown-field",
                        f"Unknown field '{key}' in a reasoning action; allowed fields are "
                        f"description and label.{suggest(key, ('description', 'label'))}",
                        item.key.span,
                    )
                    continue
                self.structure.value(item, schema.S, key)
                text = string_of(item)
                setattr(tool, key, text)
                if isinstance(item.value, Template):
                    self.template(item.value, scope)
            elif isinstance(item, AvailableWhenStmt):
                tool.available_when.append(item.condition)
                if len(tool.available_when) == 2:
                    ctx.warning(
                        "multiple-available-when",
                        "Only the last `available when` applies; combine the conditions with "
                        "`and`.",
                        item.span,
                    )
            elif isinstance(item, WithStmt):
                for binding in item.bindings:
                    tool.inputs[binding.param] = binding.value
                    if mode == "set_variables":
                        self._set_variables_param(binding.param, binding.span)
                    elif inputs is not None and tool.target is not None:
                        self._input(tool.target, inputs, binding.param, binding.value, binding.span)
        # Statements (with/set/run/if/transition/available when) in order.
        statements = Block(block.span, [i for i in block.items if not isinstance(i, Entry)])
        self.procedure(statements, mode, scope, in_if=False)

    def _set_variables_param(self, param: str, span: Span) -> None:
        var = self.variables.get(param)
        if var is None:
            self.ctx.error(
                "set-variables-unknown-variable",
                f"'{param}' is not a declared variable; @utils.setVariables can only assign "
                f"declared variables.{suggest(param, self.variables)}",
                span,
            )
            return
        self.ctx.used_variables.add(param)
        if not var.is_mutable:
            self.ctx.error(
                "set-variables-immutable-target",
                f"'{param}' is {'linked' if var.is_linked else 'not mutable'}; "
                "@utils.setVariables can only assign `mutable` variables.",
                span,
            )


def _always_transitions(item: Item) -> bool:
    if isinstance(item, TransitionStmt):
        return True
    if isinstance(item, IfStmt) and item.else_clause is not None:
        bodies = [item.body, *(b.body for b in item.else_ifs), item.else_clause.body]
        return all(any(_always_transitions(s) for s in body.items) for body in bodies)
    return False


def _item_text(item: Entry | SequenceItem) -> str:
    return str(item.key) if isinstance(item, Entry) else "-"


__all__ = ["EllipsisExpr", "ProcedureChecker"]
