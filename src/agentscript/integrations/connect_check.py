"""``validate --connect``: check the actions that target MCP servers against the servers.

In: an ``.agent`` file or a Mantle project folder, and the ``agentscript.toml`` that applies
to it. Out: diagnostics at the action's line (the import's line for Mantle) and one summary
line per server listing its tools. Each server is asked once for its tool list.

Codes: ``config-error`` (agentscript.toml), ``mcp-unknown-server``, ``mcp-unreachable``,
``mcp-unknown-tool``, ``mcp-duplicate-tool`` (a tool name the server lists more than once:
an error at each use of it, a warning at the server's first use for the others),
``mcp-missing-input`` (a required tool argument the action does not declare),
``mcp-unknown-input`` (an action input the tool does not take), ``mcp-type-mismatch``
(declared type against the JSON schema type), ``mcp-unknown-output`` (an output the tool's
output schema does not have; warning). Nothing here raises on a bad server or file.

Names a server supplies (tools, inputs, outputs, schema types) are printed escaped (control,
format and bidi characters as ``\\uXXXX``, :func:`agentscript.printable.printable_name`), each
cut at :data:`MAX_NAME_CHARS`, and lists of them cut at :data:`MAX_LISTED` names: a server must
not rewrite or flood the terminal. A tool list names each tool once, an empty name as ``''``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentscript.actions.registry import ActionError
from agentscript.check.outline import ActionDef, ParamInfo
from agentscript.diagnostics import Diagnostic, Severity, Span
from agentscript.integrations.config import (
    ConfigError,
    IntegrationConfig,
    load_integration_config,
)
from agentscript.integrations.mcp_client import McpHub, McpTool, parse_target
from agentscript.printable import printable_name

MAX_NAME_CHARS = 80
MAX_LISTED = 30

# Agent Script types -> the JSON schema types that accept their values.
_JSON_TYPES: dict[str, frozenset[str]] = {
    "string": frozenset({"string"}),
    "id": frozenset({"string"}),
    "date": frozenset({"string"}),
    "datetime": frozenset({"string"}),
    "time": frozenset({"string"}),
    "timestamp": frozenset({"string"}),
    "number": frozenset({"number", "integer"}),
    "currency": frozenset({"number", "integer"}),
    "integer": frozenset({"integer", "number"}),
    "long": frozenset({"integer", "number"}),
    "boolean": frozenset({"boolean"}),
    "object": frozenset({"object"}),
    "list": frozenset({"array"}),
}


@dataclass
class ConnectReport:
    diagnostics: list[Diagnostic] = field(default_factory=list)
    servers: list[str] = field(default_factory=list)  # one summary line per server


@dataclass(frozen=True, slots=True)
class _Use:
    """One use of an MCP tool: by an Agent Script action or a Mantle import."""

    server: str
    tool: str
    span: Span
    file: str
    action: ActionDef | None = None


def connect_check(path: Path, *, hub: McpHub | None = None) -> ConnectReport:
    report = ConnectReport()
    report.diagnostics.extend(openapi_diagnostics(path))
    uses = _uses(path, report)
    if not uses:
        return report
    try:
        config = load_integration_config(start=path if path.is_dir() else path.parent)
    except ConfigError as exc:
        report.diagnostics.append(_diag("config-error", str(exc), uses[0]))
        return report
    own_hub = hub is None
    hub = hub or McpHub(config.mcp_servers)
    try:
        _check_uses(uses, config, hub, report)
    finally:
        if own_hub:
            hub.close()
    return report


def _check_uses(
    uses: list[_Use], config: IntegrationConfig, hub: McpHub, report: ConnectReport
) -> None:
    tools: dict[str, dict[str, McpTool] | None] = {}
    repeated: dict[str, dict[str, int]] = {}  # per server: the tool names listed more than once
    for use in uses:
        if use.server not in config.mcp_servers:
            known = ", ".join(sorted(config.mcp_servers)) or "none"
            report.diagnostics.append(
                _diag(
                    "mcp-unknown-server",
                    f"MCP server '{use.server}' is not declared in agentscript.toml; "
                    f"add [mcp.servers.{use.server}] (declared: {known})",
                    use,
                )
            )
            continue
        if use.server not in tools:
            listed = _list(hub, config, use, report)
            tools[use.server] = None if listed is None else {t.name: t for t in listed}
            if listed is not None:
                repeated[use.server] = _repeated(t.name for t in listed)
                used = {u.tool for u in uses if u.server == use.server}
                report.diagnostics.extend(_unused_repeats(repeated[use.server], used, use))
        by_name = tools[use.server]
        if by_name is None:
            continue
        tool = by_name.get(use.tool)
        if tool is None:
            report.diagnostics.append(
                _diag(
                    "mcp-unknown-tool",
                    f"MCP server '{use.server}' has no tool '{use.tool}'; "
                    f"it has: {_listing(by_name, 'none')}",
                    use,
                )
            )
            continue
        if use.tool in repeated[use.server]:
            report.diagnostics.append(
                _diag(
                    "mcp-duplicate-tool",
                    f"MCP server '{use.server}' lists tool '{_shown(use.tool)}' "
                    f"{repeated[use.server][use.tool]} times: which one a call runs is the "
                    "server's choice, and the schema checked here is the last one listed; "
                    "tool names must be unique: rename the server's tools",
                    use,
                )
            )
        if use.action is not None:
            report.diagnostics.extend(_schema_problems(use, tool))


def _list(
    hub: McpHub, config: IntegrationConfig, use: _Use, report: ConnectReport
) -> list[McpTool] | None:
    """The server's tools as listed (its summary line added), or None when it cannot be
    reached (reported at ``use``)."""
    server = config.mcp_servers[use.server]
    try:
        listed = hub.list_tools_blocking(use.server)
    except ActionError as exc:
        report.diagnostics.append(_diag("mcp-unreachable", str(exc), use))
        report.servers.append(f"mcp server '{use.server}' ({server.describe()}): unreachable")
        return None
    names = _listing(dict.fromkeys(t.name for t in listed), "no tools", sort=False)
    report.servers.append(
        f"mcp server '{use.server}' ({server.transport}: {server.describe()}): {names}"
    )
    return listed


def _repeated(names: Iterable[str]) -> dict[str, int]:
    """The names given more than once, with how many times, in the order first given."""
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    return {name: n for name, n in counts.items() if n > 1}


def _unused_repeats(repeated: dict[str, int], used: set[str], use: _Use) -> list[Diagnostic]:
    """One warning, at the server's first use, naming the tools it lists more than once that
    the agent does not use (a use of such a tool is an error at that use)."""
    unused = [name for name in repeated if name not in used]
    if not unused:
        return []
    return [
        _diag(
            "mcp-duplicate-tool",
            f"MCP server '{use.server}' lists more than once: {_listing(unused, '', sort=False)}; "
            "tool names must be unique: rename the server's tools",
            use,
            severity=Severity.WARNING,
        )
    ]


def _schema_problems(use: _Use, tool: McpTool) -> list[Diagnostic]:
    action = use.action
    assert action is not None
    problems: list[Diagnostic] = []
    where = f"action '{action.name}'"
    properties = _mapping(tool.input_schema.get("properties"))
    required = tool.input_schema.get("required")
    tool_name = _shown(tool.name)
    for name in required if isinstance(required, list) else []:
        if isinstance(name, str) and name not in action.inputs:
            problems.append(
                _diag(
                    "mcp-missing-input",
                    f"{where}: tool '{tool_name}' requires input '{_shown(name)}'; "
                    "declare it under inputs:",
                    use,
                )
            )
    for name, param in action.inputs.items():
        schema = properties.get(name)
        if schema is None:
            if properties or tool.input_schema.get("additionalProperties") is False:
                problems.append(
                    _diag(
                        "mcp-unknown-input",
                        f"{where}: tool '{tool_name}' takes no input '{name}'; "
                        f"it takes: {_listing(properties, 'nothing')}",
                        use,
                        param.span,
                    )
                )
            continue
        mismatch = _type_mismatch(param, schema)
        if mismatch:
            problems.append(
                _diag("mcp-type-mismatch", f"{where}: input {mismatch}", use, param.span)
            )
    out_properties = (tool.output_schema or {}).get("properties")
    if isinstance(out_properties, dict) and not (tool.output_schema or {}).get(
        "additionalProperties"
    ):
        out_properties = _mapping(out_properties)
        for name, param in action.outputs.items():
            schema = out_properties.get(name)
            if schema is None:
                problems.append(
                    _diag(
                        "mcp-unknown-output",
                        f"{where}: tool '{tool_name}' returns no output '{name}'; "
                        f"it returns: {_listing(out_properties, 'nothing')}",
                        use,
                        param.span,
                        Severity.WARNING,
                    )
                )
            elif mismatch := _type_mismatch(param, schema):
                problems.append(
                    _diag("mcp-type-mismatch", f"{where}: output {mismatch}", use, param.span)
                )
    return problems


def _type_mismatch(param: ParamInfo, schema: Any) -> str | None:
    """A message when the declared type cannot hold what the schema describes."""
    if not isinstance(schema, dict):
        return None
    declared = param.type.strip().lower()
    base = "list" if declared.startswith("list") else declared
    accepted = _JSON_TYPES.get(base)
    json_type = schema.get("type")
    listed = json_type if isinstance(json_type, list) else [json_type]
    types = {t for t in listed if isinstance(t, str)}
    types.discard("null")
    if accepted is None or not types or types & accepted:
        return None
    return (
        f"'{param.name}' is declared {param.type} but the tool's schema says "
        f"{' or '.join(_shown(t) for t in sorted(types)[:MAX_LISTED])}"
    )


def _mapping(value: Any) -> dict[str, Any]:
    """A schema's ``properties`` as a dict with string keys; anything else as empty."""
    if not isinstance(value, dict):
        return {}
    return {k: v for k, v in value.items() if isinstance(k, str)}


def _shown(text: str) -> str:
    """Server-supplied text fit for one terminal line: escaped, and cut when long."""
    return printable_name(text, MAX_NAME_CHARS)


def _listing(names: Iterable[str], empty: str, *, sort: bool = True) -> str:
    """``a, b, c`` of at most MAX_LISTED shown names (an empty name as ``''``), then how many
    more there are."""
    every = sorted(names) if sort else list(names)
    shown = ", ".join(_shown(n) or "''" for n in every[:MAX_LISTED]) or empty
    more = len(every) - MAX_LISTED
    return f"{shown}, ... ({more} more)" if more > 0 else shown


def _diag(
    code: str,
    message: str,
    use: _Use,
    span: Span | None = None,
    severity: Severity = Severity.ERROR,
) -> Diagnostic:
    return Diagnostic(code, message, span or use.span, severity, use.file)


def _uses(path: Path, report: ConnectReport) -> list[_Use]:
    """Every MCP tool use of the agent; parse problems are left to plain ``validate``."""
    if path.is_dir():
        from agentscript.mantle import load_project

        project, _ = load_project(path)
        if project is None:
            return []
        uses = []
        for skill in project.skills.values():
            for ref in skill.tool_refs:
                parsed = parse_target(ref.name)
                if parsed is not None and ref.via == "import_tools":
                    uses.append(_Use(parsed[0], parsed[1], ref.span, ref.file))
        return uses
    from agentscript.check import check
    from agentscript.loader import parse_file

    doc, _ = parse_file(path)
    if doc is None:
        return []
    outline = check(doc).outline
    actions = [a for node in outline.subagents.values() for a in node.actions.values()]
    found = []
    for action in actions:
        parsed = parse_target(action.target or "")
        if parsed is not None:
            found.append(_Use(parsed[0], parsed[1], action.span, str(path), action))
    return found


def connect_results(
    results: list[tuple[Path, list[Diagnostic]]], *, echo: Callable[[str], None]
) -> None:
    """Add the connect diagnostics to ``validate``'s results (in place) and ``echo`` each
    server's tool list; files that already have errors are checked too."""
    for path, diagnostics in results:
        report = connect_check(path)
        for line in report.servers:
            echo(line)
        diagnostics.extend(report.diagnostics)
        diagnostics.sort(key=lambda d: (d.span.line, d.span.column))


# ---------------------------------------------------------------------- OpenAPI actions


def openapi_diagnostics(path: Path) -> list[Diagnostic]:
    """Actions with an ``https://...#operationId`` target checked against the operation:
    codes ``openapi-unknown-operation`` (no such API or operation, or a malformed document),
    ``openapi-missing-input``, ``openapi-unknown-input``, ``openapi-type-mismatch`` and
    ``openapi-unknown-output`` (warning)."""
    if path.is_dir():
        return []
    actions = [a for a in _agent_actions(path) if _is_openapi_target(a.target)]
    if not actions:
        return []
    from agentscript.integrations.setup import openapi_hub

    found: list[Diagnostic] = []
    try:
        config = load_integration_config(start=path.parent)
        apis = openapi_hub(config)
        for api in apis.configs if apis else []:
            apis.document(api)  # type: ignore[union-attr]
    except ConfigError as exc:
        use = _Use("", "", actions[0].span, str(path), actions[0])
        return [_diag("config-error", str(exc), use)]
    for action in actions:
        use = _Use("", "", action.span, str(path), action)
        if apis is None:
            found.append(
                _diag(
                    "openapi-unknown-operation",
                    f"action '{action.name}': no OpenAPI document is declared; add "
                    "[openapi.NAME] with `spec` to agentscript.toml",
                    use,
                )
            )
            continue
        try:
            _, _, operation = apis.find(action.target or "")
        except ActionError as exc:
            found.append(_diag("openapi-unknown-operation", f"action '{action.name}': {exc}", use))
            continue
        found.extend(_operation_problems(use, action, operation))
    return found


def _is_openapi_target(target: str | None) -> bool:
    return bool(target) and str(target).startswith(("http://", "https://")) and "#" in str(target)


def _agent_actions(path: Path) -> list[ActionDef]:
    from agentscript.check import check
    from agentscript.loader import parse_file

    doc, _ = parse_file(path)
    if doc is None:
        return []
    outline = check(doc).outline
    return [a for node in outline.subagents.values() for a in node.actions.values()]


def _operation_problems(use: _Use, action: ActionDef, operation: Any) -> list[Diagnostic]:
    problems: list[Diagnostic] = []
    where = f"action '{action.name}'"
    params = {p.name: p for p in operation.parameters}
    body = operation.body_schema or {}
    body_props = body.get("properties") or {}
    for param in operation.parameters:
        if param.required and param.name not in action.inputs:
            problems.append(
                _diag(
                    "openapi-missing-input",
                    f"{where}: operation {operation.operation_id} requires the {param.location} "
                    f"parameter '{param.name}'; declare it under inputs:",
                    use,
                )
            )
    for name in body.get("required") or []:
        if name not in action.inputs and "body" not in action.inputs:
            problems.append(
                _diag(
                    "openapi-missing-input",
                    f"{where}: the body of {operation.operation_id} requires '{name}'; "
                    "declare it under inputs:",
                    use,
                )
            )
    for name, param in action.inputs.items():
        schema = params[name].schema if name in params else body_props.get(name)
        if schema is None:
            if name == "body" and operation.body_schema is not None:
                continue
            if name not in params and (body_props or operation.body_schema is None):
                problems.append(
                    _diag(
                        "openapi-unknown-input",
                        f"{where}: operation {operation.operation_id} has no parameter or body "
                        f"field '{name}'",
                        use,
                        param.span,
                    )
                )
            continue
        if mismatch := _type_mismatch(param, schema):
            problems.append(
                _diag("openapi-type-mismatch", f"{where}: input {mismatch}", use, param.span)
            )
    out_props = (operation.response_schema or {}).get("properties")
    if isinstance(out_props, dict):
        for name, param in action.outputs.items():
            schema = out_props.get(name)
            if schema is None:
                problems.append(
                    _diag(
                        "openapi-unknown-output",
                        f"{where}: the response of {operation.operation_id} has no field '{name}'",
                        use,
                        param.span,
                        Severity.WARNING,
                    )
                )
            elif mismatch := _type_mismatch(param, schema):
                problems.append(
                    _diag("openapi-type-mismatch", f"{where}: output {mismatch}", use, param.span)
                )
    return problems
