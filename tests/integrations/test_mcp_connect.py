"""``validate --connect``: every action targeting an MCP server is checked against the tool's
JSON schema (missing tool, missing required input, type mismatch, unknown or unreachable
server), with diagnostics at the action's line; each server's tools are listed."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from click.testing import CliRunner
from tests.integrations.helpers import DEMO_SERVER, free_port

from agentscript.cli import main

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
    toml = f'[mcp.servers.demo]\nurl = "http://127.0.0.1:{free_port()}/mcp"\nconnect_timeout = 5\n'
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
