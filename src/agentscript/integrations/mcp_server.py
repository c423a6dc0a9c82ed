"""``agentscript mcp-serve AGENT``: an agent exposed as an MCP server (extra ``agentscript[mcp]``).

Two tools:

- ``ask(message)``: one turn in a new session, nothing kept (for one-shot questions);
- ``send(message, session_id?)``: a conversation; without ``session_id`` a session starts and
  its id comes back in the result, to pass with the next message.

Each result is ``{"session_id", "text", "node", "escalated", "ended", "error",
"confirmation"}``. A failed
turn is a normal result with ``error`` set (the agent's error message is the text); an
unknown ``session_id``, a message over ``MAX_MESSAGE_CHARS``, a session whose previous turn
still runs after ``LOCK_WAIT`` and a failure of the server itself are one-line tool errors.
Sessions are kept in memory, at most ``max_sessions`` (the least recently used idle one goes
first), and one turn runs at a time per session. Over stdio (default) or streamable HTTP on
``--host``/``--port``: there, as with ``agentscript serve``, the keys of
``AGENTSCRIPT_API_KEYS`` are required as ``Authorization: Bearer`` (listening off loopback
needs them), a session belongs to the key that started it (another key's ``session_id`` is
answered as an unknown one), and each key gets ``--rate-limit`` requests per second (one more
is answered ``429`` with ``Retry-After``).

One JSON-RPC message is at most ``MAX_WIRE_MESSAGE_BYTES`` on either transport. Over HTTP a
longer body gets ``413``; over stdio (``mcp_stdio``, which also says how signals and the end
of stdin stop it there) a longer line is dropped as it is read and answered with a JSON-RPC
error.

Over HTTP a graceful stop (``SIGTERM``, a first Ctrl-C) stops as ``agentscript serve`` does:
no new connection, and the tool calls already running get their result within
``--shutdown-grace`` seconds (``SHUTDOWN_GRACE``); those still running then are cut (their
client gets ``503 shutting_down``, the log says how many). Each result is therefore sent as
one JSON response, not an SSE stream: the SSE library behind the SDK ends every open stream
the moment the signal comes, a result not yet sent included.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentscript.commands import ExitCode
from agentscript.server.config import ServerConfig, burst_for

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

    from agentscript.engine.session import AgentBase, Reply, Session
    from agentscript.models.base import Model
    from agentscript.server.auth import ApiKeys
    from agentscript.server.ratelimit import RateLimiter

DEFAULT_MAX_SESSIONS = 1000
EXTRA_HINT = "install the MCP extra: pip install 'agentscript[mcp]'"
# The bounds of `agentscript serve` (server/config.py), for the same reasons: a message is
# kept in its session's history, and a turn waits this long for the one before it.
MAX_MESSAGE_CHARS = 16_000
LOCK_WAIT = 30.0
# The sessions' histories kept in all, in characters (the bound of serve's kept sessions).
MAX_KEPT_CHARS = 200_000_000
# After SIGTERM, seconds the tool calls running get to finish: serve's --shutdown-grace
# default (server/config.py), below Kubernetes' 30 s before SIGKILL.
SHUTDOWN_GRACE = 25
# What the client of a call cut at shutdown is told.
CUT_AT_SHUTDOWN = "the server stopped before this turn finished: send it again"
# One JSON-RPC message, in bytes, on either transport: the SDK's own bound on an HTTP body
# (mcp.server.transport_security.DEFAULT_MAX_REQUEST_BODY_SIZE, 4 MiB), now also over stdio,
# where the SDK reads a line whole however long it is. A tool call's arguments are far below
# it (MAX_MESSAGE_CHARS).
MAX_WIRE_MESSAGE_BYTES = 4 * 1024 * 1024
# Where BearerKeys leaves an HTTP request's owner id (its key's hash, "" without keys) in the
# ASGI scope; the tools read it from the request the SDK hands each call. Not a contextvar:
# the SDK runs an MCP session's calls in a task started by the request that opened it, whose
# context (and key) they would all see.
OWNER_SCOPE_KEY = "agentscript.owner"

log = logging.getLogger("agentscript.mcp")


class ToolRefused(Exception):
    """A call the tools refuse; the message, one line, is the tool error the client sees."""


@dataclass(frozen=True, slots=True)
class KeptSession:
    """An open conversation, the lock its turns take one at a time, and its owner."""

    session: Session
    lock: asyncio.Lock
    owner: str  # the owner id of the key that started it ("" over stdio or without keys)


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
        self.sessions: OrderedDict[str, KeptSession] = OrderedDict()
        # Each kept session's history size as of its last turn, and their sum (MAX_KEPT_CHARS).
        self._sizes: dict[str, int] = {}
        self.chars = 0
        # Tool calls running now; once stopping, the shutdown waits for them (finish_turns).
        self.running = 0
        self.stopping = False

    def _new_session(self) -> Session:
        # The id is the only handle on a conversation (over stdio, or over HTTP without
        # keys, anyone may pass it): 122 random bits, where the engine's default id is made to
        # be short in traces.
        return self.agent.session(
            model=self.model(), trace_dir=self.trace_dir, session_id=uuid.uuid4().hex
        )

    async def ask(self, message: str) -> dict[str, Any]:
        with self._call():
            _check_length(message)
            session = self._new_session()
            return result_json(session.id, await session.send_async(message))

    async def send(self, message: str, session_id: str | None, owner: str = "") -> dict[str, Any]:
        """A turn of the session ``session_id`` (of ``owner``'s), or of a new one of theirs."""
        with self._call():
            return await self._send(message, session_id, owner)

    @contextlib.contextmanager
    def _call(self) -> Iterator[None]:
        if self.stopping:
            # uvicorn takes no new connection once stopping; this is for a call that still
            # reaches the tools (one the SDK had read already).
            raise ToolRefused("the server is shutting down: send this again later")
        self.running += 1
        try:
            yield
        finally:
            self.running -= 1

    async def finish_turns(self, grace: float) -> int:
        """At shutdown: refuse new calls and wait for the running ones, within ``grace``
        seconds of the moment the server began to stop (``ShutdownClock``, which a stop at
        once ends). How many still run: the caller cuts them."""
        from agentscript.server.shutdown import ShutdownClock, within_grace

        self.stopping = True
        ShutdownClock.mark()  # with no connection open, the shutdown begins here
        await within_grace(lambda: self.running > 0, grace)
        return self.running

    async def _send(self, message: str, session_id: str | None, owner: str) -> dict[str, Any]:
        _check_length(message)
        if session_id:
            kept = self._owned(session_id, owner)
            self.sessions.move_to_end(session_id)
        else:
            kept = KeptSession(self._new_session(), asyncio.Lock(), owner)
            self.sessions[kept.session.id] = kept
            self._evict()
        session, lock = kept.session, kept.lock
        try:
            async with asyncio.timeout(LOCK_WAIT):
                await lock.acquire()
        except TimeoutError:
            raise ToolRefused(
                f"session {session.id} is busy: another message of it ran for over "
                f"{LOCK_WAIT:g} s; send this one again later"
            ) from None
        try:
            reply = await session.send_async(message)
        except Exception:
            # Not a failed turn (that is a reply with its error): the session's state is
            # unknown, so it is not offered again.
            self._forget(session.id)
            raise
        finally:
            lock.release()
        if reply.ended:
            self._forget(session.id)
        elif session.id in self.sessions:
            size = session.history_chars()  # its history grew by this turn
            self.chars += size - self._sizes.get(session.id, 0)
            self._sizes[session.id] = size
            self._evict()
        return result_json(session.id, reply)

    def _owned(self, session_id: str, owner: str) -> KeptSession:
        """The kept session ``session_id`` if ``owner`` started it. Another key's session is
        answered as one that does not exist, as serve answers it: its id is no proof."""
        kept = self.sessions.get(session_id)
        if kept is None or kept.owner != owner:
            raise ToolRefused(
                f"unknown session_id '{session_id}' (it ended or was evicted); "
                "call send without session_id to start a new conversation"
            )
        return kept

    def _evict(self) -> None:
        """Forget the least recently used sessions past ``max_sessions`` or past
        ``MAX_KEPT_CHARS`` of histories in all, never one whose turn is running (its result
        would name a session already gone)."""
        for sid, kept in list(self.sessions.items()):
            if len(self.sessions) <= self.max_sessions and self.chars <= MAX_KEPT_CHARS:
                return
            if not kept.lock.locked():
                self._forget(sid)

    def _forget(self, session_id: str) -> None:
        self.sessions.pop(session_id, None)
        self.chars -= self._sizes.pop(session_id, 0)


def _check_length(message: str) -> None:
    if len(message) > MAX_MESSAGE_CHARS:
        raise ToolRefused(
            f"the message is {len(message)} characters long; at most {MAX_MESSAGE_CHARS}"
        )


def result_json(session_id: str, reply: Reply) -> dict[str, Any]:
    return {
        "session_id": session_id,
        "text": reply.text,
        "node": reply.node,
        "escalated": reply.escalated,
        "ended": reply.ended,
        "error": reply.error,
        # The yes/no question a tool call waits for (Mantle confirmations), as serve says it.
        "confirmation": reply.confirmation,
    }


async def _as_tool_error(
    call: Awaitable[dict[str, Any]], tool_error: type[Exception]
) -> dict[str, Any]:
    """``call``'s result; a refusal, or a failure of the server itself (logged in one line, not
    a traceback), as a one-line tool error."""
    try:
        return await call
    except ToolRefused as exc:
        raise tool_error(str(exc)) from None
    except Exception as exc:
        log.error("the turn failed: %s: %s", type(exc).__name__, exc)
        raise tool_error(f"the turn failed: {type(exc).__name__}: {exc}") from None


def build_server(tools: AgentTools) -> MCPServer:
    """The MCP server for ``tools``' agent (tools ``ask`` and ``send``)."""
    try:
        from mcp.server.mcpserver import Context, MCPServer
        from mcp.server.mcpserver.exceptions import ToolError
    except ImportError:
        raise RuntimeError(f"mcp-serve needs the `mcp` package: {EXTRA_HINT}") from None
    name = tools.agent.name
    server = _one_line_argument_errors(MCPServer)(
        f"agentscript-{name}",
        instructions=f"The agent '{name}'. Use `send` for a conversation, `ask` for one question.",
        # Its INFO lines name every request and session; errors still show.
        log_level="WARNING",
    )

    async def ask(message: str) -> dict[str, Any]:
        """Ask the agent one question in a new conversation (nothing is kept)."""
        return await _as_tool_error(tools.ask(message), ToolError)

    async def send(ctx: Context, message: str, session_id: str | None = None) -> dict[str, Any]:
        """Send a message to the agent. Omit session_id to start a conversation; pass the
        session_id of the result to continue it."""
        return await _as_tool_error(tools.send(message, session_id, owner_of(ctx)), ToolError)

    # This module's annotations are strings, which the SDK resolves in the module's globals,
    # where the optional SDK is not imported: it finds the Context parameter by this class.
    send.__annotations__["ctx"] = Context

    server.add_tool(ask, name="ask", description=f"Ask the agent '{name}' one question.")
    server.add_tool(
        send,
        name="send",
        description=f"Send a message in a conversation with the agent '{name}'.",
    )
    return server


def _one_line_argument_errors(base: type[MCPServer]) -> type[MCPServer]:
    """``base`` whose answer to arguments that fail the tool's schema is one line, the first
    error's location and message (``mcp_client.errors_line``): the SDK's is pydantic's
    whole text, a line per error and a link to pydantic's site, which the client's model
    reads."""
    from mcp.server.mcpserver.exceptions import ToolError, UnexpectedToolError
    from pydantic import ValidationError

    from agentscript.integrations.mcp_client import errors_line

    class OneLineArgumentErrors(base):  # type: ignore[valid-type,misc]
        async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
            try:
                return await super().call_tool(name, arguments, context)
            except ToolError as exc:
                cause = exc.__cause__
                if isinstance(exc, UnexpectedToolError) or not isinstance(cause, ValidationError):
                    raise
                # The SDK logs the fields of a ValidationError cause: it stays the cause.
                errors = cause.errors(include_url=False, include_input=False, include_context=False)
                raise ToolError(
                    f"Error executing tool {name}: invalid arguments: {errors_line(errors)}"
                ) from cause

    return OneLineArgumentErrors


def owner_of(ctx: Any) -> str:
    """The owner id BearerKeys left on the HTTP request of a tool call; "" over stdio, where
    there is no request (and no key)."""
    request = ctx.request_context.request
    scope = getattr(request, "scope", None) or {}
    return str(scope.get(OWNER_SCOPE_KEY, ""))


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
    shutdown_grace: int = SHUTDOWN_GRACE,
    rate_limit: float = ServerConfig.rate_limit,
) -> ExitCode:
    """Serve until stopped; returns the exit code (``USAGE`` when no model can be built)."""
    from agentscript.chat import choose_model
    from agentscript.models.base import ModelError

    try:
        model = choose_model(agent, spec=model_spec, base_url=base_url)
    except ModelError as exc:
        echo(f"error: {exc}")
        return ExitCode.USAGE
    if trace_dir:
        try:
            Path(trace_dir).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            echo(f"error: --trace-dir {trace_dir}: {exc.strerror or exc}")
            return ExitCode.USAGE
    tools = AgentTools(agent, lambda: model, trace_dir=Path(trace_dir) if trace_dir else None)
    _log_lines_to_stderr()
    try:
        server = build_server(tools)
    except RuntimeError as exc:
        echo(f"error: {exc}")
        return ExitCode.USAGE
    if transport == "stdio":
        return _serve_stdio(server, tools, shutdown_grace)
    return _serve_http(
        server,
        tools,
        host=host,
        port=port,
        shutdown_grace=shutdown_grace,
        rate_limit=rate_limit,
        echo=echo,
    )


def _serve_stdio(server: MCPServer, tools: AgentTools, shutdown_grace: int) -> ExitCode:
    """Over stdin and stdout until stdin ends or a signal stops it (``mcp_stdio``)."""
    import functools

    import anyio

    from agentscript.integrations.mcp_stdio import serve_stdio

    try:
        return anyio.run(functools.partial(serve_stdio, server, tools, grace=shutdown_grace))
    except KeyboardInterrupt:  # a Ctrl-C before the server took the signals
        return ExitCode.INTERRUPTED


# One line per record, as serve's log lines (server/logs.py), without the request id.
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def _log_lines_to_stderr() -> None:
    """Log one plain line per record to stderr. Set before the SDK's server is built: its
    ``logging.basicConfig`` then does nothing, where it installed rich's handler, which wraps
    a line at 80 columns when stderr is not a terminal, so a one-line error took several lines
    of a collector's log."""
    logging.basicConfig(level=logging.WARNING, format=LOG_FORMAT, stream=sys.stderr)


def _serve_http(
    server: MCPServer,
    tools: AgentTools,
    *,
    host: str,
    port: int,
    shutdown_grace: int,
    rate_limit: float,
    echo: Callable[[str], None],
) -> ExitCode:
    """Streamable HTTP, as ``agentscript serve`` listens: API keys from
    ``AGENTSCRIPT_API_KEYS`` (required off loopback), the same rate limit per key, the port
    bound once before anything is printed and kept for uvicorn (``server/command.py``
    ``bind_sockets``: the line names the port really bound, ``--port 0`` included), and the
    same stops on signals (``server/runner.py``)."""
    from agentscript.server.auth import ApiKeys, KeyConfigError
    from agentscript.server.command import ServeError, bind_sockets, is_loopback
    from agentscript.server.nodelay import protocol
    from agentscript.server.ratelimit import RateLimiter
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
        sockets = bind_sockets(host, port)
    except ServeError as exc:
        echo(f"mcp-serve: {exc}")
        return ExitCode.USAGE
    try:
        # JSON, not SSE: uvicorn then waits for a running call's answer (the module's docstring).
        starlette = server.streamable_http_app(
            host=host, json_response=True, max_request_body_size=MAX_WIRE_MESSAGE_BYTES
        )
        starlette.router.lifespan_context = _draining(
            starlette.router.lifespan_context, tools, shutdown_grace
        )
        limiter = RateLimiter(rate_limit, burst_for(rate_limit))
        app = BearerKeys(CutAtShutdown(starlette), keys, limiter)
        port = sockets[0].getsockname()[1]  # the one the system chose for --port 0
        echo(f"mcp-serve: agent '{tools.agent.name}' at http://{host}:{port}/mcp")
        code = run(
            app,
            sockets=sockets,
            host=host,
            port=port,
            log_level="warning",
            # Its connections mark when the shutdown began (ShutdownClock), as serve's do.
            http=protocol(),
            timeout_graceful_shutdown=shutdown_grace,
        )
    finally:
        for sock in sockets:
            sock.close()
    return ExitCode(code)


def _draining(inner: Any, tools: AgentTools, grace: float) -> Any:
    """The app's lifespan ``inner`` (the SDK's session manager), which at shutdown first waits
    for the tool calls still running: leaving it cancels every one of them."""

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[Any]:
        from agentscript.server.shutdown import ShutdownClock

        ShutdownClock.reset()
        async with inner(app) as state:
            yield state
            cut = await tools.finish_turns(grace)
            if cut:
                log.error("shutdown: %d turn(s) cut after the %g s grace", cut, grace)

    return lifespan


class CutAtShutdown:
    """ASGI middleware for the stops: a request uvicorn cancels at shutdown, past the grace or
    on a stop at once (nothing else cancels one), gets ``503 shutting_down`` with
    ``Retry-After`` if its answer had not begun, where uvicorn answered a plain-text ``500``
    and logged a traceback. A response the SDK leaves unfinished (the client's listening SSE
    stream, which its SSE library ends at the signal) is finished here, where uvicorn logged
    an error at every graceful stop."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        started = finished = False

        async def sending(message: Any) -> None:
            nonlocal started, finished
            started = started or message["type"] == "http.response.start"
            finished = message["type"] == "http.response.body" and not message.get("more_body")
            await send(message)

        try:
            await self.app(scope, receive, sending)
            if scope["type"] == "http" and started and not finished:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
        except asyncio.CancelledError:
            if scope["type"] != "http" or started:
                raise
            task = asyncio.current_task()
            if task is not None:
                task.uncancel()  # handled here: the answer below awaits again
            await _error(send, 503, "shutting_down", CUT_AT_SHUTDOWN, [(b"retry-after", b"1")])


# The MCP transport sessions whose owner is remembered (least recently started dropped first).
MAX_TRANSPORT_OWNERS = 100_000
# What another key's request names instead of a transport session it does not own: an id the
# SDK never gives (its ids are hex), so the SDK answers exactly as for an unknown session.
NO_SUCH_TRANSPORT = b"not-a-session"


class BearerKeys:
    """ASGI middleware, as ``agentscript serve`` authenticates: an HTTP request without
    ``Authorization: Bearer`` and one of the keys gets ``401`` (with keys on), one past its
    key's rate limit ``429`` with ``Retry-After``; the others go on with their owner id (the
    key's hash, "" without keys) in the scope, at ``OWNER_SCOPE_KEY``.

    An MCP transport session (``mcp-session-id``) belongs to the key whose request opened it,
    as conversations do: another key naming it is answered as for an unknown one, so it can
    neither end it (``DELETE``) nor read its stream."""

    def __init__(self, app: Any, keys: ApiKeys, limiter: RateLimiter) -> None:
        self.app = app
        self.keys = keys
        self.limiter = limiter
        self.transports: OrderedDict[bytes, str] = OrderedDict()  # mcp-session-id -> owner

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or ())
        owner = self.keys.owner(headers.get(b"authorization", b"").decode("latin-1"))
        if owner is None:
            await _error(
                send,
                401,
                "unauthorized",
                "send an API key as 'Authorization: Bearer <key>'",
                [(b"www-authenticate", b"Bearer")],
            )
            return
        wait = self.limiter.take(owner)
        if wait > 0:
            await self._rate_limited(send, wait)
            return
        named = headers.get(b"mcp-session-id")
        if named is None:
            send = self._noting_transport(send, owner)
        elif self.transports.get(named, owner) != owner:
            scope = {**scope, "headers": _with_header(scope, b"mcp-session-id", NO_SUCH_TRANSPORT)}
        await self.app({**scope, OWNER_SCOPE_KEY: owner}, receive, send)

    def _noting_transport(self, send: Any, owner: str) -> Any:
        """``send``, remembering the owner of a transport session its answer opens."""

        async def noting(message: Any) -> None:
            if message["type"] == "http.response.start":
                opened = dict(message.get("headers") or ()).get(b"mcp-session-id")
                if opened is not None:
                    self.transports[opened] = owner
                    while len(self.transports) > MAX_TRANSPORT_OWNERS:
                        self.transports.popitem(last=False)
            await send(message)

        return noting

    async def _rate_limited(self, send: Any, wait: float) -> None:
        from agentscript.server.ratelimit import rate_limited_message, retry_after

        message = rate_limited_message(self.limiter.rate, wait)
        retry = retry_after(wait).encode()
        await _error(send, 429, "rate_limited", message, [(b"retry-after", retry)])


def _with_header(scope: Any, name: bytes, value: bytes) -> list[tuple[bytes, bytes]]:
    """The request's headers with ``name`` set to ``value`` (lower-case ``name``)."""
    return [(k, v) for k, v in scope.get("headers") or () if k.lower() != name] + [(name, value)]


async def _error(
    send: Any, status: int, code: str, message: str, headers: list[tuple[bytes, bytes]]
) -> None:
    """An error answer in the shape of ``agentscript serve``'s."""
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
