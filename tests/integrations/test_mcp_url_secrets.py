"""An MCP server URL's credentials (``user:password@``, a query key) never reach what an
action failure becomes: the tool result the model reads, the reply and the trace (rule S12's
failure result, shown without the URL's secrets)."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.integrations.test_mcp_actions import AGENT

import agentscript
from agentscript.integrations.config import McpServerConfig
from agentscript.models.base import Message
from agentscript.models.function import FunctionInfo, FunctionModel
from fakes.ports import refused_port

PASSWORD = "HUNTER2-mcp-pass"
QUERY_KEY = "SECRET-QUERY-KEY"


def _secret_url(port: int) -> str:
    return f"http://bot:{PASSWORD}@127.0.0.1:{port}/mcp?api_key={QUERY_KEY}"


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that takes connections and never answers (the kernel accepts them)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(8)
        yield int(sock.getsockname()[1])


@pytest.fixture
def unreachable_port() -> Iterator[int]:
    """A port that refuses connections (``helpers.refused_port``)."""
    with refused_port() as port:
        yield port


def _echoing_model() -> FunctionModel:
    """Calls the weather tool, then answers with the tool result it read, word for word (as
    a model may repeat an error to the user)."""

    def answer(messages: list[Message], info: FunctionInfo) -> object:
        if info.calls_before == 0:
            return info.call("weather", {"city": "Oslo"})
        return f"The tool said: {messages[-1].content}"

    return FunctionModel(answer)  # type: ignore[arg-type]


def _failing_turn(tmp_path: Path, url: str) -> tuple[str, str]:
    """The tool result the model read and everything the turn left behind, as text."""
    toml = f"[mcp.servers.demo]\nurl = {json.dumps(url)}\nconnect_timeout = 2\ntimeout = 2\n"
    (tmp_path / "agentscript.toml").write_text(toml)
    (tmp_path / "weather.agent").write_text(AGENT)
    agent = agentscript.load(tmp_path / "weather.agent", dialect="agentscript")
    model = _echoing_model()
    traces = tmp_path / "traces"
    reply = agent.session(model=model, trace_dir=traces).send("weather in Oslo?")
    tool_result = model.requests[1].messages[-1].content or ""
    written = [path.read_text() for path in sorted(traces.rglob("*.json"))]
    left = json.dumps([reply.text, reply.error, reply.trace, written])
    return tool_result, left


@pytest.mark.parametrize(
    "server",
    [
        pytest.param(lambda _silent, refused: refused, id="unreachable"),
        pytest.param(lambda silent, _refused: silent, id="connect-timeout"),
    ],
)
def test_S12_mcp_url_credentials_never_reach_the_tool_result_reply_or_trace(
    tmp_path: Path,
    silent_port: int,
    unreachable_port: int,
    server: Callable[[int, int], int],
) -> None:
    port = server(silent_port, unreachable_port)
    tool_result, left = _failing_turn(tmp_path, _secret_url(port))
    # The failure is there, naming the server where it is...
    assert f"MCP server 'demo' (http://127.0.0.1:{port}/mcp)" in tool_result
    assert "The tool said:" in left and "MCP server 'demo'" in left
    # ...and neither secret, anywhere.
    for secret in (PASSWORD, QUERY_KEY):
        assert secret not in tool_result
        assert secret not in left


def test_mcp_server_describe_leaves_out_the_urls_user_password_and_query() -> None:
    config = McpServerConfig("crm", url=_secret_url(8080))
    assert config.describe() == "http://127.0.0.1:8080/mcp"


def test_mcp_url_secrets_are_blotted_out_as_written_and_decoded() -> None:
    from agentscript.integrations.mcp_client import REDACTED, _Connection

    url = "http://bot:p%40ssword@127.0.0.1:9/mcp?api_key=a%20long+key&v=2"
    connection = _Connection(McpServerConfig("crm", url=url))
    # The forms are gathered as the transport is made (not entered: nothing connects).
    connection._transport(pytest.importorskip("mcp"))
    text = "p%40ssword p@ssword a%20long+key a long key"
    assert connection.redact(text) == " ".join([REDACTED] * 4)
