"""Expression checks: `@namespace.member` resolution, bare identifiers, functions, operators."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from agentscript.check import schema
from agentscript.check.context import Context, suggest
from agentscript.check.outline import ParamInfo, SubagentInfo
from agentscript.diagnostics import Span
from agentscript.expr.nodes import (
    AtName,
    Binary,
    Call,
    Compare,
    DictExpr,
    EllipsisExpr,
    ErrorExpr,
    Expr,
    Index,
    ListExpr,
    Literal,
    Member,
    Name,
    Spread,
    Ternary,
    Unary,
    reference_path,
)

_KNOWN_NAMESPACES = (
    "variables",
    "actions",
    "subagent",
    "topic",
    "start_agent",
    "connected_subagent",
    "utils",
    "system_variables",
    "knowledge",
    "outputs",
    "inputs",
    "response_formats",
    "response_actions",
    *schema.CONTEXT_SOURCES,
)


@dataclass(slots=True, frozen=True)
class Scope:
    """Where an expression sits, which decides what its references may name."""

    node: SubagentInfo | None = None
    # Outputs of the action whose callback we are in; None outside callbacks.
    outputs: dict[str, ParamInfo] | None = None
    outputs_owner: str | None = None
    # Inside a callback whose action could not be resolved: @outputs is not checked.
    unknown_outputs: bool = False
    connection_inputs: frozenset[str] | None = None
    in_connection: bool = False
    # Inside `{!...}` of a template: `@actions.x` renders a tool name there, not a value.
    in_template: bool = False

    def with_outputs(self, owner: str | None, outputs: dict[str, ParamInfo] | None) -> Scope:
        """This scope inside the callback of ``owner``; ``outputs`` None means the action is
        unknown, so ``@outputs`` goes unchecked there."""
        return replace(self, outputs=outputs, outputs_owner=owner, unknown_outputs=outputs is None)

    def for_template(self) -> Scope:
        return replace(self, in_template=True)


class ExprChecker:
    """Checks expressions against the outline; one instance per check run."""

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        outline = ctx.outline
        self.variables = outline.variables
        self.nodes = outline.subagents
        self.connected = outline.connected_subagents

    # ------------------------------------------------------------ walking

    def check(self, expr: Expr, scope: Scope, *, allow_ellipsis: bool = False) -> None:
        """Report every unresolved reference and unsupported construct in ``expr``;
        ``allow_ellipsis`` where ``...`` (the LLM fills it in) is a valid value."""
        if isinstance(expr, EllipsisExpr):
            if not allow_ellipsis:
                self.ctx.error(
                    "unexpected-ellipsis",
                    "'...' is only meaningful as a `with` value (the LLM fills it in); "
                    "write a value here.",
                    expr.span,
                )
            return
        self._walk(expr, scope)

    def _walk(self, expr: Expr, scope: Scope) -> None:
        # Recursive: the depth is bounded by the parser's nesting limit (expr.parser.MAX_DEPTH).
        if isinstance(expr, Literal | ErrorExpr):
            return
        if isinstance(expr, Member | AtName):
            parts = reference_path(expr)
            if parts is not None:
                self._value_reference(parts, expr.span, scope)
                self.resolve(parts, expr.span, scope)
                return
            assert isinstance(expr, Member)
            self._walk(expr.obj, scope)
            return
        if isinstance(expr, Index):
            self._walk(expr.obj, scope)
            self._walk(expr.index, scope)
            return
        if isinstance(expr, Name):
            self._bare_identifier(expr)
            return
        if isinstance(expr, Binary):
            if expr.op in ("*", "/") and self.ctx.agentforce:
                self.ctx.error(
                    "unsupported-operator",
                    f"Operator '{expr.op}' is not supported by Agentforce (only + - comparisons "
                    "and/or/not); compute the value in an action, or use "
                    "`# @dialect: agentscript`.",
                    expr.span,
                )
            self._walk(expr.left, scope)
            self._walk(expr.right, scope)
            return
        if isinstance(expr, Compare):
            self._walk(expr.left, scope)
            for item in expr.comparators:
                self._walk(item, scope)
            return
        if isinstance(expr, Unary):
            self._walk(expr.operand, scope)
            return
        if isinstance(expr, Call):
            self._call(expr, scope)
            return
        if isinstance(expr, Ternary):
            self._walk(expr.body, scope)
            self._walk(expr.condition, scope)
            self._walk(expr.orelse, scope)
            return
        if isinstance(expr, ListExpr):
            for item in expr.items:
                self._walk(item.value if isinstance(item, Spread) else item, scope)
            return
        if isinstance(expr, DictExpr):
            for key in expr.keys:
                # Dict keys may be bare identifiers: `{name: "x"}`.
                if not isinstance(key, Name):
                    self._walk(key, scope)
            for value in expr.values:
                self._walk(value, scope)
            return
        if isinstance(expr, Spread):
            self.ctx.error(
                "invalid-spread-context",
                "'*' spread is only allowed in function arguments and list items.",
                expr.span,
            )
            self._walk(expr.value, scope)
            return
        if isinstance(expr, EllipsisExpr):
            self.check(expr, scope)

    def _call(self, expr: Call, scope: Scope) -> None:
        func = expr.func
        if isinstance(func, Name):
            if func.name not in schema.FUNCTIONS:
                self.ctx.error(
                    "unknown-function",
                    f"Unknown function '{func.name}'; only len(), min() and max() are "
                    f"available.{suggest(func.name, schema.FUNCTIONS)}",
                    func.span,
                )
        elif reference_path(func) is not None:
            self.ctx.error(
                "namespace-function-call",
                "References cannot be called; only len(), min() and max() are functions.",
                func.span,
            )
        else:
            self.ctx.error(
                "indirect-function-call",
                "Method calls are not supported; only len(), min() and max() are functions.",
                func.span,
            )
            self._walk(func, scope)
        for arg in expr.args:
            self._walk(arg.value if isinstance(arg, Spread) else arg, scope)

    def _bare_identifier(self, expr: Name) -> None:
        name = expr.name
        lowered = name.lower()
        if lowered in ("true", "false"):
            self.ctx.error(
                "identifier-confusable-boolean",
                f"'{name}' is not a boolean; write {lowered.capitalize()}.",
                expr.span,
            )
        elif lowered == "none":
            self.ctx.error(
                "identifier-confusable-none", f"'{name}' is not None; write None.", expr.span
            )
        elif lowered == "null":
            self.ctx.error(
                "null-not-allowed", "'null' is not a value in Agent Script; write None.", expr.span
            )
        else:
            hint = (
                f" Did you mean '@variables.{name}'?"
                if name in self.variables
                else " Reference values with @variables.name, @outputs.name, ..."
            )
            self.ctx.error("unknown-identifier", f"Unknown identifier '{name}'.{hint}", expr.span)

    # ------------------------------------------------------------ references

    def _value_reference(self, parts: tuple[str, ...], span: Span, scope: Scope) -> None:
        """References that name things rather than hold values (official compiler errors)."""
        ns = parts[0]
        if ns == "actions" and not scope.in_template and len(parts) > 1:
            self.ctx.error(
                "invalid-reference-context",
                f"'@actions.{parts[1]}' names an action and has no value here; run it with "
                f"`run @actions.{parts[1]}`, offer it as a tool, or write "
                f"`{{!@actions.{parts[1]}}}` in text for its tool name.",
                span,
            )
        elif ns in schema.NODE_NAMESPACES and scope.in_template and len(parts) > 1:
            self.ctx.error(
                "invalid-reference-context",
                f"'@{ns}.{parts[1]}' cannot be written into text; name the subagent in words, "
                f"or use `{{!@actions.<tool>}}` for the tool that goes there.",
                span,
            )

    def resolve(self, parts: tuple[str, ...], span: Span, scope: Scope) -> None:
        """Check the reference ``@parts[0].parts[1]...`` in ``scope``; a variable it names
        counts as used."""
        ns = parts[0]
        if len(parts) == 1:
            self.ctx.error(
                "undefined-reference",
                f"'@{ns}' needs a member, like '@{ns}.name'.",
                span,
            )
            return
        member = parts[1]
        ctx = self.ctx
        if ns == "variables":
            if member in self.variables:
                ctx.used_variables.add(member)
            else:
                self._undefined(ns, member, self.variables, span)
        elif ns == "actions":
            node = scope.node
            if node is None:
                ctx.error(
                    "undefined-reference",
                    f"'@actions.{member}' can only be used inside a subagent.",
                    span,
                )
            elif member not in node.actions and member not in node.tools:
                self._undefined(ns, member, [*node.actions, *node.tools], span)
        elif ns in schema.NODE_NAMESPACES:
            if member not in self.nodes:
                self._undefined(ns, member, self.nodes, span)
        elif ns == "connected_subagent":
            if member not in self.connected:
                self._undefined(ns, member, self.connected, span)
        elif ns == "utils":
            if member not in schema.UTILS:
                self._undefined(ns, member, schema.UTILS, span)
        elif ns == "system_variables":
            if member not in schema.SYSTEM_VARIABLES:
                self._undefined(ns, member, schema.SYSTEM_VARIABLES, span)
            else:
                subs = schema.SYSTEM_VARIABLES[member]
                if subs is not None and len(parts) > 2 and parts[2] not in subs:
                    self._undefined(f"system_variables.{member}", parts[2], subs, span)
        elif ns == "knowledge":
            if member not in ctx.outline.knowledge:
                if not ctx.has_knowledge:
                    ctx.error(
                        "undefined-reference",
                        f"'@knowledge.{member}' needs a top-level 'knowledge' block "
                        f"defining '{member}'.",
                        span,
                    )
                else:
                    self._undefined(ns, member, ctx.outline.knowledge, span)
        elif ns == "outputs":
            self._outputs(member, span, scope)
        elif ns == "inputs":
            if scope.connection_inputs is None:
                ctx.error(
                    "undefined-reference",
                    "'@inputs' can only be used inside a connection block.",
                    span,
                )
            elif member not in scope.connection_inputs:
                self._undefined(ns, member, scope.connection_inputs, span)
        elif ns in ("response_formats", "response_actions"):
            if not scope.in_connection:
                ctx.error(
                    "undefined-reference",
                    f"'@{ns}' can only be used inside a connection block.",
                    span,
                )
        elif ns in schema.CONTEXT_SOURCES:
            members = schema.CONTEXT_SOURCES[ns]
            if member not in members:
                self._undefined(ns, member, members, span)
        else:
            ctx.error(
                "undefined-reference",
                f"'@{ns}' is not a recognized namespace.{suggest(ns, _KNOWN_NAMESPACES)}",
                span,
            )

    def _outputs(self, member: str, span: Span, scope: Scope) -> None:
        if scope.outputs is None:
            if scope.unknown_outputs:
                return
            self.ctx.error(
                "undefined-reference",
                f"'@outputs.{member}' is only available in the callback of an action "
                "(the block under `run` or a reasoning action).",
                span,
            )
        elif member not in scope.outputs:
            self.ctx.error(
                "action-unknown-output",
                f"'{member}' is not a defined output of action '{scope.outputs_owner}'."
                f"{suggest(member, scope.outputs)}",
                span,
            )

    def _undefined(self, ns: str, member: str, candidates: Iterable[str], span: Span) -> None:
        self.ctx.error(
            "undefined-reference",
            f"'{member}' is not defined in @{ns}.{suggest(member, candidates)}",
            span,
        )
