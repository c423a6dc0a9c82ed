"""The lean client (``openai-lean:``) reads each answer's body to its end and never past it,
whatever its framing (Content-Length, chunked, until the server hangs up): the connection then
carries the next request when HTTP allows it, is closed when it does not or when bytes of the
body were left unread, and no read waits for bytes that were never announced.

The server is a real one on loopback that writes each answer byte for byte, and notes on which
connection each request came, so reuse is asserted, not inferred."""

from __future__ import annotations

import asyncio
import itertools
import json
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Self

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentscript.errors import LimitReached
from agentscript.models import openai_lean, sdk_provider
from agentscript.models.base import Message, ModelError, ModelRequest
from agentscript.models.openai_lean import LeanClient, LeanOpenAIModel

REQUEST = ModelRequest("You help.", "", [Message("user", "hi")], [])
# Only stops a hung test: every scenario here ends at once unless the client waits for bytes
# that never come, which must then fail the test instead of stalling the suite.
HANG = 20.0
# The model's timeout where a wait for the end of it would be the bug itself: below HANG, so
# such a wait shows as a failed assertion (the connection not reused) rather than a hang.
SHORT = 5.0


class After(Enum):
    """What the server does once it has written an answer."""

    KEEP = "wait for the next request on the same connection"
    CLOSE = "hang up"
    HOLD = "send nothing more, and wait for the client to hang up"
    REPEAT = "send its ``forever`` bytes again and again, until the client hangs up"


@dataclass
class Answer:
    raw: bytes
    after: After = After.KEEP
    forever: bytes = b""


class LoopbackServer:
    """Answers the n-th request with ``answers[n]``. ``requests`` holds, per request, the
    number of the connection it came on; ``hung_up`` the connections the client closed."""

    def __init__(self, answers: Sequence[Answer]) -> None:
        self._answers = list(answers)
        self.requests: list[int] = []
        self.hung_up: list[int] = []
        self._writers: list[asyncio.StreamWriter] = []
        self._handlers: list[asyncio.Task[None]] = []
        self._hang_up = asyncio.Event()
        self.url = ""

    async def client_hung_up(self) -> list[int]:
        """``hung_up`` once the client has closed a connection (the test's HANG bounds it)."""
        await self._hang_up.wait()
        return self.hung_up

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}/v1"
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._server.close()
        for writer in self._writers:
            writer.close()
        # Each connection's handler sees its end before the loop stops: one left waiting for
        # a next request was cancelled by asyncio.run, and logged as an error.
        await asyncio.gather(*self._handlers, return_exceptions=True)
        await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connection = len(self._writers)
        self._writers.append(writer)
        handler = asyncio.current_task()
        assert handler is not None
        self._handlers.append(handler)
        try:
            while await self._answer_one(reader, writer, connection):
                pass
        finally:
            writer.close()

    async def _answer_one(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, connection: int
    ) -> bool:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            self._note_hang_up(connection)
            return False
        length = re.search(rb"(?i)\r\ncontent-length:\s*(\d+)", head)
        await reader.readexactly(int(length.group(1)) if length else 0)
        answer = self._answers[len(self.requests)]
        self.requests.append(connection)
        writer.write(answer.raw)
        await writer.drain()
        if answer.after is After.REPEAT:
            await self._repeat(answer.forever, writer, connection)
        if answer.after is After.HOLD:
            await reader.read()  # returns when the client hangs up
            self._note_hang_up(connection)
        return answer.after is After.KEEP

    async def _repeat(self, piece: bytes, writer: asyncio.StreamWriter, connection: int) -> None:
        try:
            while True:
                writer.write(piece)
                await writer.drain()
        except ConnectionError:
            self._note_hang_up(connection)

    def _note_hang_up(self, connection: int) -> None:
        self.hung_up.append(connection)
        self._hang_up.set()


def event(text: str | None = None, finish: str | None = None) -> bytes:
    delta = {"content": text} if text is not None else {}
    data = {"id": "c1", "model": "gpt-test", "choices": [{"delta": delta, "finish_reason": finish}]}
    return f"data: {json.dumps(data)}\n\n".encode()


STREAM = event("hello") + event(" there") + event(finish="stop") + b"data: [DONE]\n\n"
WHOLE = json.dumps(
    {"id": "c1", "model": "gpt-test", "choices": [{"message": {"content": "hello there"}}]}
).encode()
SSE = "text/event-stream"
JSON = "application/json"


def head(status: str, content_type: str, *fields: str) -> bytes:
    lines = [f"HTTP/1.1 {status}", f"Content-Type: {content_type}", *fields]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def counted(body: bytes, content_type: str = SSE, *fields: str, status: str = "200 OK") -> bytes:
    return head(status, content_type, f"Content-Length: {len(body)}", *fields) + body


def in_chunks(*pieces: bytes, content_type: str = SSE) -> bytes:
    """A chunked answer, one chunk per piece."""
    chunks = b"".join(f"{len(piece):x}\r\n".encode() + piece + b"\r\n" for piece in pieces)
    return head("200 OK", content_type, "Transfer-Encoding: chunked") + chunks + b"0\r\n\r\n"


def chunked(body: bytes, content_type: str = SSE, *, size: int = 7) -> bytes:
    """``body`` in chunks of ``size`` bytes: its events, [DONE] too, split across chunks."""
    pieces = [body[start : start + size] for start in range(0, len(body), size)]
    return in_chunks(*pieces, content_type=content_type)


def lean(url: str, *, timeout: float = SHORT, max_retries: int = 0) -> LeanOpenAIModel:
    return LeanOpenAIModel(
        "gpt-test",
        api_key="sk-test",
        base_url=url,
        timeout=timeout,
        max_retries=max_retries,
        retry_base_delay=0,
    )


async def texts(model: LeanOpenAIModel, calls: int, *, streaming: bool) -> list[str | None]:
    """The text of ``calls`` answers in turn; a streamed one must reach its sink whole."""
    said: list[str | None] = []
    for _ in range(calls):
        shown: list[str] = []
        response = await model.complete(REQUEST, stream=shown.append if streaming else None)
        assert not streaming or "".join(shown) == response.text
        said.append(response.text)
    return said


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    async def bounded() -> None:
        async with asyncio.timeout(HANG):
            await scenario()

    asyncio.run(bounded())


# -- a finished body leaves its connection ready for the next request -----------------------

FINISHED_STREAMS = {
    "content-length": counted(STREAM),
    "chunked": chunked(STREAM),
    # A comment after [DONE]: the rest of the body is read before the connection is reused.
    "content-length, a comment after [DONE]": counted(STREAM + b": bye\r\n\r\n"),
    "chunked, a comment after [DONE]": in_chunks(STREAM, b": bye\r\n\r\n"),
}


@pytest.mark.parametrize("raw", FINISHED_STREAMS.values(), ids=FINISHED_STREAMS.keys())
def test_a_finished_stream_leaves_its_connection_for_the_next_request(raw: bytes) -> None:
    async def scenario() -> None:
        async with LoopbackServer([Answer(raw), Answer(raw)]) as server:
            assert await texts(lean(server.url), 2, streaming=True) == ["hello there"] * 2
            assert server.requests == [0, 0]

    run(scenario)


@pytest.mark.parametrize(
    "raw", [counted(WHOLE, JSON), chunked(WHOLE, JSON)], ids=["length", "chunked"]
)
def test_a_whole_answer_leaves_its_connection_for_the_next_request(raw: bytes) -> None:
    async def scenario() -> None:
        async with LoopbackServer([Answer(raw), Answer(raw)]) as server:
            assert await texts(lean(server.url), 2, streaming=False) == ["hello there"] * 2
            assert server.requests == [0, 0]

    run(scenario)


@pytest.mark.parametrize("streaming", [True, False], ids=["streamed", "whole"])
def test_an_error_body_is_read_whole_and_the_retry_reuses_its_connection(streaming: bool) -> None:
    error = counted(b'{"error": {"message": "busy"}}', JSON, status="500 Internal Server Error")
    good = counted(STREAM) if streaming else counted(WHOLE, JSON)

    async def scenario() -> None:
        async with LoopbackServer([Answer(error), Answer(good)]) as server:
            model = lean(server.url, max_retries=1)
            assert await texts(model, 1, streaming=streaming) == ["hello there"]
            assert server.requests == [0, 0]

    run(scenario)


def test_a_bodiless_status_is_not_read_past_its_head() -> None:
    """204 has no body whatever its headers say (RFC 9112 6.3): the client must not wait for
    one, and the connection stays usable."""
    no_content = b"HTTP/1.1 204 No Content\r\nContent-Type: text/plain\r\n\r\n"

    async def scenario() -> None:
        async with LoopbackServer([Answer(no_content), Answer(counted(WHOLE, JSON))]) as server:
            model = lean(server.url)
            with pytest.raises(ModelError, match="its body is not a JSON answer"):
                await model.complete(REQUEST)
            assert await texts(model, 1, streaming=False) == ["hello there"]
            assert server.requests == [0, 0]

    run(scenario)


# -- an answer whose connection cannot carry another request ---------------------------------

CLOSING = {
    "content-length, Connection: close": lambda body, kind: counted(
        body, kind, "Connection: close"
    ),
    "until the server hangs up": lambda body, kind: head("200 OK", kind) + body,
}


@pytest.mark.parametrize("streaming", [True, False], ids=["streamed", "whole"])
@pytest.mark.parametrize("framing", CLOSING.values(), ids=CLOSING.keys())
def test_an_answer_that_ends_its_connection_is_read_whole_and_not_reused(
    framing: Callable[[bytes, str], bytes], streaming: bool
) -> None:
    raw = framing(STREAM, SSE) if streaming else framing(WHOLE, JSON)

    async def scenario() -> None:
        answers = [Answer(raw, After.CLOSE), Answer(raw, After.CLOSE)]
        async with LoopbackServer(answers) as server:
            assert await texts(lean(server.url), 2, streaming=streaming) == ["hello there"] * 2
            assert server.requests == [0, 1]

    run(scenario)


# -- a body left unread: never waited for, never reused ---------------------------------------

UNFINISHED = {
    # Each announces more than it sends, then sends nothing more.
    "content-length": head("200 OK", SSE, "Content-Length: 100000") + event("hello"),
    "chunked": in_chunks(event("hello")).removesuffix(b"0\r\n\r\n"),
}


@pytest.mark.parametrize("raw", UNFINISHED.values(), ids=UNFINISHED.keys())
def test_a_stream_its_caller_stops_early_is_closed_at_once_and_not_reused(raw: bytes) -> None:
    """The reply outgrows its limit after the first piece: the rest of the body is not waited
    for (the model's timeout is longer than HANG), and the next call gets a new connection."""

    def limited(piece: str) -> None:
        raise LimitReached("max_reply_chars", 3, "the reply is too long")

    async def scenario() -> None:
        answers = [Answer(raw, After.HOLD), Answer(counted(STREAM))]
        async with LoopbackServer(answers) as server:
            model = lean(server.url, timeout=60)
            with pytest.raises(LimitReached):
                await model.complete(REQUEST, stream=limited)
            assert await texts(model, 1, streaming=True) == ["hello there"]
            assert server.requests == [0, 1]
            assert await server.client_hung_up() == [0]

    run(scenario)


def test_a_streamed_request_answered_with_a_plain_body_is_bounded_by_the_timeout() -> None:
    """A server that answers a streamed request with JSON, then stalls mid-body: that body
    is read within the model's timeout, as every other read is."""
    stalled = head("200 OK", JSON, "Content-Length: 1000") + b'{"id": "c1"'

    async def scenario() -> None:
        async with LoopbackServer([Answer(stalled, After.HOLD)]) as server:
            with pytest.raises(ModelError, match="did not answer within 1 s"):
                await lean(server.url, timeout=1).complete(REQUEST, stream=lambda _text: None)
            assert await server.client_hung_up() == [0]

    run(scenario)


# -- a body whose framing is broken: an error, never a silent desync --------------------------

MALFORMED = {
    "a chunk longer than its size": head("200 OK", JSON, "Transfer-Encoding: chunked")
    + f"{len(WHOLE) - 2:x}\r\n".encode()
    + WHOLE
    + b"\r\n0\r\n\r\n",
    "an empty chunk size line": head("200 OK", JSON, "Transfer-Encoding: chunked")
    + f"{len(WHOLE[:10]):x}\r\n".encode()
    + WHOLE[:10]
    + b"\r\n\r\n"
    + f"{len(WHOLE[10:]):x}\r\n".encode()
    + WHOLE[10:]
    + b"\r\n0\r\n\r\n",
    "a negative Content-Length": head("200 OK", JSON, "Content-Length: -5") + WHOLE,
}


@pytest.mark.parametrize("raw", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_body_whose_framing_is_broken_is_a_broken_answer(raw: bytes) -> None:
    """Read on, such a body would leave bytes of its own for the next request's answer (or
    hand on a part of the answer as if it were whole)."""

    async def scenario() -> None:
        async with LoopbackServer([Answer(raw)]) as server:
            with pytest.raises(ModelError, match="broke before the whole answer arrived"):
                await lean(server.url).complete(REQUEST)

    run(scenario)


# -- an answer larger than the bound: dropped at it, its connection closed -------------------

# The bound on an answer's body, lowered from 64 MiB so that reaching it takes a few reads.
BOUND = 64 * 1024
TOO_LARGE = f"the answer is over {BOUND} bytes; it was dropped"
MANY_DATA_LINES = b'data: {"id": "c1"}\n' * 200  # data lines no blank line ever ends


def chunk(piece: bytes) -> bytes:
    return f"{len(piece):x}\r\n".encode() + piece + b"\r\n"


CHUNKED_HEAD = head("200 OK", SSE, "Transfer-Encoding: chunked")
ENDLESS = {
    "a line without end": Answer(head("200 OK", SSE) + b"data: ", After.REPEAT, b"x" * 4096),
    "data lines without a blank line": Answer(head("200 OK", SSE), After.REPEAT, MANY_DATA_LINES),
    "a line without end, chunked": Answer(CHUNKED_HEAD, After.REPEAT, chunk(b"x" * 4096)),
    "data lines without a blank line, chunked": Answer(
        CHUNKED_HEAD, After.REPEAT, chunk(MANY_DATA_LINES)
    ),
    # One chunk that announces 4 GiB: it is read a piece at a time too, not whole.
    "one chunk of 4 GiB": Answer(CHUNKED_HEAD + b"ffffffff\r\n", After.REPEAT, b"x" * 4096),
}


@pytest.fixture
def released(monkeypatch: pytest.MonkeyPatch) -> list[openai_lean._Response]:
    """The responses handed back to the client, in turn, with the bound lowered to BOUND."""
    monkeypatch.setattr(sdk_provider, "MAX_ANSWER_BYTES", BOUND)
    seen: list[openai_lean._Response] = []
    release = LeanClient.release

    def noting(client: LeanClient, response: openai_lean._Response) -> None:
        seen.append(response)
        release(client, response)

    monkeypatch.setattr(LeanClient, "release", noting)
    return seen


@pytest.mark.parametrize("answer", ENDLESS.values(), ids=ENDLESS.keys())
def test_a_stream_that_never_ends_an_event_is_dropped_at_the_size_bound(
    answer: Answer, released: list[openai_lean._Response]
) -> None:
    """Only the time limit stopped such a stream, the reader holding all of it meanwhile: it
    fails at MAX_ANSWER_BYTES (the model's timeout is longer than HANG), having read at most
    one read past it, and its connection is closed, not reused."""

    async def scenario() -> None:
        async with LoopbackServer([answer, Answer(counted(STREAM))]) as server:
            model = lean(server.url, timeout=60)
            with pytest.raises(ModelError, match=TOO_LARGE):
                await model.complete(REQUEST, stream=lambda _text: None)
            assert BOUND < released[0].received <= BOUND + openai_lean._READ_SIZE
            assert await server.client_hung_up() == [0]
            assert await texts(model, 1, streaming=True) == ["hello there"]
            assert server.requests == [0, 1]

    run(scenario)


def test_a_whole_answer_in_one_chunk_of_4_gib_is_read_up_to_the_bound_only(
    released: list[openai_lean._Response],
) -> None:
    """A chunk's announced size was read in one go, held whole however large."""
    answer = Answer(
        head("200 OK", JSON, "Transfer-Encoding: chunked") + b"ffffffff\r\n",
        After.REPEAT,
        b"x" * 4096,
    )

    async def scenario() -> None:
        async with LoopbackServer([answer]) as server:
            with pytest.raises(ModelError, match=TOO_LARGE):
                await lean(server.url, timeout=60).complete(REQUEST)
            assert BOUND < released[0].received <= BOUND + openai_lean._READ_SIZE
            assert await server.client_hung_up() == [0]

    run(scenario)


@pytest.mark.parametrize("streaming", [True, False], ids=["streamed", "whole"])
def test_an_answer_announced_larger_than_the_bound_is_dropped_unread(
    streaming: bool, released: list[openai_lean._Response]
) -> None:
    """As the SDK clients do: its Content-Length alone refuses it, without waiting for it."""
    kind = SSE if streaming else JSON
    announced = head("200 OK", kind, f"Content-Length: {BOUND + 1}") + b"data: "

    async def scenario() -> None:
        async with LoopbackServer([Answer(announced, After.HOLD)]) as server:
            model = lean(server.url, timeout=60)
            with pytest.raises(ModelError, match=TOO_LARGE):
                await model.complete(REQUEST, stream=(lambda _text: None) if streaming else None)
            assert released[0].received == 0
            assert await server.client_hung_up() == [0]

    run(scenario)


@pytest.mark.parametrize("streaming", [True, False], ids=["streamed", "whole"])
def test_an_answer_of_exactly_the_bound_is_read_and_its_connection_kept(
    streaming: bool, released: list[openai_lean._Response]
) -> None:
    """The bound itself is allowed: only bytes past it fail the answer."""
    if streaming:
        padding = b": " + b"p" * (BOUND - len(STREAM) - 3) + b"\n"
        body = padding + STREAM
    else:
        body = WHOLE + b" " * (BOUND - len(WHOLE))
    assert len(body) == BOUND
    framings = [
        counted(body, SSE if streaming else JSON),
        chunked(body, SSE if streaming else JSON, size=5000),
    ]

    async def scenario() -> None:
        async with LoopbackServer([Answer(raw) for raw in framings]) as server:
            assert await texts(lean(server.url), 2, streaming=streaming) == ["hello there"] * 2
            assert [response.received for response in released] == [BOUND, BOUND]
            assert server.requests == [0, 0]

    run(scenario)


# -- a stream's lines, however its pieces cut them --------------------------------------------

# Lines ended by LF and by CRLF, an empty one, and a last one not yet ended.
LINES = b": ping\r\n" + STREAM.replace(b"\n\n", b"\r\n\r\n", 1) + b"data: {"


@settings(deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=len(LINES)), max_size=12))
def test_lines_are_the_same_however_the_body_is_cut_into_pieces(cuts: list[int]) -> None:
    """Only a new piece is searched for a line's end; a line begun in earlier pieces must
    still come whole, whatever the cuts (between CR and LF, empty pieces), and a line not yet
    ended must not come at all."""
    bounds = [0, *sorted(cuts), len(LINES)]
    lines = openai_lean._Lines()
    found = [
        line for start, end in itertools.pairwise(bounds) for line in lines.feed(LINES[start:end])
    ]
    assert found == LINES.split(b"\n")[:-1]
