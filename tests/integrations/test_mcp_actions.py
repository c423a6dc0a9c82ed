"""MCP actions (``mcp://SERVER/TOOL``) against a real MCP server written with the official SDK:
calls, tool errors, crash and restart, timeouts, unknown and unreachable servers (rule S12:
an action failure is a result for the LLM, never a hang or a traceback)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest
from tests.integrations.helpers import DEMO_SERVER, stdio_config

import agentscript
from agentscript.actions.registry import ActionError
from agentscript.integrations.config import McpServerConfig
from agentscript.integrations.mcp_client import McpHub, parse_target
from agentscript.models.scripted import Move, ScriptedModel
from fakes.ports import refused_port

AGENT = """\
system:
    instructions: "Be brief."
    messages:
        error: "Something failed."
config:
    developer_name: "weather_agent"
variables:
    forecast: mutable string = ""
start_agent main:
    description: "main"
    reasoning:
        instructions: ->
            | Help with the weather.
        actions:
            weather: @actions.get_weather
                set @variables.forecast = @outputs.forecast
            fail: @actions.fail
    actions:
        get_weather:
            description: "The forecast"
            target: "mcp://demo/get_weather"
            inputs:
                city: string
                    is_required: True
            outputs:
                forecast: string
        fail:
            description: "Fails"
            target: "mcp://demo/fail"
            inputs:
                reason: string
                    is_required: True
"""


def write_agent(tmp_path: Path, toml: str) -> Path:
    (tmp_path / "agentscript.toml").write_text(toml)
    path = tmp_path / "weather.agent"
    path.write_text(AGENT)
    return path


def stdio_toml(extra: str = "") -> str:
    return (
        "[mcp.servers.demo]\n"
        f"command = {json.dumps(__import__('sys').executable)}\n"
        f'args = [{json.dumps(str(DEMO_SERVER))}, "stdio"]\n{extra}'
    )


def run(coro: object) -> object:
    return asyncio.run(coro)  # type: ignore[arg-type]


def test_targets_parse_in_both_spellings() -> None:
    assert parse_target("mcp://weather/get_forecast") == ("weather", "get_forecast")
    assert parse_target("mcp/banking:get_balance") == ("banking", "get_balance")
    assert parse_target("mcp://weather") is None
    assert parse_target("https://x") is None


def test_mcp_action_calls_the_tool_and_maps_structured_output(tmp_path: Path) -> None:
    agent = agentscript.load(write_agent(tmp_path, stdio_toml()), dialect="agentscript")
    model = ScriptedModel(
        [Move(calls=[("weather", {"city": "Paris"})]), Move(text="Sunny."), Move(text="Again.")]
    )
    session = agent.session(model=model)
    reply = session.send("weather in Paris?")
    assert reply.error is None
    assert session.variables["forecast"] == "sunny for 1 day(s)"
    step = next(s for s in reply.trace["planTrace"]["steps"] if s["type"] == "ACTION_STEP")
    assert step["output"] == {"city": "Paris", "forecast": "sunny for 1 day(s)", "temperature": 21}


def test_S12_tool_error_becomes_an_action_error_for_the_llm(tmp_path: Path) -> None:
    agent = agentscript.load(write_agent(tmp_path, stdio_toml()), dialect="agentscript")
    model = ScriptedModel([Move(calls=[("fail", {"reason": "closed"})]), Move(text="Sorry.")])
    reply = agent.session(model=model).send("go")
    assert reply.error is None  # an LLM-invoked failure does not end the turn
    step = next(s for s in reply.trace["planTrace"]["steps"] if s["type"] == "ACTION_STEP")
    assert "reported an error" in step["error"]
    assert "cannot do that: closed" in step["error"]
    tool_result = model.requests[1].messages[-1]
    assert "cannot do that: closed" in (tool_result.content or "")


def test_one_session_per_server_is_reused_across_sessions_and_turns() -> None:
    hub = McpHub({"demo": stdio_config()})
    try:

        async def twice() -> tuple[object, object]:
            return await hub.call_tool("demo", "pid", {}), await hub.call_tool("demo", "pid", {})

        first, second = run(twice())  # type: ignore[misc]
        third = run(hub.call_tool("demo", "pid", {}))  # another event loop, same session
        assert first == second == third
        assert hub.starts("demo") == 1
    finally:
        hub.close()


def test_crashed_server_is_an_action_error_then_restarted() -> None:
    hub = McpHub({"demo": stdio_config()})
    try:
        before = run(hub.call_tool("demo", "pid", {}))
        with pytest.raises(ActionError, match="restarted on the next call"):
            run(hub.call_tool("demo", "crash", {}))
        after = run(hub.call_tool("demo", "pid", {}))
        assert after != before
        assert hub.starts("demo") == 2
    finally:
        hub.close()


def test_slow_tool_times_out_and_the_server_stays_usable() -> None:
    hub = McpHub({"demo": stdio_config(timeout=1.0)})
    try:
        with pytest.raises(ActionError, match=r"timed out after 1 s"):
            run(hub.call_tool("demo", "slow", {"seconds": 5}))
        assert run(hub.call_tool("demo", "get_weather", {"city": "Oslo"}))["city"] == "Oslo"  # type: ignore[index]
    finally:
        hub.close()


def test_unknown_server_is_a_clear_action_error(tmp_path: Path) -> None:
    hub = McpHub({"demo": stdio_config()})
    with pytest.raises(ActionError, match=r"'nowhere' is not declared in agentscript.toml"):
        run(hub.call_tool("nowhere", "x", {}))


def test_unreachable_http_server_fails_without_hanging() -> None:
    with refused_port() as port:
        url = f"http://127.0.0.1:{port}/mcp"
        hub = McpHub({"down": McpServerConfig("down", url=url, connect_timeout=5)})
        try:
            with pytest.raises(ActionError, match="MCP server 'down'"):
                run(hub.call_tool("down", "x", {}))
        finally:
            hub.close()


def test_missing_command_is_a_clear_action_error() -> None:
    config = McpServerConfig("gone", command="/nonexistent/mcp-server")
    hub = McpHub({"gone": config})
    try:
        with pytest.raises(ActionError, match="cannot start MCP server 'gone'"):
            run(hub.call_tool("gone", "x", {}))
    finally:
        hub.close()


def test_streamable_http_server_call_and_tool_error(http_server: str) -> None:
    hub = McpHub({"web": McpServerConfig("web", url=http_server)})
    try:
        out = run(hub.call_tool("web", "get_weather", {"city": "Rome", "days": 2}))
        assert out == {"city": "Rome", "forecast": "sunny for 2 day(s)", "temperature": 21}
        with pytest.raises(ActionError, match="cannot do that: x"):
            run(hub.call_tool("web", "fail", {"reason": "x"}))
        names = {t.name for t in run(hub.list_tools("web"))}  # type: ignore[attr-defined]
        assert {"get_weather", "fail", "crash", "slow", "pid"} <= names
    finally:
        hub.close()


def test_header_secrets_come_from_env_and_never_reach_messages(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("DEMO_TOKEN", raising=False)
    config = McpServerConfig(
        "web", url="http://127.0.0.1:9/mcp", headers=(("Authorization", "Bearer ${DEMO_TOKEN}"),)
    )
    hub = McpHub({"web": config})
    try:
        with pytest.raises(ActionError, match="DEMO_TOKEN, which is not set") as info:
            run(hub.call_tool("web", "x", {}))
        assert "Bearer" not in str(info.value)
    finally:
        hub.close()


def test_malformed_mcp_table_is_a_load_error(tmp_path: Path) -> None:
    path = write_agent(tmp_path, "[mcp.servers.demo]\nargs = ['x']\n")
    with pytest.raises(agentscript.AgentScriptError, match="exactly one of `command`"):
        agentscript.load(path, dialect="agentscript")


def test_a_relative_cwd_is_relative_to_the_config_files_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # It was resolved against the process's cwd, so the server started elsewhere (or not at
    # all) depending on where agentscript ran; [openapi] spec was already anchored.
    from tests.integrations.test_mcp_hostile_servers import RAW_SERVER

    from agentscript.integrations.config import load_integration_config

    folder = tmp_path / "project"
    (folder / "servers").mkdir(parents=True)
    (folder / "servers" / "raw.py").write_text(RAW_SERVER)
    toml = folder / "agentscript.toml"
    toml.write_text(
        f'[mcp.servers.raw]\ncommand = {json.dumps(sys.executable)}\nargs = ["raw.py", "ok"]\n'
        'cwd = "servers"\n'
        f'[mcp.servers.absolute]\ncommand = "x"\ncwd = {json.dumps(str(tmp_path))}\n'
    )
    monkeypatch.chdir(tmp_path)  # anywhere but the config file's folder
    servers = load_integration_config(toml).mcp_servers
    assert servers["raw"].cwd == str(folder / "servers")
    assert servers["absolute"].cwd == str(tmp_path)
    hub = McpHub(servers)
    try:
        assert run(hub.call_tool("raw", "pid", {}))["pid"]  # type: ignore[index]
    finally:
        hub.close()
