"""``agentscript mcp-serve``: an agent as an MCP server, driven by the official SDK's client
over stdio; the agent's model is the local fake OpenAI server."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
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


def _arguments(agent: Path, base_url: str, *extra: str) -> list[str]:
    """``python -m agentscript.cli mcp-serve AGENT`` against the fake model server."""
    model = ["--model", "openai:gpt-test", "--base-url", base_url]
    return ["-m", "agentscript.cli", "mcp-serve", str(agent), *model, *extra]


async def drive(agent: Path, base_url: str) -> dict[str, Any]:
    params = StdioServerParameters(
        command=sys.executable,
        args=_arguments(agent, base_url),
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
    assert len(out["first"]["session_id"]) == 32  # a uuid4: the only handle on a conversation
    assert out["second"]["text"] == "Still you, Ada."
    assert "Greet Ada." in second_system
    assert out["ask"]["text"] == "One answer."
    assert out["ask"]["session_id"] != out["first"]["session_id"]
    assert out["bad"][0] is True and "unknown session_id 'nope'" in out["bad"][1]


def _mcp_serve_http(agent: Path, base_url: str, port: int, *extra: str, keys: str = "") -> Any:
    import subprocess

    return subprocess.Popen(
        [
            sys.executable,
            *_arguments(agent, base_url, "--transport", "streamable-http", "--port", str(port)),
            *extra,
        ],
        env={**os.environ, "OPENAI_API_KEY": "sk-test", "AGENTSCRIPT_API_KEYS": keys},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _serving_url(proc: Any, seconds: float = 30) -> tuple[str, str]:
    """The URL an ``mcp-serve`` started with ``--port 0`` serves on, as its first line says
    (printed once the socket is bound, before it serves), and what it printed up to there.
    The system chooses the port: one probed here, let go and bound again by the server could
    be taken by another process in between."""
    import re
    import threading

    banner = re.compile(r"mcp-serve: agent '.*' at (http://127\.0\.0\.1:(\d+)/mcp)\n")
    lines: list[str] = []
    found: list[re.Match[str]] = []

    def read() -> None:
        while line := proc.stdout.readline():
            lines.append(line)
            if said := banner.fullmatch(line):
                found.append(said)
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(seconds)  # a bound: readline alone would wait for ever
    if not found or found[0][2] == "0":
        raise AssertionError(f"mcp-serve named no port it serves on: {''.join(lines)!r}")
    return found[0][1], "".join(lines)


def _answering(url: str, proc: Any) -> int:
    import time

    import httpx2

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            return httpx2.post(url, json={}, timeout=2).status_code
        except httpx2.TransportError:
            time.sleep(0.1)
    raise AssertionError(f"mcp-serve did not listen (exit {proc.poll()})")


async def _ask_over_http(url: str, key: str) -> Any:
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        return (await session.call_tool("ask", {"message": "one"})).structured_content


def test_mcp_serve_over_http_takes_the_api_keys_and_stops_on_ctrl_c(tmp_path: Path) -> None:
    import signal

    import httpx2

    agent = tmp_path / "echo.agent"
    agent.write_text(AGENT)
    with OpenAIServer([Reply(text="One answer.")]) as model:
        proc = _mcp_serve_http(agent, model.base_url, 0, keys="key-1-0123456789ab")
        try:
            url, said = _serving_url(proc)
            assert _answering(url, proc) == 401  # no key
            wrong = httpx2.post(url, json={}, headers={"Authorization": "Bearer key-2"})
            assert wrong.status_code == 401
            assert wrong.json()["error"]["code"] == "unauthorized"
            answer = asyncio.run(_ask_over_http(url, "key-1-0123456789ab"))
            assert answer["text"] == "One answer."
            proc.send_signal(signal.SIGINT)
            out, _ = proc.communicate(timeout=20)
            out = said + out
        finally:
            proc.kill()
    assert proc.returncode == 0
    assert "key-1-0123456789ab" not in out and "Traceback" not in out
    assert f"agent 'Echo' at {url}" in out


def test_mcp_serve_over_http_refuses_what_serve_refuses_in_one_line(tmp_path: Path) -> None:
    import socket

    agent = tmp_path / "echo.agent"
    agent.write_text(AGENT)
    proc = _mcp_serve_http(agent, "http://127.0.0.1:9/v1", 8000, "--host", "0.0.0.0")
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 2 and "refusing to listen on 0.0.0.0 without API keys" in out
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = _mcp_serve_http(agent, "http://127.0.0.1:9/v1", port)
        out, _ = proc.communicate(timeout=30)
    # As serve says it (tests/serve/test_command.py), in one line.
    assert proc.returncode == 2
    assert out == f"mcp-serve: cannot listen on 127.0.0.1:{port}: Address already in use\n"


def test_mcp_serve_over_http_on_port_0_names_the_port_it_listens_on(tmp_path: Path) -> None:
    # The port is bound once, before the line that names it, and that socket is the one
    # uvicorn serves on: it used to be bound, let go, then bound again by uvicorn, so the
    # line said port 0 and another program could take the port in between.
    import re
    import signal

    agent = tmp_path / "echo.agent"
    agent.write_text(AGENT)
    with OpenAIServer([Reply(text="One answer.")]) as model:
        proc = _mcp_serve_http(agent, model.base_url, 0, keys="key-1-0123456789ab")
        try:
            said = proc.stdout.readline()  # the first line, printed before it serves
            banner = re.fullmatch(
                r"mcp-serve: agent 'Echo' at http://127\.0\.0\.1:(\d+)/mcp\n", said
            )
            assert banner, said
            assert banner[1] != "0"
            url = f"http://127.0.0.1:{banner[1]}/mcp"
            assert _answering(url, proc) == 401  # no key: this server answers there
            assert asyncio.run(_ask_over_http(url, "key-1-0123456789ab"))["text"] == "One answer."
            proc.send_signal(signal.SIGINT)
            proc.communicate(timeout=20)
        finally:
            proc.kill()
    assert proc.returncode == 0


def _tools(base_url: str, **given: Any) -> Any:
    import tempfile

    from agentscript import load
    from agentscript.integrations.mcp_server import AgentTools
    from agentscript.models.openai_lean import LeanOpenAIModel

    file = Path(tempfile.mkdtemp()) / "echo.agent"
    file.write_text(AGENT)
    agent = load(file)
    model = LeanOpenAIModel("gpt-test", api_key="sk-test", base_url=base_url, max_retries=0)
    return AgentTools(agent, lambda: model, **given)


def test_mcp_tools_refuse_a_message_longer_than_serve_takes_before_any_model_call() -> None:
    from agentscript.integrations.mcp_server import MAX_MESSAGE_CHARS, ToolRefused

    with OpenAIServer([]) as server:
        tools = _tools(server.base_url)
        for call in (tools.ask, lambda text: tools.send(text, None)):
            with pytest.raises(ToolRefused, match=f"at most {MAX_MESSAGE_CHARS}"):
                asyncio.run(call("x" * (MAX_MESSAGE_CHARS + 1)))
        assert server.requests == [] and tools.sessions == {}


def test_mcp_send_waits_for_a_busy_session_only_so_long(monkeypatch: pytest.MonkeyPatch) -> None:
    from agentscript.integrations import mcp_server

    monkeypatch.setattr(mcp_server, "LOCK_WAIT", 0.2)

    async def scenario(tools: Any) -> str:
        first = await tools.send("hi", None)
        sid = first["session_id"]
        lock = tools.sessions[sid].lock
        await lock.acquire()  # a turn of it still runs
        try:
            await tools.send("again", sid)
        except mcp_server.ToolRefused as exc:
            return str(exc)
        finally:
            lock.release()
        return "not refused"

    with OpenAIServer([Reply(text="Hello.")]) as server:
        refused = asyncio.run(scenario(_tools(server.base_url)))
    assert "is busy: another message of it ran for over 0.2 s" in refused


def test_mcp_sessions_past_the_cap_evict_the_oldest_idle_one_never_a_running_one() -> None:
    async def scenario(tools: Any) -> tuple[list[str], str, str]:
        first = (await tools.send("one", None))["session_id"]
        second = (await tools.send("two", None))["session_id"]
        lock = tools.sessions[first].lock
        await lock.acquire()  # the oldest is mid-turn
        await tools.send("three", None)  # one over the cap
        lock.release()
        return list(tools.sessions), first, second

    replies = [Reply(text="a"), Reply(text="b"), Reply(text="c")]
    with OpenAIServer(replies) as server:
        kept, first, second = asyncio.run(scenario(_tools(server.base_url, max_sessions=2)))
    assert first in kept and second not in kept and len(kept) == 2


def test_mcp_a_failure_of_the_server_itself_is_a_one_line_tool_error(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from agentscript.integrations.mcp_server import _as_tool_error

    async def broken() -> dict[str, Any]:
        raise OSError(28, "No space left on device")

    class ToolError(Exception):
        pass

    with pytest.raises(ToolError) as caught:
        asyncio.run(_as_tool_error(broken(), ToolError))
    assert str(caught.value) == "the turn failed: OSError: [Errno 28] No space left on device"
    assert [r.getMessage() for r in caplog.records] == [f"{caught.value}"]
    assert all(r.exc_info is None for r in caplog.records)  # one line, no traceback


def test_mcp_arguments_the_schema_refuses_are_a_one_line_tool_error() -> None:
    # The SDK answered with pydantic's whole text: a line per error and "For further
    # information visit https://errors.pydantic.dev/...", for the client's model to read.
    from mcp.server.mcpserver.exceptions import ToolError

    from agentscript.integrations.mcp_server import build_server

    async def refused(server: Any, tool: str, arguments: dict[str, Any]) -> str:
        with pytest.raises(ToolError) as caught:
            await server.call_tool(tool, arguments)
        return str(caught.value)

    with OpenAIServer([]) as fake:
        server = build_server(_tools(fake.base_url))
        one = asyncio.run(refused(server, "ask", {"message": [1]}))
        two = asyncio.run(refused(server, "send", {"message": [1], "session_id": 5}))
        assert fake.requests == []
    assert (
        one
        == "Error executing tool ask: invalid arguments: message: Input should be a valid string"
    )
    assert two.startswith("Error executing tool send: invalid arguments: message: ")
    assert two.endswith(" (and 1 more error)") and "\n" not in two and "pydantic.dev" not in two


def test_mcp_serve_refuses_a_trace_dir_it_cannot_make_in_one_line(tmp_path: Path) -> None:
    agent = tmp_path / "echo.agent"
    agent.write_text(AGENT)
    blocker = tmp_path / "file"
    blocker.write_text("")
    traces = str(blocker / "traces")
    proc = _mcp_serve_http(agent, "http://127.0.0.1:9/v1", 8000, "--trace-dir", traces)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert "--trace-dir" in out and "Traceback" not in out


def test_mcp_sessions_past_their_history_budget_evict_the_oldest_idle_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agentscript.integrations import mcp_server

    async def scenario(tools: Any) -> tuple[list[str], str, str]:
        first = (await tools.send("one " * 50, None))["session_id"]
        second = (await tools.send("two", None))["session_id"]
        size = (
            tools.sessions[first].session.history_chars()
            + tools.sessions[second].session.history_chars()
        )
        monkeypatch.setattr(mcp_server, "MAX_KEPT_CHARS", size - 1)
        third = (await tools.send("three", None))["session_id"]
        return list(tools.sessions), first, third

    replies = [Reply(text="a"), Reply(text="b"), Reply(text="c")]
    with OpenAIServer(replies) as server:
        kept, first, third = asyncio.run(scenario(_tools(server.base_url)))
    assert first not in kept and third in kept


def test_mcp_result_carries_the_confirmation_question_as_serve_does() -> None:
    from types import SimpleNamespace

    from agentscript.integrations.mcp_server import result_json

    waiting = SimpleNamespace(
        text="Send 10 EUR to Ada?",
        node="transfer",
        escalated=False,
        ended=False,
        error=None,
        confirmation="Send 10 EUR to Ada?",
    )
    result = result_json("s1", waiting)  # type: ignore[arg-type]
    assert result["confirmation"] == "Send 10 EUR to Ada?"
    assert set(result) == {
        "session_id",
        "text",
        "node",
        "escalated",
        "ended",
        "error",
        "confirmation",
    }


async def _ask_during(url: str, key: str, in_flight: Callable[[], bool], stop: Any) -> Any:
    """``ask`` over HTTP; once ``in_flight()`` says its turn runs, ``stop()`` (a signal).
    The ``ask`` result, or the exception the call raised."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        # The client lists the tools before its first call's result is read (for the
        # output schema): done here, while the server still takes connections.
        await session.list_tools()
        call = asyncio.ensure_future(session.call_tool("ask", {"message": "one"}))
        for _ in range(300):  # bounded: 30 s
            if in_flight() or call.done():
                break
            await asyncio.sleep(0.1)
        stop()
        try:
            async with asyncio.timeout(60):
                return (await call).structured_content
        except Exception as exc:
            return exc


def _sigterm_during_a_turn(tmp_path: Path, delay: float, *extra: str) -> tuple[Any, int, str]:
    """A real ``mcp-serve`` over HTTP stopped by SIGTERM while its one turn waits ``delay``
    seconds for the model: what the client got, the exit code and the log."""
    import signal

    agent = tmp_path / "echo.agent"
    agent.write_text(AGENT)
    with OpenAIServer([Reply(text="Late answer.", delay=delay)]) as model:
        proc = _mcp_serve_http(agent, model.base_url, 0, *extra, keys="key-1-0123456789ab")
        try:
            url, said = _serving_url(proc)
            assert _answering(url, proc) == 401
            got = asyncio.run(
                _ask_during(
                    url,
                    "key-1-0123456789ab",
                    lambda: bool(model.requests),
                    lambda: proc.send_signal(signal.SIGTERM),
                )
            )
            out, _ = proc.communicate(timeout=60)
            out = said + out
        finally:
            proc.kill()
    return got, proc.returncode, out


def test_mcp_serve_over_http_answers_the_running_turn_on_sigterm(tmp_path: Path) -> None:
    # The model answers seconds after the signal: the turn runs through the shutdown.
    got, code, out = _sigterm_during_a_turn(tmp_path, 3.0)
    assert isinstance(got, dict) and got["text"] == "Late answer.", got
    assert code == 0
    assert "Traceback" not in out and "cut" not in out
    # The client's listening stream, ended by the SDK at the signal, is finished cleanly.
    assert "ASGI callable returned without completing response" not in out


def test_mcp_serve_over_http_cuts_a_turn_past_the_shutdown_grace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "40")  # rich's handler wrapped the SDK's lines at its width
    got, code, out = _sigterm_during_a_turn(tmp_path, 20.0, "--shutdown-grace", "1")
    assert not isinstance(got, dict), got  # no result: an error
    assert code == 0
    cut = [line for line in out.splitlines() if "turn(s) cut" in line]
    assert len(cut) == 1 and cut[0].endswith("shutdown: 1 turn(s) cut after the 1 s grace"), out
    assert " ERROR agentscript.mcp: " in cut[0]  # one plain line, named and levelled
    assert "Traceback" not in out  # uvicorn's cancellation answered with a 503, not logged


def test_mcp_tools_at_shutdown_refuse_new_calls_and_wait_for_the_running_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agentscript.integrations.mcp_server import ToolRefused
    from agentscript.server.shutdown import ShutdownClock

    monkeypatch.setattr(ShutdownClock, "began", None)  # finish_turns marks it

    async def scenario(tools: Any, server: OpenAIServer) -> tuple[Any, str, int]:
        running = asyncio.ensure_future(tools.ask("one"))
        for _ in range(300):  # bounded: 30 s
            if server.requests:
                break
            await asyncio.sleep(0.1)
        finishing = asyncio.ensure_future(tools.finish_turns(60))
        await asyncio.sleep(0)  # the shutdown began
        try:
            await tools.send("two", None)
            refused = "not refused"
        except ToolRefused as exc:
            refused = str(exc)
        return await running, refused, await finishing

    with OpenAIServer([Reply(text="Late answer.", delay=1.0)]) as server:
        answer, refused, cut = asyncio.run(scenario(_tools(server.base_url), server))
        asked = len(server.requests)
    assert answer["text"] == "Late answer." and cut == 0
    assert refused == "the server is shutting down: send this again later"
    assert asked == 1  # the refused call never reached the model


def test_mcp_serve_rate_limit_sets_the_burst_as_serve_does(tmp_path: Path) -> None:
    # The burst stayed 40 whatever --rate-limit said (serve's follows it: two seconds' worth).
    import re

    import httpx2

    agent = tmp_path / "echo.agent"
    agent.write_text(AGENT)
    with OpenAIServer([Reply(text="One answer.")]) as model:
        proc = _mcp_serve_http(
            agent, model.base_url, 0, "--rate-limit", "0.01", keys="key-1-0123456789ab"
        )
        try:
            banner = re.search(r":(\d+)/mcp", proc.stdout.readline())
            assert banner
            url = f"http://127.0.0.1:{banner[1]}/mcp"
            assert _answering(url, proc) == 401  # listening; no key: not counted
            key = {"Authorization": "Bearer key-1-0123456789ab"}
            statuses = [httpx2.post(url, json={}, headers=key).status_code for _ in range(5)]
        finally:
            proc.kill()
            proc.communicate(timeout=20)
    assert statuses[0] != 429 and statuses[1:] == [429] * 4, statuses
