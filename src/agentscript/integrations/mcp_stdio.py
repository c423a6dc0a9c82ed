"""``agentscript mcp-serve`` over stdio: the MCP server on the process's stdin and stdout.

In: the :class:`MCPServer` of ``mcp_server.build_server`` and its :class:`AgentTools`. Out: the
exit code, once stdin ends or a signal stopped the server. The SDK's transport writes stdout
(and keeps stray output off it) and parses each line; stdin is read here, for two reasons:

- The SDK reads a line whole however long it is. :class:`BoundedLines` drops a line over
  ``MAX_WIRE_MESSAGE_BYTES`` as it is read, answers it with the JSON-RPC error ``-32600
  "message too large"`` (id null), logs it in one line, and serves the next line.
- A read in a worker thread, as the SDK's, stays blocked in ``os.read`` while the client
  keeps stdin open, and Python waits for that thread at exit: a signal could not stop the
  server. :class:`StdinReader` waits on the event loop for the descriptor instead.

A line the SDK cannot read as a JSON-RPC message, which its transport hands on as an exception
and its dispatcher then drops unanswered, is answered too (:class:`ErrorAnswers`), and logged
in one line: ``-32700`` (id null) when it is not JSON, else ``-32600`` with the request's id
(null when it has none that can be read); a malformed answer of the client's is only logged,
and a blank line passed over.

While it serves, fd 0 reads the null device, so an action or a child process never reads the
client's bytes.

Signals stop it as they stop the server over HTTP (``agentscript serve``'s stops): the first
``SIGINT``, ``SIGTERM`` or ``SIGHUP`` stops reading stdin, refuses new tool calls, waits up to
the grace for the requests read to be answered, then ends (exit 0); what is still running then
is cut (its client gets the SDK's ``Connection closed`` error) and the log says how many. A
second Ctrl-C ends the grace at once (exit 130); a third ends the process on the spot.

The end of stdin (a client that wrote its requests and closed its end, or a file redirected to
stdin) stops it as the first signal does, without refusing anything: every request read gets
its answer within the grace (the SDK alone would cut them all the moment stdin ends), then it
ends (exit 0). A signal during that wait is a second one (a Ctrl-C cuts at once).

Once the requests are answered or cut, the SDK's transport gets what is left of the grace, and
at least ``FINAL_FLUSH``, to end; past that the process exits on its own (logged), where a
client that no longer reads stdout held it for good: the SDK writes stdout in a thread that
then stays blocked, and is waited for.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from agentscript.commands import ExitCode
from agentscript.integrations.mcp_server import MAX_WIRE_MESSAGE_BYTES
from agentscript.server.shutdown import ShutdownClock, within_grace

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer
    from mcp.shared._stream_protocols import ReadStream, WriteStream
    from mcp.shared.message import SessionMessage

    from agentscript.integrations.mcp_server import AgentTools

# What one read of stdin takes at most: what is held past the bound while a line is dropped.
STDIO_READ_BYTES = 64 * 1024
# JSON-RPC's "Invalid Request", with the text the client gets for a line over the bound.
TOO_LARGE_CODE = -32600
TOO_LARGE_TEXT = "message too large"
# JSON-RPC's "Parse error" and "Invalid Request", for a line that is not a JSON-RPC message.
PARSE_ERROR_CODE = -32700
PARSE_ERROR_TEXT = "Parse error"
INVALID_REQUEST_CODE = -32600
INVALID_REQUEST_TEXT = "Invalid Request"
# What of a request id a log line shows (the id is the client's text, up to the wire bound).
LOGGED_ID_CHARS = 40
# The signals that stop the server, as they stop `agentscript serve` (SIGHUP: a closed terminal).
STOPPING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# Seconds the SDK's transport gets at least, once the requests are answered or cut, to write
# the cut ones' errors and end, before the process exits without it. Its own bound on each
# such write is 1 s (mcp.shared.jsonrpc_dispatcher._SHUTDOWN_WRITE_TIMEOUT), and they run
# side by side; an unblocked transport ends in milliseconds.
FINAL_FLUSH = 1.5

log = logging.getLogger("agentscript.mcp")


class BoundedLines:
    """The lines of a byte stream, as text, each at most ``limit`` bytes (its newline not
    counted; a last line without one counts too). A longer line is dropped as it is read, so
    what is held never passes ``limit`` plus one read; ``too_long(size)`` is awaited with its
    size once it has ended, and the lines after it follow. ``read()`` gives the next bytes,
    ``b""`` at the end. Text is decoded as the SDK's stdio transport decodes it (UTF-8, bad
    bytes replaced)."""

    def __init__(
        self,
        read: Callable[[], Awaitable[bytes]],
        limit: int,
        too_long: Callable[[int], Awaitable[None]],
    ) -> None:
        self._read = read
        self.limit = limit
        self._too_long = too_long
        self._buffer = bytearray()
        self._dropped: int | None = None  # bytes of the line being dropped, so far
        self._ended = False

    @property
    def held(self) -> int:
        """The bytes held now (what the tests bound)."""
        return len(self._buffer)

    def __aiter__(self) -> BoundedLines:
        return self

    async def __anext__(self) -> str:
        while True:
            end = self._buffer.find(b"\n")
            if end >= 0:
                line = await self._take_line(end)
                if line is not None:
                    return line.decode("utf-8", errors="replace")
            elif self._ended:
                raise StopAsyncIteration
            else:
                await self._read_more()

    async def _take_line(self, end: int) -> bytes | None:
        """The line ending at ``end``, or None when it was too long (then reported)."""
        size = end + (self._dropped or 0)
        too_long = self._dropped is not None or end > self.limit
        line = None if too_long else bytes(self._buffer[:end])
        del self._buffer[: end + 1]
        self._dropped = None
        if too_long:
            await self._too_long(size)
        return line

    async def _read_more(self) -> None:
        if self._dropped is not None:
            self._dropped += len(self._buffer)
            self._buffer.clear()
        elif len(self._buffer) > self.limit:  # no newline within the bound: drop from here on
            self._dropped = len(self._buffer)
            self._buffer.clear()
        chunk = await self._read()
        if chunk:
            self._buffer += chunk
            return
        self._ended = True
        if self._buffer or self._dropped is not None:
            self._buffer += b"\n"  # the last line had no newline: it ends here


class ErrorAnswers:
    """The JSON-RPC errors the transport owes for lines that never reach the SDK as messages,
    each with a line in the log: one over the bound (``too_long``: id null, the request's id
    was in the part not kept) and one the SDK could not read (``malformed``, the module's
    docstring). They go on the SDK's write stream, known only once its transport runs:
    ``write_stream`` is set then. They are not counted as answers owed (:class:`OwedAnswers`):
    the SDK never saw their requests."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.write_stream: Any = None  # the SDK's, for SessionMessage

    async def too_long(self, size: int) -> None:
        log.warning(
            "stdin: dropped a message of %d bytes: over MAX_WIRE_MESSAGE_BYTES (%d)",
            size,
            self.limit,
        )
        await self._send(too_large_message(self.limit))

    async def malformed(self, item: Exception) -> None:
        """Answer (and log) what the SDK's transport could not read, given as ``item``."""
        import mcp_types

        problem = malformed_line(item)
        if problem is None:
            return
        code, request_id, reason = problem
        shown = "null" if request_id is None else repr(request_id)[:LOGGED_ID_CHARS]
        if code is None:
            log.warning("stdin: dropped a malformed answer (id %s): %s", shown, reason)
            return
        log.warning("stdin: answered a malformed message with %d (id %s): %s", code, shown, reason)
        text = PARSE_ERROR_TEXT if code == PARSE_ERROR_CODE else INVALID_REQUEST_TEXT
        error = mcp_types.ErrorData(code=code, message=f"{text}: {reason}")
        await self._send(_error_message(request_id, error))

    async def _send(self, message: SessionMessage) -> None:
        if self.write_stream is None:
            return
        # Closed only once the server stops: there is nobody left to answer.
        with contextlib.suppress(anyio.ClosedResourceError, anyio.BrokenResourceError):
            await self.write_stream.send(message)


def too_large_message(limit: int) -> SessionMessage:
    import mcp_types

    error = mcp_types.ErrorData(
        code=TOO_LARGE_CODE, message=TOO_LARGE_TEXT, data={"max_bytes": limit}
    )
    return _error_message(None, error)


def _error_message(request_id: str | int | None, error: Any) -> SessionMessage:
    import mcp_types
    from mcp.shared.message import SessionMessage

    return SessionMessage(mcp_types.JSONRPCError(jsonrpc="2.0", id=request_id, error=error))


def malformed_line(item: Exception) -> tuple[int | None, str | int | None, str] | None:
    """What a line the SDK's transport could not read gets, from the exception it gave
    (pydantic's, whose errors carry what was read): ``(code, id, reason)``, the code None for
    a malformed answer (an answer gets no answer); None for a blank line."""
    from agentscript.integrations.mcp_client import errors_line

    errors: list[Any] = []
    errors_of = getattr(item, "errors", None)
    if callable(errors_of):
        with contextlib.suppress(Exception):
            errors = list(errors_of(include_url=False, include_context=False))
    if not errors:
        return INVALID_REQUEST_CODE, None, f"not a JSON-RPC message ({type(item).__name__})"
    if errors[0].get("type") == "json_invalid":
        found = errors[0].get("input")
        if isinstance(found, str) and not found.strip():
            return None
        return PARSE_ERROR_CODE, None, errors_line(errors[:1])  # where the JSON breaks
    message = _message_read(errors)
    if message is None:
        return INVALID_REQUEST_CODE, None, "not a JSON-RPC message object"
    request_id = message.get("id")
    if isinstance(request_id, bool) or not isinstance(request_id, str | int):
        request_id = None  # JSON-RPC's ids are strings and numbers
    code: int | None = INVALID_REQUEST_CODE
    if "method" in message or not ("result" in message or "error" in message):
        kind = "JSONRPCRequest" if "id" in message else "JSONRPCNotification"
    else:
        kind, code = ("JSONRPCError" if "error" in message else "JSONRPCResponse"), None
    # Each error is tagged with the message kind it was read as: the reason is the first of
    # the kind the line looks like, its location without the tag.
    mine = [{**e, "loc": tuple(e["loc"][1:])} for e in errors if e.get("loc", ())[:1] == (kind,)]
    return code, request_id, errors_line(mine or errors)


def _message_read(errors: list[Any]) -> dict[str, Any] | None:
    """The JSON object of the line, from pydantic's errors: the input of an error on a message
    kind itself, or on a field missing from it (deeper errors' inputs are inner values)."""
    for error in errors:
        loc = error.get("loc", ())
        if len(loc) == 1 or (len(loc) == 2 and error.get("type") == "missing"):
            found = error.get("input")
            return found if isinstance(found, dict) else None
    return None


class StdinReader:
    """``read()`` for :class:`BoundedLines`: up to ``STDIO_READ_BYTES`` of ``fd`` once the
    event loop says it is readable, so no thread is left blocked in ``os.read``. A descriptor
    the loop cannot watch (a regular file or ``/dev/null`` redirected to stdin: epoll refuses
    them) is read directly: the kernel counts such files as always readable, so a read never
    waits for a writer. ``hold()`` stops reading (what is unread stays in the pipe) and
    ``end()`` then makes ``read()`` give ``b""``, the end of the stream."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._watchable = True
        self._held = False
        self._waiting: anyio.CancelScope | None = None
        self._ended = anyio.Event()

    async def read(self) -> bytes:
        if not self._held:
            with anyio.CancelScope() as self._waiting:
                await self._wait_readable()
                return os.read(self.fd, STDIO_READ_BYTES)
        await self._ended.wait()  # held: nothing more is read
        return b""

    async def _wait_readable(self) -> None:
        if not self._watchable:
            return
        try:
            await anyio.wait_readable(self.fd)
        except PermissionError:
            self._watchable = False

    def hold(self) -> None:
        self._held = True
        if self._waiting is not None:
            self._waiting.cancel()

    def end(self) -> None:
        self.hold()
        self._ended.set()


class OwedAnswers:
    """The JSON-RPC requests read and not answered yet, by id: what a graceful stop waits for.
    :class:`NotedReads` and :class:`NotedSends` show it the SDK's two streams; a request the
    client cancels is owed nothing (the SDK then never answers it). An answer counts once the
    SDK's stdout writer took it: the transport writes what it took before it ends, where a
    tool's return (``AgentTools.running``) comes before its answer is even sent, and the SDK
    cuts every request still unanswered when its read stream ends."""

    def __init__(self) -> None:
        self._owed: Counter[Any] = Counter()

    def __len__(self) -> int:
        return sum(self._owed.values())

    def read(self, item: SessionMessage | Exception) -> None:
        import mcp_types

        message = getattr(item, "message", None)
        if isinstance(message, mcp_types.JSONRPCRequest):
            self._owed[_key(message.id)] += 1
        elif (cancelled := _cancelled_id(message)) is not None:
            self._owed.pop(_key(cancelled), None)

    def sent(self, item: SessionMessage) -> None:
        import mcp_types

        message = item.message
        answers = mcp_types.JSONRPCResponse | mcp_types.JSONRPCError
        if not isinstance(message, answers) or message.id is None:
            return  # a notification, or an answer to no request (a line over the bound)
        key = _key(message.id)
        self._owed[key] -= 1
        if self._owed[key] <= 0:
            del self._owed[key]


def _key(request_id: Any) -> Any:
    """An id as the SDK's dispatcher matches it ("7" is 7)."""
    from mcp.shared.dispatcher import coerce_request_id

    return coerce_request_id(request_id)


def _cancelled_id(message: Any) -> Any:
    """The id of the request ``message`` cancels, if it is the client's cancellation."""
    import mcp_types

    if not isinstance(message, mcp_types.JSONRPCNotification):
        return None
    if message.method != "notifications/cancelled" or not isinstance(message.params, dict):
        return None
    return message.params.get("requestId")


class _Wrapped:
    """What both stream wrappers pass on unchanged: closing."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> Any:
        await self._inner.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> bool | None:
        result: bool | None = await self._inner.__aexit__(exc_type, exc_val, exc_tb)
        return result


class NotedReads(_Wrapped):
    """The SDK's read stream, each item shown to ``note`` as it passes, and a line the
    transport could not read (an exception, which the SDK drops) to ``malformed`` first; its
    end is passed on once ``at_end()`` returned, since the SDK cuts every request unanswered
    at that end."""

    def __init__(
        self,
        inner: ReadStream[SessionMessage | Exception],
        note: Callable[[SessionMessage | Exception], None],
        at_end: Callable[[], Awaitable[None]],
        malformed: Callable[[Exception], Awaitable[None]] | None = None,
    ) -> None:
        super().__init__(inner)
        self._note = note
        self._at_end = at_end
        self._malformed = malformed

    @property
    def last_context(self) -> Any:
        # The sender's context the SDK's dispatcher reads (by getattr) from its stream.
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        try:
            item: SessionMessage | Exception = await self._inner.receive()
        except anyio.EndOfStream:
            await self._at_end()
            raise
        if isinstance(item, Exception) and self._malformed is not None:
            await self._malformed(item)
        self._note(item)
        return item

    def __aiter__(self) -> NotedReads:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None


class NotedSends(_Wrapped):
    """The SDK's write stream, each item shown to ``note`` once the writer took it."""

    def __init__(
        self, inner: WriteStream[SessionMessage], note: Callable[[SessionMessage], None]
    ) -> None:
        super().__init__(inner)
        self._note = note

    async def send(self, item: SessionMessage, /) -> None:
        await self._inner.send(item)
        self._note(item)


class StdioStop:
    """The stops of the module's docstring: by the signals ``watch`` receives, or by the end
    of stdin (``stdin_ended``), whichever comes first; ``bound_the_end`` ends the process if
    the transport does not end after them."""

    def __init__(
        self, tools: AgentTools, reader: StdinReader, owed: OwedAnswers, grace: float
    ) -> None:
        self.tools = tools
        self.reader = reader
        self.owed = owed
        self.grace = grace
        self.exit_code = ExitCode.OK
        self.stopping = False
        self._drained = anyio.Event()

    def _first(self) -> bool:
        """Whether the stop now beginning is the first: the one that drains."""
        first = not self.stopping
        self.stopping = True
        return first

    async def watch(self, *, task_status: anyio.abc.TaskStatus[None]) -> None:
        with anyio.open_signal_receiver(*STOPPING) as received:
            task_status.started()
            async with anyio.create_task_group() as draining:
                async for sig in received:
                    self.on_signal(sig, draining)

    def on_signal(self, sig: int, draining: anyio.abc.TaskGroup) -> None:
        """The first stop drains in ``draining``; a Ctrl-C after it, a signal's or the end of
        stdin's, cuts at once."""
        if self._first():
            draining.start_soon(self.drain)
        elif sig == signal.SIGINT:
            self.stop_at_once()

    async def drain(self) -> None:
        """Stop reading, let the requests read get their answer within the grace, then end."""
        self.reader.hold()
        await self.tools.finish_turns(self.grace)  # new calls refused, running ones end
        await self._wait_for_answers()
        self.reader.end()

    async def stdin_ended(self) -> None:
        """Hold the end of stdin back from the SDK until the requests read are answered
        (within the grace), or until the signal's drain under way ended. Nothing is refused:
        once stdin ended, nothing new comes."""
        if self._first():
            ShutdownClock.mark()
            await self._wait_for_answers()
        else:
            await self._drained.wait()

    async def _wait_for_answers(self) -> None:
        """Wait for the answers owed, within the grace, then log how many are cut."""
        try:
            await within_grace(lambda: len(self.owed) > 0, self.grace)
            if cut := len(self.owed):
                if self.exit_code == ExitCode.INTERRUPTED:
                    log.error("stopped at once: %d request(s) cut", cut)
                else:
                    log.error("shutdown: %d turn(s) cut after the %g s grace", cut, self.grace)
        finally:
            self._drained.set()

    async def bound_the_end(self) -> None:
        """Once drained, end the process if the transport still runs after what is left of
        the grace, and at least ``FINAL_FLUSH``: its stdout writer is blocked in a thread
        (the client no longer reads stdout), which nothing can cancel."""
        await self._drained.wait()
        await anyio.sleep(max(ShutdownClock.left(self.grace), FINAL_FLUSH))
        log.error(
            "shutdown: stdout is not read: exiting with answers unwritten after the %g s grace",
            self.grace,
        )
        os._exit(self.exit_code)

    def stop_at_once(self) -> None:
        if self.exit_code == ExitCode.INTERRUPTED:
            os._exit(ExitCode.INTERRUPTED)  # the third Ctrl-C: the shutdown itself is stuck
        self.exit_code = ExitCode.INTERRUPTED
        ShutdownClock.end()


@contextlib.contextmanager
def _claimed_stdin() -> Iterator[int]:
    """A descriptor of the client's stream, while fd 0 reads the null device, so that nothing
    else in the process (an action, a child process) reads the client's bytes: what the SDK's
    transport does for the stdin it reads itself. fd 0 is restored at the end, and the
    duplicate closed: no thread reads it (:class:`StdinReader`)."""
    wire = os.dup(0)
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
    finally:
        os.close(null)
    try:
        yield wire
    finally:
        os.dup2(wire, 0)
        os.close(wire)


async def serve_stdio(
    server: MCPServer,
    tools: AgentTools,
    *,
    grace: float,
    limit: int = MAX_WIRE_MESSAGE_BYTES,
) -> ExitCode:
    """``server`` over stdin and stdout, each message at most ``limit`` bytes, until stdin
    ends (0) or a signal stops it (the module's docstring). ``MCPServer.run`` has no way to
    pass a transport, so its low-level server runs here as ``MCPServer.run_stdio_async`` runs
    it."""
    ShutdownClock.reset()
    with _claimed_stdin() as wire:
        reader = StdinReader(wire)
        stop = StdioStop(tools, reader, OwedAnswers(), grace)
        async with anyio.create_task_group() as stopping:
            await stopping.start(stop.watch)
            stopping.start_soon(stop.bound_the_end)
            await _serve(server, reader, limit, stop)
            stopping.cancel_scope.cancel()
    return stop.exit_code


async def _serve(server: MCPServer, reader: StdinReader, limit: int, stop: StdioStop) -> None:
    """The SDK's transport, reading :class:`BoundedLines` of ``reader`` instead of the
    unbounded lines of its own reader, with ``stop.owed`` noting requests and answers and
    the end of stdin passed on once ``stop`` lets it."""
    from mcp.server.stdio import stdio_server

    answers = ErrorAnswers(limit)
    # Typed as an AsyncFile, but the SDK's transport only iterates it (`async for`).
    lines: Any = BoundedLines(reader.read, limit, answers.too_long)
    async with stdio_server(stdin=lines) as (read_stream, write_stream):
        answers.write_stream = write_stream
        lowlevel = server._lowlevel_server
        await lowlevel.run(
            NotedReads(read_stream, stop.owed.read, stop.stdin_ended, answers.malformed),
            NotedSends(write_stream, stop.owed.sent),
            lowlevel.create_initialization_options(),
        )
