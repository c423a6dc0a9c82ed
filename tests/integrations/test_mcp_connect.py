"""``validate --connect``: every action targeting an MCP server is checked against the tool's
JSON schema (missing tool, missing required input, type mismatch, unknown or unreachable
server), with diagnostics at the action's line; each server's tools are listed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from click.testing import CliRunner
from tests.integrations.helpers import DEMO_SERVER

from agentscript.cli import main
from agentscript.diagnostics import Severity
from agentscript.integrations.connect_check import connect_check
from agentscript.integrations.mcp_client import McpTool
from fakes.ports import refused_port

AGENT = """\
system:
    instructions: "Be brief."
    messages:
        error: "Failed."
config:
    developer_name: "connect_agent"
start_agent main:
    description: "main"
    reasoning:
        instructions: ->
            | Help.
        actions:
            a: @actions.good
            b: @actions.no_city
            c: @actions.wrong_type
            d: @actions.no_such_tool
            e: @actions.elsewhere
            f: @actions.bad_output
    actions:
        good:
            description: "ok"
            target: "mcp://demo/get_weather"
            inputs:
                city: string
                days: number
            outputs:
                forecast: string
        no_city:
            description: "misses the required input"
            target: "mcp://demo/get_weather"
            inputs:
                days: number
        wrong_type:
            description: "city is not a number"
            target: "mcp://demo/get_weather"
            inputs:
                city: number
        no_such_tool:
            description: "not on the server"
            target: "mcp://demo/get_tides"
        elsewhere:
            description: "undeclared server"
            target: "mcp://nowhere/x"
        bad_output:
            description: "output type"
            target: "mcp://demo/fail"
            inputs:
                reason: string
            outputs:
                result: boolean
"""


def write(tmp_path: Path, toml: str) -> Path:
    (tmp_path / "agentscript.toml").write_text(toml)
    path = tmp_path / "connect.agent"
    path.write_text(AGENT)
    return path


def line_of(action: str) -> int:
    return AGENT.splitlines().index(f"        {action}:") + 1


def run_validate(path: Path) -> tuple[int, list[dict[str, object]], str]:
    result = CliRunner().invoke(
        main, ["validate", "--connect", "--format", "json", "--dialect", "agentscript", str(path)]
    )
    assert "Traceback" not in result.output
    return result.exit_code, json.loads(result.stdout), result.stderr


def test_connect_checks_actions_against_the_tool_schemas(tmp_path: Path) -> None:
    toml = (
        "[mcp.servers.demo]\n"
        f"command = {json.dumps(sys.executable)}\n"
        f'args = [{json.dumps(str(DEMO_SERVER))}, "stdio"]\n'
    )
    code, diagnostics, stderr = run_validate(write(tmp_path, toml))
    assert code == 1
    found = {(d["code"], d["line"]) for d in diagnostics if str(d["code"]).startswith("mcp-")}
    assert found == {
        ("mcp-missing-input", line_of("no_city")),
        ("mcp-type-mismatch", line_of("wrong_type") + 4),  # at the input's line
        ("mcp-unknown-tool", line_of("no_such_tool")),
        ("mcp-unknown-server", line_of("elsewhere")),
        ("mcp-type-mismatch", line_of("bad_output") + 6),
    }
    assert "mcp server 'demo'" in stderr and "get_weather" in stderr


def test_connect_reports_an_unreachable_server_at_the_action(tmp_path: Path) -> None:
    with refused_port() as port:
        toml = f'[mcp.servers.demo]\nurl = "http://127.0.0.1:{port}/mcp"\nconnect_timeout = 5\n'
        code, diagnostics, stderr = run_validate(write(tmp_path, toml))
    assert code == 1
    unreachable = [d for d in diagnostics if d["code"] == "mcp-unreachable"]
    assert [d["line"] for d in unreachable] == [line_of("good")]  # reported once per server
    assert "unreachable" in stderr


def test_connect_reports_a_malformed_config(tmp_path: Path) -> None:
    code, diagnostics, _ = run_validate(write(tmp_path, "[mcp.servers.demo]\ncommand = 3\n"))
    assert code == 1
    assert any(d["code"] == "config-error" for d in diagnostics)


SKILL = """\
---
name: Weather
description: Tell the user tomorrow's weather.
import_tools:
  - mcp/demo:get_weather
  - mcp/demo:get_tides
---

Call get_weather for the city the user names.
"""


def test_connect_checks_mantle_mcp_imports(tmp_path: Path) -> None:
    (tmp_path / "agent.yml").write_text("agent:\n  id: w\n  language: en\n  persona: Weather.\n")
    (tmp_path / "integrations.yml").write_text("mcp_servers:\n  - id: demo\n")
    (tmp_path / "skills" / "weather").mkdir(parents=True)
    skill = tmp_path / "skills" / "weather" / "skill.md"
    skill.write_text(SKILL)
    (tmp_path / "agentscript.toml").write_text(
        "[mcp.servers.demo]\n"
        f"command = {json.dumps(sys.executable)}\n"
        f'args = [{json.dumps(str(DEMO_SERVER))}, "stdio"]\n'
    )
    result = CliRunner().invoke(main, ["validate", "--connect", "--format", "json", str(tmp_path)])
    assert "Traceback" not in result.output
    found = [(d["code"], d["file"], d["line"]) for d in json.loads(result.stdout)]
    assert found == [("mcp-unknown-tool", str(skill), 6)]
    assert result.exit_code == 1


class ListedTools:
    """Stands in for McpHub: every server lists ``tools``."""

    def __init__(self, tools: list[McpTool]) -> None:
        self.tools = tools

    def list_tools_blocking(self, server: str) -> list[McpTool]:
        return self.tools

    def close(self) -> None:
        pass


def test_a_tool_name_listed_twice_is_a_problem_and_listed_once(tmp_path: Path) -> None:
    # The list read "get_weather, get_weather, , fail, forecast, ...": repeats, and an empty
    # name that left a dangling ", ". Which of two same-named tools a call runs is the server's
    # choice, and the schema checked was the last one listed.
    path = write(tmp_path, f"[mcp.servers.demo]\ncommand = {json.dumps(sys.executable)}\n")
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    listed = [
        McpTool(name, "", schema, None)
        for name in ("get_weather", "get_weather", "", "fail", "forecast", "forecast", "forecast")
    ]
    report = connect_check(path, hub=ListedTools(listed))
    (summary,) = report.servers
    assert summary.endswith("): get_weather, '', fail, forecast")
    repeats = [d for d in report.diagnostics if d.code == "mcp-duplicate-tool"]
    used = [d for d in repeats if d.severity is Severity.ERROR]
    assert sorted(d.span.line for d in used) == [
        line_of(a) for a in ("good", "no_city", "wrong_type")
    ]
    assert "lists tool 'get_weather' 2 times" in used[0].message
    (unused,) = [d for d in repeats if d.severity is Severity.WARNING]
    assert "lists more than once: forecast; tool names must be unique" in unused.message
    assert unused.span.line == line_of("good")  # the server's first use


def test_a_listed_empty_tool_name_is_shown_quoted(tmp_path: Path) -> None:
    path = write(tmp_path, f"[mcp.servers.demo]\ncommand = {json.dumps(sys.executable)}\n")
    hub = ListedTools([McpTool("", "", {}, None)])
    report = connect_check(path, hub=hub)
    assert report.servers[0].endswith("): ''")
    unknown = [d for d in report.diagnostics if d.code == "mcp-unknown-tool"]
    assert unknown and all(d.message.endswith("it has: ''") for d in unknown)
