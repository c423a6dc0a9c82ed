"""``agentscript mcp-serve``: an agent as an MCP server, driven by the official SDK's client
over stdio; the agent's model is the local fake OpenAI server."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

from mcp import ClientSession, StdioServerParameters, stdio_client
from tests.fakes.llm_servers import FakeCall, OpenAIServer, Reply

AGENT = """\
system:
    instructions: "Be brief."
    messages:
        welcome: "Hi."
        error: "Sorry, that failed."
config:
    developer_name: "Echo"
variables:
    name: mutable string = ""
        description: "The user's name"
start_agent main:
    description: "main"
    reasoning:
        instructions: ->
            | Greet {!@variables.name}.
        actions:
            remember: @utils.setVariables
                with name=...
"""


async def drive(agent: Path, base_url: str) -> dict[str, Any]:
    params = StdioServerParameters(
        command=sys.executable,
        args=[
            "-m",
            "agentscript.cli",
            "mcp-serve",
            str(agent),
            "--model",
            "openai:gpt-test",
            "--base-url",
            base_url,
        ],
        env={**os.environ, "OPENAI_API_KEY": "sk-test"},
    )
    out: dict[str, Any] = {}
    with open(os.devnull, "w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            out["tools"] = sorted(t.name for t in (await session.list_tools()).tools)
            first = await session.call_tool("send", {"message": "I am Ada"})
            sid = first.structured_content["session_id"]
            second = await session.call_tool("send", {"message": "hi", "session_id": sid})
            out["first"], out["second"] = first.structured_content, second.structured_content
            out["ask"] = (await session.call_tool("ask", {"message": "one"})).structured_content
            bad = await session.call_tool("send", {"message": "x", "session_id": "nope"})
            out["bad"] = (bad.is_error, bad.content[0].text)  # type: ignore[union-attr]
    return out


def test_mcp_serve_exposes_send_with_sessions_and_ask(tmp_path: Path) -> None:
    agent = tmp_path / "echo.agent"
    agent.write_text(AGENT)
    script = [
        Reply(calls=[FakeCall.of("remember", {"name": "Ada"})]),
        Reply(text="Hello Ada."),
        Reply(text="Still you, Ada."),
        Reply(text="One answer."),
    ]
    with OpenAIServer(script) as server:
        out = asyncio.run(drive(agent, server.base_url))
        # The second turn's prompt shows the variable the first turn set: same session.
        second_system = json.dumps(server.requests[2].body["messages"][0])
    assert out["tools"] == ["ask", "send"]
    assert out["first"]["text"] == "Hello Ada."
    assert out["second"]["session_id"] == out["first"]["session_id"]
    assert out["second"]["text"] == "Still you, Ada."
    assert "Greet Ada." in second_system
    assert out["ask"]["text"] == "One answer."
    assert out["ask"]["session_id"] != out["first"]["session_id"]
    assert out["bad"][0] is True and "unknown session_id 'nope'" in out["bad"][1]
