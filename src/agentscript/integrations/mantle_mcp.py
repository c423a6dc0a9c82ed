"""Mantle skills that import MCP tools (``import_tools: [mcp/SERVER:TOOL]``).

Each import becomes a shared project tool named after the server's tool, whose target is
``mcp://SERVER/TOOL``, so it runs through the same ``mcp`` scheme handler as Agent Script
actions. The load checks the name the model is offered (``mantle/load/validate.py``): a tool
name the model APIs refuse is ``mantle-tool-name``, and two imports of one skill offered under
one name are ``mantle-tool-collision``. Its description and argument schema are the server's:
the servers are asked for their tool lists once, when the agent is loaded (that connection is
then reused by the calls). A server that cannot be reached then is not a load error: its tools
are offered with an open schema and each call reports the failure.

What the server says about a tool is offered to the model only up to a bound: a description
longer than :data:`MAX_DESCRIPTION_CHARS` is cut, and an argument schema longer than
:data:`MAX_SCHEMA_CHARS` (as JSON) is replaced by the open schema; the description then says
so, for the model and for whoever reads the trace.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentscript.actions.registry import ActionError
from agentscript.diagnostics import Span
from agentscript.integrations.mcp_client import McpHub, McpTool, parse_target

if TYPE_CHECKING:
    from agentscript.mantle.model import Project

OPEN_SCHEMA = {"type": "object", "properties": {}, "additionalProperties": True}
# Every tool's description and schema go with every request to the model: a server must not
# fill its context (or pay for it) with one tool's text.
MAX_DESCRIPTION_CHARS = 4_000
MAX_SCHEMA_CHARS = 16_000


def mcp_imports(project: Project) -> list[tuple[str, str, str]]:
    """``(import name, server, tool)`` for every well-formed MCP import of the project."""
    seen: dict[str, tuple[str, str, str]] = {}
    for skill in project.skills.values():
        for name in skill.import_tools:
            parsed = parse_target(name)
            if parsed is not None and name not in seen:
                seen[name] = (name, *parsed)
    return list(seen.values())


def add_mcp_tools(project: Project, hub: McpHub) -> None:
    """Register the project's MCP imports as shared tools (see the module docstring)."""
    from agentscript.mantle.model import Tool

    listed: dict[str, dict[str, McpTool]] = {}
    for name, server, tool_name in mcp_imports(project):
        if server not in listed:
            try:
                listed[server] = {t.name: t for t in hub.list_tools_blocking(server)}
            except ActionError:
                listed[server] = {}
        info = listed[server].get(tool_name)
        description, schema = offered(info, tool_name, server)
        project.shared_tools[name] = Tool(
            name=tool_name,
            file=str(Path(project.root) / "integrations.yml"),
            span=Span(1, 1, 1, 1),
            callable_ref=f"mcp://{server}/{tool_name}",
            function=None,
            description=description,
            parameters_schema=schema,
        )


def offered(info: McpTool | None, tool_name: str, server: str) -> tuple[str, dict[str, Any]]:
    """The description and argument schema the model is offered, within the bounds."""
    description = (info.description if info else "") or f"{tool_name} (MCP server {server})"
    notes: list[str] = []
    if len(description) > MAX_DESCRIPTION_CHARS:
        notes.append(
            f"[description cut at {MAX_DESCRIPTION_CHARS} of {len(description)} characters]"
        )
        description = description[:MAX_DESCRIPTION_CHARS]
    schema = dict(info.input_schema) if info else dict(OPEN_SCHEMA)
    size = _json_size(schema)
    if size is None or size > MAX_SCHEMA_CHARS:
        what = f"{size} characters" if size is not None else "not JSON"
        notes.append(f"[argument schema dropped: {what}, over {MAX_SCHEMA_CHARS}]")
        schema = dict(OPEN_SCHEMA)
    return " ".join([description, *notes]), schema


def _json_size(schema: dict[str, Any]) -> int | None:
    try:
        return len(json.dumps(schema))
    except (TypeError, ValueError, RecursionError):
        return None
