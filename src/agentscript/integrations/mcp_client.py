"""MCP servers as action targets: ``mcp://SERVER/TOOL`` (Agent Script), ``mcp/SERVER:TOOL``
(Mantle), over the official ``mcp`` SDK (extra ``agentscript[mcp]``).

Contract:

- one client session per configured server per :class:`McpHub`, started on the first call,
  reused by every later call, session and turn, and started again on the next call after the
  server crashed or the connection broke;
- one connection attempt at a time per server: calls that come while it is under way wait for
  its outcome, and a failed attempt (``connect_timeout`` included) fails the calls of the next
  :data:`FAILED_CONNECT_HOLD` seconds at once, with its message, before another is made; an
  attempt cut by its ``connect_timeout`` stops its server at once (no close grace is waited
  out for a server that never became ready);
- every call runs under the server's ``timeout``; a tool result with ``isError``, a protocol
  error, a crash, an unreachable server or a timeout raise :class:`ActionError` with a message
  naming the server and the tool (rule S12), never hang and never show a traceback;
- a call that times out or fails closes the connection (a stdio server is stopped): a server
  still writing an answer nobody waits for must not keep the hub's loop reading it; the next
  call starts the server again;
- a malformed JSON-RPC message from the server (say ``"result": 42``) fails the calls in
  flight at once, as a protocol error, instead of leaving them to their timeout;
- an HTTP answer's body is bounded (:data:`~agentscript.models.sdk_provider.MAX_ANSWER_BYTES`,
  the bound the model clients keep); the SDK bounds each server-sent event itself;
- header, environment and argument values are expanded from ``${VAR}`` when connecting and
  never appear in a message or a trace: a header value that HTTP does not allow (a trailing
  newline) is refused before any request, and every header and environment value, and every
  argument that names a variable, as expanded, is blotted out of error messages and of the
  text of tool results (a result echoing a key); so are a server URL's user, password and
  query string (a message names the URL without them, and their values are blotted out of the
  transport's own messages). A message names a server's command with its arguments as
  written, ``${VAR}`` unexpanded.

The sessions live on one background event loop owned by the hub: ``Session.send`` runs each
turn under its own ``asyncio.run``, and a client session is bound to the loop that opened it.
Calls from any loop are handed to that loop and awaited from the caller's.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import unquote_plus, urlsplit

from agentscript.actions.registry import ActionError, ActionRequest, Handler
from agentscript.integrations.config import ConfigError, McpServerConfig, expand_env
from agentscript.redaction import ENV_REF, secret_forms, without_secrets

if TYPE_CHECKING:
    from mcp import ClientSession

T = TypeVar("T")
EXTRA_HINT = "install the MCP extra: pip install 'agentscript[mcp]'"
RESTART_NOTE = "(the server will be restarted on the next call)"
REDACTED = "[redacted]"
# A pydantic error's location and message, in one line (errors_line): a location can name a
# key of what was read, as long as the message it came in.
MAX_ERROR_LINE_CHARS = 300
# Seconds a failed connection attempt fails the calls to its server at once, with its message,
# before another attempt is made: a burst of calls to a server that does not answer then costs
# one connect_timeout, not one each.
FAILED_CONNECT_HOLD = 5.0
# Seconds a ready session gets to end its transport when closed (a stdio server then ends).
CLOSE_GRACE = 5.0
# Printable ASCII and tab inside, nothing blank at the ends: what an HTTP header value may be
# (h11 refuses the rest, and its error shows the value).
_HEADER_VALUE = re.compile(r"[\x21-\x7e](?:[\x20-\x7e\t]*[\x21-\x7e])?")

# The SDK logs each unparsable line from a stdio server with its traceback; without a handler
# of its own, Python's last-resort handler would print that into the user's terminal.
logging.getLogger("mcp.client").addHandler(logging.NullHandler())
# Its client session logs under the bare name "client" (mcp/client/session.py), say a warning
# for each call of a tool it was not shown listed, which reached the terminal the same way.
logging.getLogger("client").addHandler(logging.NullHandler())


class McpProtocolError(Exception):
    """The server broke the protocol (a malformed message, an oversized answer)."""


@dataclass(frozen=True, slots=True)
class McpTool:
    """A tool a server lists: its name, description and JSON schemas."""

    name: str
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any] | None


def parse_target(target: str) -> tuple[str, str] | None:
    """``mcp://SERVER/TOOL`` or ``mcp/SERVER:TOOL`` -> ``(SERVER, TOOL)``; None otherwise."""
    if target.startswith("mcp://"):
        server, sep, tool = target[len("mcp://") :].partition("/")
    elif target.startswith("mcp/"):
        server, sep, tool = target[len("mcp/") :].partition(":")
    else:
        return None
    if not sep or not server or not tool or "/" in tool:
        return None
    return server, tool


def _import_sdk() -> Any:
    try:
        import mcp
    except ImportError:
        raise ActionError(f"MCP actions need the `mcp` package: {EXTRA_HINT}") from None
    return mcp


class _LoopThread:
    """One event loop on a daemon thread: where the hub's client sessions live."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="agentscript-mcp", daemon=True
        )
        self._thread.start()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)


class _Connection:
    """One server's client session, owned by a task on the hub's loop."""

    def __init__(self, config: McpServerConfig) -> None:
        self.config = config
        self.session: ClientSession | None = None
        self.tools: dict[str, McpTool] | None = None
        self.starts = 0
        self.secrets: frozenset[str] = frozenset()
        # Those of values read from the environment (``${VAR}``) or a URL's credentials: the
        # ones blotted out of a successful result too. A literal value (``MODE = "production"``,
        # ``Accept: application/json``) is no secret, and blotting it out of a tool's answer
        # would change the data.
        self.result_secrets: frozenset[str] = frozenset()
        self._fault: asyncio.Future[str] | None = None
        self._stop: asyncio.Event | None = None
        self._ready: asyncio.Future[ClientSession] | None = None
        self._task: asyncio.Task[None] | None = None
        # The attempt under way, which every caller awaits; the last failed one and its time.
        self._attempt: asyncio.Future[ClientSession] | None = None
        self._failed: tuple[float, str] | None = None

    async def ensure(self) -> ClientSession:
        """The live session, started (again) when there is none: by the attempt under way if
        there is one, else by a new one unless one failed less than FAILED_CONNECT_HOLD ago."""
        if self.session is not None and self._task is not None and not self._task.done():
            return self.session
        if self._attempt is None:
            if self._failed is not None:
                at, message = self._failed
                if time.monotonic() - at < FAILED_CONNECT_HOLD:
                    raise ActionError(
                        f"{message} (not tried again within {FAILED_CONNECT_HOLD:g} s: "
                        "FAILED_CONNECT_HOLD)"
                    )
            self._attempt = asyncio.ensure_future(self._connect())
            # Read even when every caller gave up on it.
            self._attempt.add_done_callback(lambda f: f.cancelled() or f.exception())
        # Shielded: a caller that gives up does not cut the attempt the others wait for.
        return await asyncio.shield(self._attempt)

    async def _connect(self) -> ClientSession:
        try:
            await self.close()
            loop = asyncio.get_running_loop()
            ready: asyncio.Future[ClientSession] = loop.create_future()
            # After a connect timeout nobody awaits ``ready``; a late failure is still read.
            ready.add_done_callback(lambda f: f.cancelled() or f.exception())
            self._ready = ready
            self._stop = asyncio.Event()
            self._fault = loop.create_future()
            self._task = asyncio.create_task(self._own(ready, self._stop))
            try:
                session = await asyncio.wait_for(asyncio.shield(ready), self.config.connect_timeout)
            except TimeoutError:
                await self.close()
                raise ActionError(
                    f"MCP server '{self.config.name}' ({self.config.describe()}) did not answer "
                    f"within {self.config.connect_timeout:g} s (connect_timeout)"
                ) from None
            except ActionError:
                await self.close()
                raise
            self.session = session
            self._failed = None
            self.starts += 1
            return session
        except ActionError as exc:
            self._failed = (time.monotonic(), str(exc))
            raise
        finally:
            self._attempt = None

    async def _own(self, ready: asyncio.Future[ClientSession], stop: asyncio.Event) -> None:
        """Open the transport and the session, hand it over, hold it until told to stop."""
        mcp = _import_sdk()
        try:
            async with contextlib.AsyncExitStack() as stack:
                streams = await stack.enter_async_context(self._transport(mcp))
                session = await stack.enter_async_context(
                    mcp.ClientSession(streams[0], streams[1], message_handler=self._on_message)
                )
                await self.guarded(session.initialize())
                ready.set_result(session)
                await stop.wait()
        except BaseException as exc:  # reported to the waiting caller, never raised here
            if not ready.done():
                ready.set_exception(self._connect_error(exc))
            if isinstance(exc, asyncio.CancelledError):
                raise
        finally:
            # A task that close() gave up on may end after the next session is in place.
            if self._task is asyncio.current_task():
                self.session = None

    async def guarded(self, work: Awaitable[T]) -> T:
        """``work``'s result, or McpProtocolError as soon as the server breaks the protocol."""
        task = asyncio.ensure_future(work)
        fault = self._fault
        try:
            if fault is not None:
                waited: set[asyncio.Future[Any]] = {task, fault}
                await asyncio.wait(waited, return_when=asyncio.FIRST_COMPLETED)
            if fault is not None and fault.done() and not task.done():
                raise McpProtocolError(fault.result())
            return await task
        finally:
            if not task.done():
                task.cancel()

    async def _on_message(self, message: Any) -> None:
        """The session's message handler: transport faults that doom the calls in flight."""
        reason = _protocol_fault(message)
        if reason and self._fault is not None and not self._fault.done():
            self._fault.set_result(reason)

    def _transport(self, mcp: Any) -> contextlib.AbstractAsyncContextManager[Any]:
        config = self.config
        table = f"[mcp.servers.{config.name}]"
        if config.command:
            env = {k: expand_env(v, f"{table} env {k}") for k, v in config.env}
            args = [expand_env(a, f"{table} args[{i}]") for i, a in enumerate(config.args)]
            # An argument naming a variable may carry a key (`--api-key=${KEY}`); the others
            # are shown as written anyway (describe).
            named = [(a, value) for a, value in zip(config.args, args, strict=True) if a != value]
            self.secrets = secret_forms(
                [*config.env, *(("args", a) for a, _ in named)],
                [*env.values(), *(value for _, value in named)],
            )
            kept = [(t, v) for t, v in zip(config.env, env.values(), strict=True) if _credential(t)]
            kept += [(("args", a), value) for a, value in named if _credential(("args", a))]
            self.result_secrets = secret_forms([t for t, _ in kept], [v for _, v in kept])
            # ${PYTHON} is the interpreter running agentscript: a server written in Python
            # then finds the packages agentscript was installed with.
            command = expand_env(
                config.command, f"{table} command", {**os.environ, "PYTHON": sys.executable}
            )
            params = mcp.StdioServerParameters(
                command=command, args=args, env=env or None, cwd=config.cwd
            )
            # The server's own log goes nowhere: its stderr would interleave with the chat.
            opened: contextlib.AbstractAsyncContextManager[Any] = mcp.stdio_client(
                params, errlog=_devnull()
            )
            return opened
        from mcp.client.streamable_http import streamable_http_client
        from mcp.shared._httpx_utils import create_mcp_http_client

        headers = {k: expand_env(v, f"{table} header {k}") for k, v in config.headers}
        self.secrets = secret_forms(config.headers, [*headers.values(), *_url_secrets(config.url)])
        from_env = [
            (t, v) for t, v in zip(config.headers, headers.values(), strict=True) if t[1] != v
        ]
        self.result_secrets = secret_forms(
            [t for t, _ in from_env], [*(v for _, v in from_env), *_url_secrets(config.url)]
        )
        for name, value in headers.items():
            _check_header(name, value, table)
        # The SDK's own client (its timeouts and redirect rules), asked for uncompressed answers
        # and bounded as the model clients' are: the cap counts bytes as they arrive.
        client = create_mcp_http_client(headers={"Accept-Encoding": "identity", **headers})
        client.event_hooks = {"response": [_capped_answer_hook(type(client))]}
        return streamable_http_client(config.url or "", http_client=client)

    def describe(self, exc: BaseException) -> str:
        """:func:`_describe` with every expanded header and environment value blotted out."""
        return _describe(exc, self.redact)

    def redact(self, text: str) -> str:
        return without_secrets(text, self.secrets, REDACTED)

    def redact_outputs(self, outputs: dict[str, Any]) -> dict[str, Any]:
        """A tool's outputs with every value read from the environment blotted out of their
        text (keys included): a result goes to the model and the trace as an error does."""
        if not self.result_secrets:
            return outputs

        def redact(text: str) -> str:
            return without_secrets(text, self.result_secrets, REDACTED)

        try:
            redacted: dict[str, Any] = _redacted(outputs, redact)
        except RecursionError:  # nested past Python's stack: nothing of it can be checked
            return {"result": f"{REDACTED} (a result nested too deep to check for secrets)"}
        return redacted

    def _connect_error(self, exc: BaseException) -> ActionError:
        if isinstance(exc, ActionError):
            return exc
        if isinstance(exc, ConfigError):
            return ActionError(str(exc))
        detail = self.describe(exc)
        return ActionError(
            f"cannot start MCP server '{self.config.name}' ({self.config.describe()}): {detail}"
        )

    async def close(self) -> None:
        """End the session and its transport (the stdio process ends with it): a ready one is
        told to stop and gets CLOSE_GRACE to end; one still opening (a server that has not
        answered ``initialize``) is cancelled at once, as it would never see the stop."""
        task, stop, ready = self._task, self._stop, self._ready
        self._task = self._stop = self._ready = None
        self._fault = None
        self.session = None
        if task is None or stop is None:
            return
        if ready is not None and ready.done() and not ready.cancelled() and not ready.exception():
            stop.set()
        else:
            task.cancel()
        # The transport's own shutdown is bounded (the SDK's stdio client ends its process);
        # a broken transport may fail while closing: it is gone anyway.
        done, _ = await asyncio.wait({task}, timeout=CLOSE_GRACE)
        if not done:
            task.cancel()


class McpHub:
    """The configured MCP servers of a process and one client session per server."""

    def __init__(self, servers: Mapping[str, McpServerConfig]) -> None:
        self.servers = dict(servers)
        self._connections: dict[str, _Connection] = {}
        self._loop: _LoopThread | None = None
        self._guard = threading.Lock()

    # ----------------------------------------------------------------- public API

    def handler(self) -> Handler:
        """The ``mcp`` scheme handler (``register_handler("mcp", hub.handler())``)."""
        return self.handle

    async def handle(self, request: ActionRequest) -> dict[str, Any]:
        parsed = parse_target(request.target or "")
        if parsed is None:
            raise ActionError(
                f"action '{request.name}': '{request.target}' is not an MCP target; "
                "write mcp://SERVER/TOOL"
            )
        server, tool = parsed
        return await self.call_tool(server, tool, request.inputs, action=request.name)

    async def call_tool(
        self, server: str, tool: str, arguments: Mapping[str, Any], *, action: str | None = None
    ) -> dict[str, Any]:
        """The tool's outputs: its structured content, else its text (a JSON object text
        becomes that object, other text ``{"result": text}``). Failures raise ActionError."""
        connection = self._connection(server, action or tool)
        return await self._on_loop(self._call(connection, tool, dict(arguments)))

    async def list_tools(self, server: str) -> list[McpTool]:
        """The server's tools (connecting if needed); failures raise ActionError."""
        connection = self._connection(server, None)
        return await self._on_loop(self._list(connection))

    def list_tools_blocking(self, server: str) -> list[McpTool]:
        """:meth:`list_tools` from synchronous code (any thread, even inside a running loop:
        the work happens on the hub's own loop)."""
        connection = self._connection(server, None)
        future = self._loop_thread().submit(self._list(connection))
        limit = connection.config.connect_timeout + connection.config.timeout
        try:
            return future.result(timeout=limit)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise ActionError(
                f"MCP server '{server}' did not list its tools within {limit:g} s"
            ) from None

    def starts(self, server: str) -> int:
        """How many times the server's session was started (1 unless it was restarted)."""
        connection = self._connections.get(server)
        return connection.starts if connection else 0

    def close(self) -> None:
        """End every session and the background loop (idempotent)."""
        with self._guard:
            loop, self._loop = self._loop, None
            connections = list(self._connections.values())
            self._connections.clear()
        if loop is None:
            return
        for connection in connections:
            with contextlib.suppress(Exception):
                loop.submit(connection.close()).result(timeout=10)
        loop.stop()

    # ----------------------------------------------------------------- internals

    def _connection(self, server: str, action: str | None) -> _Connection:
        config = self.servers.get(server)
        if config is None:
            who = f"action '{action}': " if action else ""
            known = ", ".join(sorted(self.servers)) or "none"
            raise ActionError(
                f"{who}MCP server '{server}' is not declared in agentscript.toml "
                f"([mcp.servers.{server}]); declared: {known}"
            )
        with self._guard:
            connection = self._connections.get(server)
            if connection is None:
                connection = self._connections[server] = _Connection(config)
            return connection

    def _loop_thread(self) -> _LoopThread:
        with self._guard:
            if self._loop is None:
                self._loop = _LoopThread()
            return self._loop

    async def _on_loop(self, coro: Coroutine[Any, Any, T]) -> T:
        return await asyncio.wrap_future(self._loop_thread().submit(coro))

    async def _call(
        self, connection: _Connection, tool: str, arguments: dict[str, Any]
    ) -> dict[str, Any]:
        config = connection.config
        where = f"MCP tool '{tool}' of server '{config.name}'"
        session = await connection.ensure()
        try:
            result = await asyncio.wait_for(
                connection.guarded(session.call_tool(tool, arguments)), timeout=config.timeout
            )
        except TimeoutError:
            # The server may still be sending the answer (an endless line): only closing the
            # connection stops the hub's loop from reading it.
            await connection.close()
            raise ActionError(
                f"{where} timed out after {config.timeout:g} s {RESTART_NOTE}"
            ) from None
        except Exception as exc:
            # A broken connection (crash, closed stream, protocol error): drop the session so
            # the next call starts the server again.
            await connection.close()
            raise ActionError(
                f"{where} failed: {connection.describe(exc)} {RESTART_NOTE}"
            ) from None
        if result.is_error:
            message = connection.redact(_text(result.content)) or "no message"
            raise ActionError(f"{where} reported an error: {message}")
        return connection.redact_outputs(_outputs(result))

    async def _list(self, connection: _Connection) -> list[McpTool]:
        session = await connection.ensure()
        name = connection.config.name
        try:
            listed = await asyncio.wait_for(
                connection.guarded(session.list_tools()), connection.config.timeout
            )
        except TimeoutError:
            await connection.close()  # see _call: a late answer must not be read forever
            raise ActionError(
                f"MCP server '{name}' did not list its tools within "
                f"{connection.config.timeout:g} s {RESTART_NOTE}"
            ) from None
        except Exception as exc:
            await connection.close()
            raise ActionError(
                f"MCP server '{name}' failed to list its tools: {connection.describe(exc)}"
            ) from None
        tools = [
            McpTool(
                t.name,
                t.description or "",
                dict(t.input_schema or {}),
                dict(t.output_schema) if t.output_schema else None,
            )
            for t in listed.tools
        ]
        connection.tools = {t.name: t for t in tools}
        return tools


def _outputs(result: Any) -> dict[str, Any]:
    structured = result.structured_content
    if isinstance(structured, dict):
        return dict(structured)
    text = _text(result.content)
    with contextlib.suppress(ValueError, RecursionError):
        parsed = json.loads(text)
        if isinstance(parsed, dict):
            return parsed
    return {"result": text}


def _redacted(value: Any, redact: Callable[[str], str]) -> Any:
    """``value`` (plain JSON) with ``redact`` applied to each string in it."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {redact(str(k)): _redacted(v, redact) for k, v in value.items()}
    if isinstance(value, list):
        return [_redacted(v, redact) for v in value]
    return value


def _text(content: Any) -> str:
    parts = [getattr(block, "text", None) for block in content or []]
    return "\n".join(p for p in parts if isinstance(p, str))


def _describe(exc: BaseException, redact: Callable[[str], str]) -> str:
    """A one-line reason, ``redact`` applied before its lines are joined (a secret may hold
    blanks); exception groups from the SDK's task groups are unwrapped."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = " ".join(redact(validation_line(exc) or str(exc)).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def validation_line(exc: BaseException) -> str | None:
    """A pydantic ``ValidationError`` in one line: its model, the first error's location and
    message, and how many more (its own text takes lines per error and ends with a link to
    pydantic's site, which a model, a trace or a client has no use for); None for any other
    exception."""
    try:
        from pydantic import ValidationError
    except ImportError:  # pydantic comes with the MCP SDK
        return None
    if not isinstance(exc, ValidationError):
        return None
    errors = exc.errors(include_url=False, include_input=False, include_context=False)
    return f"{exc.title}: {errors_line(errors)}"


def errors_line(errors: list[Any]) -> str:
    """The first of pydantic's ``errors()`` as ``location: message``, and how many more, on
    one printable line of at most :data:`MAX_ERROR_LINE_CHARS` (a location names the keys of
    what was read: the sender's text)."""
    if not errors:
        return "invalid"
    first = errors[0]
    where = ".".join(str(part) for part in first.get("loc", ()))
    text = str(first.get("msg", "invalid"))
    if where:
        text = f"{where}: {text}"
    text = " ".join(text.split())
    text = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)
    if len(text) > MAX_ERROR_LINE_CHARS:
        text = text[: MAX_ERROR_LINE_CHARS - 3] + "..."
    more = len(errors) - 1
    return f"{text} (and {more} more error{'s' if more > 1 else ''})" if more else text


def _protocol_fault(message: Any) -> str | None:
    """Why a transport fault dooms the calls in flight; None for one that does not (a stdio
    server printing a log line that is not JSON is tolerated, as the SDK does)."""
    if not isinstance(message, Exception):
        return None
    from agentscript.models import sdk_provider

    refused = sdk_provider.answer_refused(message)
    if refused is not None:
        return f"the server's answer was refused: {refused}"
    errors = getattr(message, "errors", None)
    if not callable(errors):
        return None
    with contextlib.suppress(Exception):
        for error in errors():
            found = error.get("input")
            if isinstance(found, dict) and "jsonrpc" in found and "id" in found:
                return "the server sent a malformed JSON-RPC message"
    return None


def _capped_answer_hook(client_class: type) -> Any:
    """The model clients' answer bound as a response hook, left off event streams: the SDK
    bounds each event (1 MiB) and handles them one by one, while a long-lived stream may
    rightly carry more than one answer's worth in all."""
    from agentscript.models import answer_cap

    cap = answer_cap.capped_answers(client_class)

    async def hook(response: Any) -> None:
        content_type = response.headers.get("content-type", "").lower()
        if not content_type.startswith("text/event-stream"):
            await cap(response)

    return hook


def _check_header(name: str, value: str, table: str) -> None:
    if not _HEADER_VALUE.fullmatch(value):
        raise ConfigError(
            f"{table} header {name}: the value (after ${{VAR}} expansion) has a line break, a "
            "control or non-ASCII character, or blank space at an end, which HTTP does not "
            "allow; the value is not shown"
        )


# An environment variable or table key named like a credential. Only such values are blotted
# out of a successful tool result: ``ROOT = "${HOME}/docs"`` is a path the model needs intact
# (errors blot out every expanded value anyway).
_CREDENTIAL_NAME = re.compile(r"key|token|secret|passw|auth|cred|cookie|session", re.IGNORECASE)


def _credential(template: tuple[str, str]) -> bool:
    """Whether an ``env`` entry (or an argument, keyed ``args``) read from the environment
    carries a credential: its key, or its text (``--api-key=${X}``, ``${MY_TOKEN}``), is named
    like one."""
    key, text = template
    if not ENV_REF.search(text):
        return False
    return bool(_CREDENTIAL_NAME.search(text) or (key != "args" and _CREDENTIAL_NAME.search(key)))


def _url_secrets(url: str | None) -> list[str]:
    """The URL's password and query values, as written and decoded: either may be a
    credential, and an HTTP status error of the transport quotes the URL whole (httpx's
    ``raise_for_status``)."""
    try:
        parts = urlsplit(url or "")
        password = parts.password
    except ValueError:  # an unparsable URL: none of it is shown
        return [url or ""]
    raw = [password or ""]
    raw += [value for _, _, value in (pair.partition("=") for pair in parts.query.split("&"))]
    return [*raw, *(unquote_plus(value) for value in raw)]


def _devnull() -> Any:
    # Lives as long as the server process.
    return open(os.devnull, "w")
