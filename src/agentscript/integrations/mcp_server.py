"""``agentscript mcp-serve AGENT``: an agent exposed as an MCP server (extra ``agentscript[mcp]``).

Two tools:

- ``ask(message)``: one turn in a new session, nothing kept (for one-shot questions);
- ``send(message, session_id?)``: a conversation; without ``session_id`` a session starts and
  its id comes back in the result, to pass with the next message.

Each result is ``{"session_id", "text", "node", "escalated", "ended", "error"}``. A failed
turn is a normal result with ``error`` set (the agent's error message is the text); an
unknown ``session_id`` is a tool error. Sessions are kept in memory, at most
``max_sessions`` (the least recently used goes first), and one turn runs at a time per
session. Over stdio (default) or streamable HTTP on ``--host``/``--port``: there, as with
``agentscript serve``, the keys of ``AGENTSCRIPT_API_KEYS`` are required as ``Authorization:
Bearer`` and listening off loopback needs them.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentscript.commands import ExitCode

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

    from agentscript.engine.session import AgentBase, Reply, Session
    from agentscript.models.base import Model
    from agentscript.server.auth import ApiKeys

DEFAULT_MAX_SESSIONS = 1000
EXTRA_HINT = "install the MCP extra: pip install 'agentscript[mcp]'"


class AgentTools:
    """The state behind the two tools: the agent, its model and the open sessions."""

    def __init__(
        self,
        agent: AgentBase,
        model: Callable[[], Model],
        *,
        trace_dir: Path | None = None,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
    ) -> None:
        self.agent = agent
        self.model = model
        self.trace_dir = trace_dir
        self.max_sessions = max_sessions
        self.sessions: OrderedDict[str, tuple[Session, asyncio.Lock]] = OrderedDict()

    def _new_session(self) -> Session:
        # The id is the only handle on a conversation (over HTTP, any key may pass it): 122
        # random bits, where the engine's default id is made to be short in traces.
        return self.agent.session(
            model=self.model(), trace_dir=self.trace_dir, session_id=uuid.uuid4().hex
        )

    async def ask(self, message: str) -> dict[str, Any]:
        session = self._new_session()
        return result_json(session.id, await session.send_async(message))

    async def send(self, message: str, session_id: str | None) -> dict[str, Any]:
        if session_id:
            entry = self.sessions.get(session_id)
            if entry is None:
                raise LookupError(
                    f"unknown session_id '{session_id}' (it ended or was evicted); "
                    "call send without session_id to start a new conversation"
                )
            self.sessions.move_to_end(session_id)
        else:
            session = self._new_session()
            entry = self.sessions[session.id] = (session, asyncio.Lock())
            while len(self.sessions) > self.max_sessions:
                self.sessions.popitem(last=False)
        session, lock = entry
        async with lock:
            reply = await session.send_async(message)
        if reply.ended:
            self.sessions.pop(session.id, None)
        return result_json(session.id, reply)


def result_json(session_id: str, reply: Reply) -> dict[str, Any]:
    return {
        "session_id": session_id,
        "text": reply.text,
        "node": reply.node,
        "escalated": reply.escalated,
        "ended": reply.ended,
        "error": reply.error,
    }


def build_server(tools: AgentTools) -> MCPServer:
    """The MCP server for ``tools``' agent (tools ``ask`` and ``send``)."""
    try:
        from mcp.server.mcpserver import MCPServer
        from mcp.server.mcpserver.exceptions import ToolError
    except ImportError:
        raise RuntimeError(f"mcp-serve needs the `mcp` package: {EXTRA_HINT}") from None
    name = tools.agent.name
    server = MCPServer(
        f"agentscript-{name}",
        instructions=f"The agent '{name}'. Use `send` for a conversation, `ask` for one question.",
    )

    async def ask(message: str) -> dict[str, Any]:
        """Ask the agent one question in a new conversation (nothing is kept)."""
        return await tools.ask(message)

    async def send(message: str, session_id: str | None = None) -> dict[str, Any]:
        """Send a message to the agent. Omit session_id to start a conversation; pass the
        session_id of the result to continue it."""
        try:
            return await tools.send(message, session_id)
        except LookupError as exc:
            raise ToolError(str(exc.args[0])) from None

    server.add_tool(ask, name="ask", description=f"Ask the agent '{name}' one question.")
    server.add_tool(
        send,
        name="send",
        description=f"Send a message in a conversation with the agent '{name}'.",
    )
    return server


def mcp_serve_command(
    agent: AgentBase,
    *,
    model_spec: str | None,
    base_url: str | None,
    transport: str,
    host: str,
    port: int,
    trace_dir: str | None,
    echo: Callable[[str], None],
) -> ExitCode:
    """Serve until stopped; returns the exit code (``USAGE`` when no model can be built)."""
    from agentscript.chat import choose_model
    from agentscript.models.base import ModelError

    try:
        model = choose_model(agent, spec=model_spec, base_url=base_url)
    except ModelError as exc:
        echo(f"error: {exc}")
        return ExitCode.USAGE
    tools = AgentTools(agent, lambda: model, trace_dir=Path(trace_dir) if trace_dir else None)
    try:
        server = build_server(tools)
    except RuntimeError as exc:
        echo(f"error: {exc}")
        return ExitCode.USAGE
    if transport == "stdio":
        server.run("stdio")
        return ExitCode.OK
    return _serve_http(server, agent.name, host, port, echo)


def _serve_http(
    server: MCPServer, name: str, host: str, port: int, echo: Callable[[str], None]
) -> ExitCode:
    """Streamable HTTP, as ``agentscript serve`` listens: API keys from
    ``AGENTSCRIPT_API_KEYS`` (required off loopback), the port checked before anything is
    printed, and the same stops on signals (``server/runner.py``)."""
    from agentscript.server.auth import ApiKeys, KeyConfigError
    from agentscript.server.command import ServeError, check_port, is_loopback
    from agentscript.server.runner import run

    try:
        keys = ApiKeys.from_env()
    except KeyConfigError as exc:
        echo(f"mcp-serve: {exc}")
        return ExitCode.USAGE
    if not keys.enabled and not is_loopback(host):
        echo(
            f"mcp-serve: refusing to listen on {host} without API keys: anyone who can reach "
            "it could use the agent. Set AGENTSCRIPT_API_KEYS (keys, or a file of keys), or "
            "listen on 127.0.0.1"
        )
        return ExitCode.USAGE
    try:
        check_port(host, port)
    except ServeError as exc:
        echo(f"mcp-serve: {exc}")
        return ExitCode.USAGE
    app: Any = server.streamable_http_app(host=host)
    if keys.enabled:
        app = BearerKeys(app, keys)
    echo(f"mcp-serve: agent '{name}' at http://{host}:{port}/mcp")
    return ExitCode(run(app, host=host, port=port, log_level="warning"))


class BearerKeys:
    """ASGI middleware: an HTTP request without ``Authorization: Bearer`` and one of the keys
    gets ``401``, as from ``agentscript serve``."""

    def __init__(self, app: Any, keys: ApiKeys) -> None:
        self.app = app
        self.keys = keys

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or ())
            given = headers.get(b"authorization", b"").decode("latin-1")
            if self.keys.owner(given) is None:
                await _unauthorized(send)
                return
        await self.app(scope, receive, send)


async def _unauthorized(send: Any) -> None:
    body = json.dumps(
        {
            "error": {
                "code": "unauthorized",
                "message": "send an API key as 'Authorization: Bearer <key>'",
            }
        }
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"www-authenticate", b"Bearer"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
