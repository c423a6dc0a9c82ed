"""Whole-agent rules: variables, unused variables, action targets, and the Salesforce-org rules
of the agentforce dialect (agent name and user, linked sources, hyperclassifier, messages)."""

from __future__ import annotations

import re

from agentscript.check import schema
from agentscript.check.context import Context, closest
from agentscript.check.structure import Jobs
from agentscript.check.values import is_none, string_of
from agentscript.diagnostics import Span
from agentscript.expr.nodes import Expr, Member, reference_path
from agentscript.syntax.tree import Entry, ExprValue, Template

_URI = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):(//)?(\S*)$")


def run_rules(ctx: Context, jobs: Jobs) -> None:
    """The whole-agent rules, once the outline is complete (the org rules only in agentforce)."""
    _variables(ctx, jobs)
    _action_targets(ctx, jobs)
    _connected_targets(ctx, jobs)
    _nodes(ctx, jobs)
    if ctx.agentforce:
        _config(ctx, jobs)
        _system_messages(ctx, jobs)
        _connections(ctx, jobs)


def _variables(ctx: Context, jobs: Jobs) -> None:
    for name, info in ctx.outline.variables.items():
        entry, props = jobs.variable_entries[name]
        span = entry.key.span
        if ctx.agentforce:
            _af_variable_name(ctx, name, entry)
        source = props.get("source")
        if info.is_mutable and source is not None:
            ctx.error(
                "mutable-variable-cannot-have-source",
                f"Mutable variable '{name}' cannot have a source; only linked variables do. "
                "Remove `source:` or make it `linked`.",
                source.key.span,
            )
        if source is not None and isinstance(source.value, ExprValue):
            path = reference_path(source.value.expr)
            if path is not None and path[0] not in schema.CONTEXT_SOURCES:
                meant = closest(path[0], schema.CONTEXT_SOURCES)
                hint = f" Did you mean '@{meant}'?" if meant else ""
                ctx.org_error(
                    "constraint-allowed-namespaces",
                    f"'source' must reference @MessagingSession, @MessagingEndUser or "
                    f"@VoiceCall, not '@{path[0]}'.{hint}",
                    _namespace_span(source.value.expr),
                )
        if not info.is_linked:
            continue
        if source is None:
            ctx.org_error(
                "linked-variable-missing-source",
                f"Linked variable '{name}' needs a source, e.g. `source: @MessagingSession.Id`.",
                span,
            )
        if info.type.startswith("list"):
            ctx.error(
                "linked-variable-cannot-be-list",
                f"Linked variable '{name}' cannot be a list; make it `mutable`.",
                span,
            )
        if info.type == "object":
            ctx.error(
                "linked-variable-cannot-be-object",
                f"Linked variable '{name}' cannot be an object; make it `mutable`.",
                span,
            )
        if info.default is not None:
            ctx.error(
                "linked-variable-cannot-have-default",
                f"Linked variable '{name}' gets its value from the caller; remove the default.",
                info.default.span,
            )


def _af_variable_name(ctx: Context, name: str, entry: Entry) -> None:
    problem = None
    custom = name.endswith("__c")
    stem = name[:-3] if custom else name
    if name.startswith("_"):
        problem = "cannot start with an underscore"
    elif name.endswith("_") and not custom:
        problem = "cannot end with an underscore (except the __c suffix)"
    elif "__" in stem:
        problem = "cannot contain consecutive underscores (except the __c suffix)"
    if problem:
        ctx.error("invalid-variable-name", f"Variable name '{name}' {problem}.", entry.key.span)


def _action_targets(ctx: Context, jobs: Jobs) -> None:
    for action, entry in jobs.action_targets:
        target = action.target
        if target is None:
            continue
        span, match = _target_uri(target, entry)
        if match is None:
            ctx.error(
                "invalid-action-target",
                f"Action '{action.name}' has an invalid target \"{target}\"; write a URI like "
                '"flow://Name", "apex://Class" or "python://module:function".',
                span,
            )
            continue
        scheme = match.group(1).lower()
        if scheme == "placeholder":
            ctx.warning(
                "placeholder-action-target",
                f"Action '{action.name}' has a placeholder target; it runs as a stub until "
                "you give it a real implementation.",
                span,
            )
        elif scheme not in schema.AGENTFORCE_SCHEMES and scheme not in schema.RUNTIME_SCHEMES:
            message = (
                f"Action '{action.name}' uses an unsupported target scheme '{scheme}://'. "
                "Use flow://, apex://, standardInvocableAction://, ... or this runtime's "
                "python://, http(s)://, mcp://."
            )
            if ctx.agentforce:
                ctx.error("invalid-action-target", message, span)
            else:
                ctx.warning("invalid-action-target", message, span)


def _target_uri(target: str, entry: Entry) -> tuple[Span, re.Match[str] | None]:
    """Where diagnostics about ``entry``'s target go, and the target's URI match (None unless
    it is ``scheme:`` followed by something)."""
    span = entry.value.span if entry.value is not None else entry.key.span
    match = _URI.match(target.strip())
    return span, match if match is not None and match.group(3) else None


def _connected_targets(ctx: Context, jobs: Jobs) -> None:
    for info, entry in jobs.connected_targets:
        target = info.target
        if target is None:
            continue
        span, match = _target_uri(target, entry)
        if match is None:
            ctx.error(
                "invalid-connected-subagent-target",
                f"connected_subagent '{info.name}' needs a target URI like \"agent://Name\".",
                span,
            )
        elif match.group(1).lower() not in ("agent", "agentforce"):
            ctx.org_error(
                "connected-agent-unsupported-scheme",
                f"connected_subagent '{info.name}' must use agent:// or agentforce://.",
                span,
            )


def _nodes(ctx: Context, jobs: Jobs) -> None:
    for node, _entry in jobs.node_entries:
        model = node.model_config.model if node.model_config else None
        if model != schema.HYPERCLASSIFIER_MODEL or not ctx.agentforce:
            continue
        for tool in node.tools.values():
            if tool.kind != "transition":
                ctx.error(
                    "hyperclassifier-non-transition",
                    "Only @utils.transition reasoning actions are allowed with the "
                    f"hyperclassifier model ({model}).",
                    tool.span,
                )
        for hook in ("before_reasoning", "after_reasoning"):
            block = getattr(node, hook)
            if block is not None and block.items:
                ctx.error(
                    f"hyperclassifier-{hook.replace('_', '-')}",
                    f"{hook} is not allowed with the hyperclassifier model; use reasoning."
                    "instructions or action callbacks instead.",
                    block.span,
                )


def _config(ctx: Context, jobs: Jobs) -> None:
    root = jobs.root_fields
    config_entry = root.get("config")
    fields = jobs.config_fields
    if config_entry is None:
        ctx.error(
            "config-missing-agent-name",
            "Agentforce agents need a `config:` block with `developer_name` (or `agent_name`).",
            Span(1, 1, 1, 2),
        )
        return
    span = config_entry.key.span
    has_developer = _filled(string_of(fields.get("developer_name")))
    has_agent = _filled(string_of(fields.get("agent_name")))
    if not has_developer and not has_agent:
        ctx.error(
            "config-missing-agent-name",
            "config needs `developer_name` (or `agent_name`): the agent's API name.",
            span,
        )
    elif has_developer and has_agent:
        ctx.error(
            "config-duplicate-agent-name",
            "Set only one of `developer_name` and `agent_name`.",
            span,
        )
    access = jobs.access_fields
    config_user, access_user = fields.get("default_agent_user"), access.get("default_agent_user")
    if config_user is not None and access_user is not None:
        ctx.warning(
            "config-default-agent-user-conflict",
            "default_agent_user is set in both config and access; access wins. Remove the "
            "config one.",
            config_user.key.span,
        )
    agent_type = string_of(fields.get("agent_type"))
    lowered = (agent_type or "").strip().lower()
    if agent_type and lowered not in schema.ALLOWED_AGENT_TYPES:
        ctx.error(
            "agent-type-not-allowed",
            f"'{agent_type}' is not a supported agent_type (e.g. AgentforceServiceAgent, "
            "AgentforceEmployeeAgent).",
            fields["agent_type"].value.span if fields["agent_type"].value else span,
        )
    employee = lowered in ("agentforceemployeeagent", "agentforce employee agent")
    if not employee:
        for item in (config_user, access_user):
            if is_none(item):
                assert item is not None
                ctx.error(
                    "config-invalid-default-agent-user-none",
                    "default_agent_user may only be None for AgentforceEmployeeAgent.",
                    item.key.span,
                )
        prompts = jobs.system_fields.get("recommended_prompts")
        if prompts is not None:
            ctx.error(
                "recommended-prompts-agent-type",
                "recommended_prompts is only supported for AgentforceEmployeeAgent.",
                prompts.key.span,
            )
    service = lowered in ("agentforceserviceagent", "agentforce service agent")
    if service and not _filled(string_of(config_user)) and not _filled(string_of(access_user)):
        ctx.error(
            "config-missing-default-agent-user",
            f"default_agent_user is required for {agent_type} agents; add "
            '`default_agent_user: "user@example.com"` to the access (or config) block.',
            span,
        )
    disabled = fields.get("additional_parameter__disable_graph_runtime")
    if disabled is not None:
        ctx.error(
            "disabled-additional-parameter",
            "additional_parameter__disable_graph_runtime is not allowed; remove it.",
            disabled.key.span,
        )


def _filled(text: str | None) -> bool:
    """Whether a string field holds more than blanks."""
    return bool(text and text.strip())


def _system_messages(ctx: Context, jobs: Jobs) -> None:
    variables = ctx.outline.variables
    for entry in jobs.messages:
        value = entry.value
        if not isinstance(value, Template):
            continue
        for part in value.parts:
            if isinstance(part, str):
                continue
            path = reference_path(part.expr)
            if path is None or path[0] != "variables" or len(path) < 2:
                continue
            info = variables.get(path[1])
            if info is None or info.is_linked:
                continue
            if (info.visibility or "").lower() == "external":
                continue
            ctx.error(
                "system-message-mutable-variable",
                f"Variable '{path[1]}' is {info.modifier or 'unmodified'} and cannot be used in "
                f"{entry.key.kind} messages; only linked variables and variables with "
                "`visibility: External` are available there.",
                part.expr.span,
            )


def unused_variables(ctx: Context) -> None:
    """An info for each declared variable no expression or setVariables refers to."""
    used = ctx.used_variables
    for name, info in ctx.outline.variables.items():
        if name not in used:
            ctx.info(
                "unused-variable",
                f"Variable '{name}' is declared but never used.",
                info.span,
            )


_CONNECTION_FIELDS = (
    "escalation_message",
    "outbound_route_type",
    "outbound_route_name",
    "adaptive_response_allowed",
)


def _connections(ctx: Context, jobs: Jobs) -> None:
    """Channel rules of Agentforce connections (messaging, service_email, slack)."""
    for name, entry, found in jobs.connections:
        span = entry.key.span
        if name == "slack":
            for key in _CONNECTION_FIELDS[:3]:
                if key in found:
                    ctx.error(
                        "connection-disallowed-field",
                        f"Slack connections do not support {key}; remove it.",
                        found[key].key.span,
                    )
            continue
        if name not in ("messaging", "service_email"):
            continue
        if not any(key in found for key in _CONNECTION_FIELDS):
            ctx.error(
                "connection-missing-required-fields",
                f"{name} connections need escalation_message, outbound_route_type and "
                "outbound_route_name (or adaptive_response_allowed).",
                span,
            )
            continue
        if name == "service_email" and "escalation_message" in found:
            ctx.error(
                "connection-disallowed-field",
                "Service email connections do not support escalation_message; remove it.",
                found["escalation_message"].key.span,
            )
        if ("outbound_route_name" in found) != ("outbound_route_type" in found):
            missing = (
                "outbound_route_type" if "outbound_route_name" in found else "outbound_route_name"
            )
            ctx.error(
                "connection-missing-paired-field",
                f"{name} connections need both outbound_route_name and outbound_route_type; "
                f"add {missing}.",
                span,
            )


def _namespace_span(expr: Expr) -> Span:
    """The ``@namespace`` part of a reference: what a wrong namespace should underline."""
    node = expr
    while isinstance(node, Member):
        node = node.obj
    return node.span
