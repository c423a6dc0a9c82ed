"""The shipped MCP example runs end to end (its server started over stdio by the runtime),
and a Mantle skill that imports ``mcp/SERVER:TOOL`` calls the tool through the same handler."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from click.testing import CliRunner
from tests.integrations.helpers import DEMO_SERVER

import agentscript
from agentscript.cli import main
from agentscript.models.scripted import Move, ScriptedModel

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "weather_mcp"


def test_weather_example_calls_its_mcp_server() -> None:
    # The example's own agentscript.toml: the runtime starts its server over stdio.
    result = CliRunner().invoke(
        main,
        [
            "run",
            str(EXAMPLE / "weather.agent"),
            "--conversation",
            str(EXAMPLE / "paris.yaml"),
            "--json",
        ],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    (turn,) = data["turns"]
    assert turn["error"] is None
    assert turn["variables"]["forecast"] == "sunny, 21 °C"
    assert turn["failed_expectations"] == []


SKILL = """\
---
name: Weather
description: Tell the user tomorrow's weather.
import_tools:
  - mcp/demo:get_weather
---

Call get_weather for the city the user names and read the forecast.
"""


def test_mantle_skill_calls_an_imported_mcp_tool(tmp_path: Path) -> None:
    (tmp_path / "agent.yml").write_text(
        "agent:\n  id: weather\n  language: en\n  persona: A weather assistant.\n"
    )
    (tmp_path / "integrations.yml").write_text("mcp_servers:\n  - id: demo\n")
    (tmp_path / "skills" / "weather").mkdir(parents=True)
    (tmp_path / "skills" / "weather" / "skill.md").write_text(SKILL)
    (tmp_path / "agentscript.toml").write_text(
        "[mcp.servers.demo]\n"
        f"command = {json.dumps(sys.executable)}\n"
        f'args = [{json.dumps(str(DEMO_SERVER))}, "stdio"]\n'
    )
    agent = agentscript.load(tmp_path)
    model = ScriptedModel(
        [
            Move(calls=[("activate_skill", {"skill": "weather"})]),
            Move(calls=[("get_weather", {"city": "Lima"})]),
            Move(text="Sunny in Lima."),
        ]
    )
    reply = agent.session(model=model).send("weather in Lima?")
    assert reply.error is None, reply.error
    offered = {t.name: t for t in model.requests[1].tools}
    assert offered["get_weather"].parameters["required"] == ["city"]  # the server's schema
    step = next(
        s
        for s in reply.trace["planTrace"]["steps"]
        if s["type"] == "ACTION_STEP" and s["name"] == "get_weather"
    )
    assert step["error"] is None
    assert step["output"]["forecast"] == "sunny for 1 day(s)"
