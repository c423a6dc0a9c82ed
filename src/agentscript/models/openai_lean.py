"""A lean OpenAI-compatible client: the same protocol as :class:`OpenAIModel`, sent over a small
HTTP/1.1 client on asyncio streams instead of the official SDK. Opt-in (``openai-lean:MODEL``).

Why it exists: with the SDK, each Chat Completions call costs about 1.4 ms of CPU (its request
layers and its httpx2/httpcore2/anyio stack), 2 or 3 calls per turn, which alone exceeds the
per-turn budget of ``agentscript serve``. The same call here costs about a tenth of that
(docs/models.md has the measurements). What it gives up: HTTP proxies (``HTTPS_PROXY`` is not
read), HTTP/2, compressed answers (it asks for none), and the SDK's own error types; errors are
worded exactly as for :class:`OpenAIModel`, retries and their Retry-After hints are the same.

The body, the parsing of answers and the assembly of streams are :class:`OpenAIModel`'s own.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

from agentscript import jsontext
from agentscript.models import sdk_provider
from agentscript.models.base import ModelError
from agentscript.models.openai_provider import OpenAIModel
from agentscript.models.retry import (
    describe_status,
    is_transient_status,
    parse_retry_after,
    redact,
    server_message,
)
from agentscript.redaction import shown_url

DEFAULT_BASE_URL = "https://api.openai.com/v1"
MAX_HEAD = 64 * 1024  # status line and headers
MAX_IDLE = 64  # kept-alive connections per client
# A finished stream (its [DONE] read) whose body goes on for more than this is not read to its
# end: its connection is closed rather than kept. What follows [DONE] is normally nothing, or
# the 5 bytes that end a chunked body.
MAX_DRAIN = 64 * 1024
_READ_SIZE = 65536  # the most one read of a body asks for
# What reading a body can raise when the server misbehaves (a bad chunk size is a ValueError).
_READ_ERRORS = (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError)


class LeanStatusError(Exception):
    """The server answered with an error status (or an error event inside a stream: 200)."""

    def __init__(self, status: int, body: Any, headers: dict[str, str]) -> None:
        super().__init__(f"HTTP {status}")
        self.status_code = status
        self.body = body
        self.headers = headers


class LeanConnectionError(Exception):
    """No answer: the connection could not be made (``broken`` False) or broke mid-way."""

    def __init__(self, cause: BaseException, *, broken: bool) -> None:
        detail = f"{type(cause).__name__}: {cause}" if str(cause) else type(cause).__name__
        super().__init__(detail)
        self.broken = broken


class LeanTimeout(Exception):
    """No (whole) answer within the model's timeout."""


class _View:
    """Attribute access over parsed JSON (``getattr(view, "choices", None)``), as the parsers
    of :class:`OpenAIModel` read SDK objects."""

    __slots__ = ("_data",)

    def __init__(self, data: dict[str, Any]) -> None:
        self._data = data

    def __getattr__(self, name: str) -> Any:
        try:
            return _wrap(self._data[name])
        except KeyError:
            raise AttributeError(name) from None


def _wrap(value: Any) -> Any:
    if isinstance(value, dict):
        return _View(value)
    if isinstance(value, list):
        return [_wrap(item) for item in value]
    return value


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    def close(self) -> None:
        self.writer.close()


class _Response:
    """A response whose head is read; its body is read here, piece by piece, to its end and
    never past it. Where the body stands (bytes left, a chunk's end due) is kept on the
    instance, so a read that resumes after a pause (a stream's close) goes on where the last
    one stopped: the next request's answer follows on the same connection."""

    def __init__(self, status: int, headers: dict[str, str], conn: _Connection) -> None:
        self.status = status
        self.headers = headers
        self.conn = conn
        self.reusable = headers.get("connection", "").lower() != "close"
        self._chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        self._left: int | None = None  # bytes of a Content-Length body still unread
        self._chunk_left = 0  # bytes of the current chunk still unread
        self._chunk_end_due = False  # a chunk's data was read, not yet the CRLF after it
        self.received = 0  # bytes of the body read so far, counted against MAX_ANSWER_BYTES
        if _is_bodiless(status):
            self._left = 0
        elif not self._chunked and "content-length" in headers:
            self._left = _content_length(headers["content-length"])
        elif not self._chunked:
            self.reusable = False  # the body ends when the server closes the connection
        self.complete = self._left == 0

    async def read_piece(self) -> bytes:
        """The body's next bytes as they arrive, at most ``_READ_SIZE`` of them; ``b""`` once
        it has ended, and ever after."""
        if self.complete:
            return b""
        if self._chunked:
            piece = await self._next_chunk()
        elif self._left is not None:
            piece = await self._read_some(self._left)
            self._left -= len(piece)
            self.complete = self._left == 0
        else:
            piece = await self.conn.reader.read(_READ_SIZE)
        if not piece:
            self.complete = True
        self.received += len(piece)
        return piece

    async def _read_some(self, left: int) -> bytes:
        """Some of the ``left`` bytes the framing still announces: whatever has arrived, and
        never more than one read's worth, however many were announced."""
        piece = await self.conn.reader.read(min(left, _READ_SIZE))
        if not piece:
            raise asyncio.IncompleteReadError(b"", left)
        return piece

    async def _next_chunk(self) -> bytes:
        if not self._chunk_left:
            size = await self._next_chunk_size()
            if size == 0:
                await self._skip_trailers()
                return b""
            self._chunk_left = size
        piece = await self._read_some(self._chunk_left)
        self._chunk_left -= len(piece)
        self._chunk_end_due = not self._chunk_left
        return piece

    async def _next_chunk_size(self) -> int:
        reader = self.conn.reader
        if self._chunk_end_due:
            # Read with the next chunk, not the last: a stream's event is handed on as soon
            # as its bytes are in, without waiting for two more.
            if await reader.readexactly(2) != b"\r\n":
                raise ValueError("a chunk does not end where its size said")
            self._chunk_end_due = False
        size_line = await reader.readuntil(b"\r\n")
        return int(size_line.split(b";", 1)[0].strip(), 16)  # an empty line is a ValueError

    async def _skip_trailers(self) -> None:
        while (await self.conn.reader.readuntil(b"\r\n")) != b"\r\n":
            pass

    async def chunks(self) -> AsyncIterator[bytes]:
        """The rest of the body's bytes as they arrive (chunked, Content-Length or until
        close), of whole answers and streams alike. Past ``sdk_provider.MAX_ANSWER_BYTES``
        (received, or announced by Content-Length) it raises ``AnswerTooLarge``, the body
        unread to its end, so :meth:`LeanClient.release` closes the connection: whoever
        reads holds at most the bound plus one read."""
        most = sdk_provider.MAX_ANSWER_BYTES
        self._refuse_if_announced_over(most)
        while piece := await self.read_piece():
            if self.received > most:
                raise sdk_provider.AnswerTooLarge(most)
            yield piece

    async def body(self) -> bytes:
        """The rest of the body, whole; ``AnswerTooLarge`` past the bound, as :meth:`chunks`."""
        if self._chunked or self._left is None:
            return b"".join([piece async for piece in self.chunks()])
        return await self._counted_body(self._left)

    async def _counted_body(self, left: int) -> bytes:
        # A Content-Length body (nearly every whole answer) in one read, not piecewise by
        # chunks(): 1.3 µs of CPU for a 351-byte answer against 2.7 (docs/performance.md).
        self._refuse_if_announced_over(sdk_provider.MAX_ANSWER_BYTES)
        data = await self.conn.reader.readexactly(left)
        self._left = 0
        self.received += left
        self.complete = True
        return data

    def _refuse_if_announced_over(self, most: int) -> None:
        """AnswerTooLarge before any read when the Content-Length alone is over ``most``, as
        the SDK clients do: such an answer is dropped unread."""
        if self.received + (self._left or 0) > most:
            raise sdk_provider.AnswerTooLarge(most)

    async def drain(self, most: int) -> None:
        """Read the rest of the body, if it is at most about ``most`` bytes, so that the
        connection can carry the next request; a longer rest is left unread (and the
        connection is then closed by :meth:`LeanClient.release`)."""
        read = 0
        while not self.complete and read <= most:
            read += len(await self.read_piece())


def _content_length(value: str) -> int:
    """A Content-Length header's value; a ValueError unless it is a count of bytes."""
    digits = value.strip()
    if not (digits.isascii() and digits.isdigit()):
        raise ValueError(f"Content-Length {value[:40]!r} is not a number of bytes")
    return int(digits)


def _is_bodiless(status: int) -> bool:
    """Statuses whose answers have no body, whatever their headers say (RFC 9112, 6.3)."""
    return 100 <= status < 200 or status in (204, 304)


class LeanClient:
    """HTTP/1.1 POSTs to one server, over kept-alive connections of one event loop."""

    def __init__(self, base_url: str, api_key: str, timeout: float) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ModelError(
                f"base URL {shown_url(base_url, '(the base URL)')!r} is not an http:// or https:// URL"
            )
        self.host = parts.hostname
        self.tls = parts.scheme == "https"
        self.port = parts.port or (443 if self.tls else 80)
        self.prefix = parts.path.rstrip("/")
        default_port = self.port == (443 if self.tls else 80)
        self.authority = self.host if default_port else f"{self.host}:{self.port}"
        self.timeout = timeout
        self._key = api_key
        self._ssl = ssl.create_default_context() if self.tls else None
        self._idle: list[_Connection] = []

    async def _open(self) -> _Connection:
        try:
            async with asyncio.timeout(self.timeout):
                reader, writer = await asyncio.open_connection(
                    self.host, self.port, ssl=self._ssl, limit=MAX_HEAD
                )
        except TimeoutError:
            raise LeanTimeout() from None
        except OSError as exc:
            raise LeanConnectionError(exc, broken=False) from None
        return _Connection(reader, writer)

    def _request(self, path: str, body: bytes, stream: bool) -> bytes:
        accept = "text/event-stream" if stream else "application/json"
        head = (
            f"POST {self.prefix}{path} HTTP/1.1\r\nHost: {self.authority}\r\n"
            f"Authorization: Bearer {self._key}\r\nContent-Type: application/json\r\n"
            f"Accept: {accept}\r\nAccept-Encoding: identity\r\nUser-Agent: agentscript\r\n"
            f"Content-Length: {len(body)}\r\n\r\n"
        )
        return head.encode("latin-1") + body

    async def post(self, path: str, payload: dict[str, Any], *, stream: bool) -> _Response:
        """Send the request; the response with its head read (the body is the caller's)."""
        # jsontext: orjson when installed (a request of a few kB took 40 µs with the standard
        # library, about 2 % of a served turn's CPU, 2-3 requests a turn).
        data = self._request(path, jsontext.dumps_bytes(payload), stream)
        while True:
            reused = bool(self._idle)
            conn = self._idle.pop() if reused else await self._open()
            try:
                async with asyncio.timeout(self.timeout):
                    conn.writer.write(data)
                    await conn.writer.drain()
                    head = await conn.reader.readuntil(b"\r\n\r\n")
            except TimeoutError:
                conn.close()
                raise LeanTimeout() from None
            except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
                conn.close()
                if reused and _nothing_read(exc):
                    continue  # the server had closed that kept-alive connection: a new one
                raise LeanConnectionError(exc, broken=True) from None
            return _parse_head(head, conn)

    def release(self, response: _Response) -> None:
        """Keep the connection for the next request, or close it: it is kept only when its
        answer's body was read to the end (bytes left unread would be taken for the next
        answer) and the server did not say it would close it."""
        if response.complete and response.reusable and len(self._idle) < MAX_IDLE:
            self._idle.append(response.conn)
        else:
            response.conn.close()

    async def close(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


def _nothing_read(exc: BaseException) -> bool:
    if isinstance(exc, asyncio.IncompleteReadError):
        return not exc.partial
    return isinstance(exc, ConnectionError)


def _parse_head(head: bytes, conn: _Connection) -> _Response:
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        conn.close()
        raise LeanConnectionError(ValueError(f"not an HTTP answer: {lines[0][:80]!r}"), broken=True)
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            headers[name.strip().lower()] = value.strip()
    try:
        response = _Response(int(parts[1]), headers, conn)
    except ValueError as exc:
        conn.close()
        raise LeanConnectionError(exc, broken=True) from None
    if parts[0] == "HTTP/1.0":
        response.reusable = False
    return response


class _Lines:
    """Splits a body into lines as its pieces arrive. Only a new piece is searched for a
    line's end: a line that takes many pieces to arrive is neither searched nor copied again
    for each of them. Searched and copied whole for each 64 KiB piece, a line of 16 MiB took
    1 s of the event loop's CPU and one of 64 MiB (the bound) 21 s; now 0.01 and 0.06 s."""

    def __init__(self) -> None:
        self._begun = bytearray()  # the start of a line not yet ended

    def feed(self, piece: bytes) -> list[bytes]:
        """The lines ``piece`` ends, without their ``\\n``."""
        lines = piece.split(b"\n")
        if len(lines) > 1 and self._begun:
            lines[0] = bytes(self._begun) + lines[0]
            self._begun.clear()
        self._begun += lines.pop()
        return lines


class _Events:
    """The events of a Chat Completions stream, as views; ``close()`` releases the connection."""

    def __init__(self, client: LeanClient, response: _Response, timeout: float) -> None:
        self._client = client
        self._response = response
        self._timeout = timeout
        self._done = False

    async def __aiter__(self) -> AsyncIterator[Any]:
        lines = _Lines()
        chunks = self._response.chunks().__aiter__()
        data: list[str] = []  # the data lines of the event not yet ended by a blank line
        while (piece := await self._next_piece(chunks)) is not None:
            for raw in lines.feed(piece):
                line = raw.decode("utf-8", "replace").rstrip("\r")
                if line:
                    if line.startswith("data:"):
                        data.append(line[5:].lstrip())
                    continue
                if not data:
                    continue
                text, data = "\n".join(data), []
                if text == "[DONE]":
                    self._done = True
                    return
                yield self._event(text)

    async def _next_piece(self, chunks: AsyncIterator[bytes]) -> bytes | None:
        """The body's next piece; None at its end. A piece past ``MAX_ANSWER_BYTES`` raises
        AnswerTooLarge (a line without end, data lines never ended by a blank line: both are
        held until then, and no longer). No timeout of its own: the one reader of these
        events (``SdkModel._relay``) bounds the wait for each event, and so for each piece,
        by the model's timeout, and the whole stream too; a timer per piece cost more CPU
        than parsing the piece (docs/performance.md)."""
        try:
            return await anext(chunks, None)
        except _READ_ERRORS as exc:
            raise LeanConnectionError(exc, broken=True) from None

    def _event(self, text: str) -> Any:
        event = json.loads(text)
        if isinstance(event, dict) and event.get("error") is not None:
            raise LeanStatusError(200, event, self._response.headers)
        return _wrap(event)

    async def close(self) -> None:
        """Release the connection. After [DONE] the body's short rest (the end of a chunked
        body) is read first so the connection can be kept; a stream left before its end
        keeps its unread bytes, and so closes its connection, without waiting for them."""
        try:
            if self._done and self._response.reusable:
                async with asyncio.timeout(self._timeout):
                    await self._response.drain(MAX_DRAIN)
        except (TimeoutError, *_READ_ERRORS):
            pass  # not read to its end: release() closes the connection
        finally:
            self._client.release(self._response)


class LeanOpenAIModel(OpenAIModel):
    """:class:`OpenAIModel` over :class:`LeanClient` instead of the official SDK."""

    prefix = "openai-lean"

    def _check_sdk(self) -> None:
        """No SDK needed."""

    async def _get_client(self) -> Any:
        loop = asyncio.get_running_loop()
        if self._client is None or self._client_loop is not loop:
            from agentscript.models.sdk_provider import _close_when_loop_ends

            self._client = LeanClient(
                self.base_url or DEFAULT_BASE_URL,
                self._api_key or self._auth_token or "",
                self.timeout,
            )
            self._client_loop = loop
            self._closer = _close_when_loop_ends(self._client)
            await anext(self._closer)
        return self._client

    async def _send(self, client: Any, kwargs: dict[str, Any]) -> Any:
        stream = bool(kwargs.get("stream"))
        response = await client.post("/chat/completions", kwargs, stream=stream)
        kind = response.headers.get("content-type", "")
        if stream and response.status < 400 and "text/event-stream" in kind:
            return _Events(client, response, self.timeout)
        data = await self._read_whole(client, response)
        if response.status >= 400:
            raise LeanStatusError(response.status, data, response.headers)
        if stream or not kind.startswith("application/json") or not isinstance(data, dict):
            return data  # refused as not an answer (by _relay, or by _parse_whole)
        return _View(data)

    async def _read_whole(self, client: LeanClient, response: _Response) -> Any:
        """The response's whole body as JSON (or text), read within the model's timeout;
        its connection released whatever happens (kept only when the body was read whole)."""
        try:
            async with asyncio.timeout(self.timeout):
                raw = await response.body()
        except TimeoutError:
            raise LeanTimeout() from None
        except _READ_ERRORS as exc:
            raise LeanConnectionError(exc, broken=True) from None
        finally:
            client.release(response)
        return _json_or_text(raw)

    # -- errors: the same wording and retry rules as the SDK path --------------------------

    def _retry_after(self, exc: BaseException) -> float | None:
        if not isinstance(exc, LeanStatusError) or exc.status_code not in (429, 503):
            return None
        return parse_retry_after(exc.headers.get("retry-after"))

    def _failure_kind(self, exc: BaseException) -> str:
        if isinstance(exc, LeanStatusError):
            return f"HTTP {exc.status_code}"
        return type(exc).__name__

    def _is_status_error(self, exc: BaseException) -> bool:
        return isinstance(exc, LeanStatusError)

    def _is_transient(self, exc: BaseException) -> bool:
        if isinstance(exc, LeanConnectionError | LeanTimeout):
            return True
        if isinstance(exc, LeanStatusError):
            return is_transient_status(exc.status_code)
        return False

    def _model_error(self, exc: BaseException | None, *, attempts: int) -> ModelError:
        provider = self.provider
        tries = f" ({attempts} attempts)" if attempts > 1 else ""
        where = self._where
        if isinstance(exc, LeanTimeout):
            text = (
                f"{provider} model '{self.model}' did not answer within {self.timeout:g} s{tries}"
            )
        elif isinstance(exc, LeanConnectionError) and exc.broken:
            text = f"The connection to {where} broke before the whole answer arrived{tries} ({exc})"
        elif isinstance(exc, LeanConnectionError):
            text = f"Could not connect to {where}{tries}. Is the server running and the URL right?"
        elif isinstance(exc, LeanStatusError):
            message = server_message(exc.body, "")
            if exc.status_code < 400:
                text = f"{provider} reported an error while answering{tries}: {message}"
            else:
                text = describe_status(
                    provider,
                    exc.status_code,
                    message,
                    model=self.model,
                    key_env=self.key_env,
                    attempts=attempts,
                )
        else:
            text = f"{provider} request failed: {type(exc).__name__}: {exc}"
        return ModelError(redact(text, [self._api_key, self._auth_token]))


def _json_or_text(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return raw.decode("utf-8", "replace")
