"""Streamed answers that never end: a server sending only keep-alive comments, one trickling
empty events, one sending text without end. Each must end the model call (and so the turn,
and its session's lease) within bounded time and memory, through the lean client and the
official SDK alike; the text a client is shown stops at ``Limits.max_reply_chars``."""

from __future__ import annotations

import asyncio
import contextlib
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from raw_server import RawServer, openai_chunk, openai_stream

import agentscript
from agentscript.engine.llm import call_model
from agentscript.errors import LimitReached
from agentscript.limits import Limits
from agentscript.models import sdk_provider
from agentscript.models.base import Message, ModelError, ModelRequest
from agentscript.models.openai_lean import LeanOpenAIModel
from agentscript.models.openai_provider import OpenAIModel
from agentscript.models.sdk_provider import SdkModel
from agentscript.trace import TurnTrace

REQUEST = ModelRequest("You help.", "", [Message("user", "hi")], [])
SHOP = Path(__file__).parents[1] / "agents_models" / "shop.agent"
CLIENTS = [LeanOpenAIModel, OpenAIModel]
# Generous: each test's own bound is well under it; it only stops a hung test.
HANG = 30.0


def _start_stream(handler: BaseHTTPRequestHandler) -> None:
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream")
    handler.send_header("Transfer-Encoding", "chunked")
    handler.end_headers()


def _chunk(handler: BaseHTTPRequestHandler, data: bytes) -> None:
    handler.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
    handler.wfile.flush()


def _until_hung_up(handler: BaseHTTPRequestHandler, data: bytes, pause: float) -> None:
    """Send ``data`` every ``pause`` seconds until the client goes away (or a minute)."""
    end = time.monotonic() + 60
    with contextlib.suppress(OSError):
        while time.monotonic() < end:
            _chunk(handler, data)
            time.sleep(pause)
    handler.close_connection = True


def keep_alive_only(handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
    """A stream that is open and busy, and never says a word of the answer."""
    _start_stream(handler)
    _until_hung_up(handler, b": keep-alive\n\n", 0.05)


def text_then_keep_alive(handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
    _start_stream(handler)
    _chunk(handler, openai_chunk("Let me check"))
    _until_hung_up(handler, b": keep-alive\n\n", 0.05)


def empty_events(handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
    """Events keep coming, each with nothing in it: no single wait is long."""
    _start_stream(handler)
    _until_hung_up(handler, openai_chunk(), 0.05)


def endless_text(handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
    _start_stream(handler)
    _until_hung_up(handler, openai_chunk("x" * 1000), 0.0)


def model(cls: type[SdkModel], url: str, **options: Any) -> SdkModel:
    options.setdefault("max_retries", 0)
    return cls("gpt-test", api_key="sk-test", base_url=url, retry_base_delay=0.0, **options)


def complete(chosen: SdkModel, shown: list[str]) -> Any:
    async def main() -> Any:
        return await asyncio.wait_for(chosen.complete(REQUEST, stream=shown.append), HANG)

    return asyncio.run(main())


@pytest.mark.parametrize("cls", CLIENTS, ids=["lean", "sdk"])
def test_a_stream_of_keep_alives_alone_fails_after_the_models_timeout(cls: Any) -> None:
    with RawServer(keep_alive_only) as server, pytest.raises(ModelError) as caught:
        complete(model(cls, server.url, timeout=0.5), [])
    assert "sent no part of its answer for 0.5 s (after 0 character(s) of text)" in str(
        caught.value
    )


@pytest.mark.parametrize("cls", CLIENTS, ids=["lean", "sdk"])
def test_a_stalled_stream_is_retried_while_nothing_was_shown(cls: Any) -> None:
    with RawServer(keep_alive_only) as server, pytest.raises(ModelError) as caught:
        complete(model(cls, server.url, timeout=0.3, max_retries=1), [])
    assert "sent no part of its answer for 0.3 s" in str(caught.value)
    assert "(2 attempts)" in str(caught.value)
    assert len(server.bodies) == 2
    assert [e["reason"] for e in caught.value.events] == ["StreamStalled"]


@pytest.mark.parametrize("cls", CLIENTS, ids=["lean", "sdk"])
def test_a_stream_that_stalls_after_some_text_is_not_retried(cls: Any) -> None:
    shown: list[str] = []
    with RawServer(text_then_keep_alive) as server, pytest.raises(ModelError) as caught:
        complete(model(cls, server.url, timeout=1.0, max_retries=2), shown)
    assert "sent no part of its answer for 1 s (after 12 character(s) of text)" in str(caught.value)
    assert shown == ["Let me check"]  # shown once: a retry would show it twice
    assert len(server.bodies) == 1


def few_long_reads(monkeypatch: pytest.MonkeyPatch) -> tuple[float, float]:
    """A model timeout (one read) of 2 s, forty times the pause between the servers' events,
    and a whole time of three of them: ``(timeout, whole)``. With a timeout of 0.5 s a pause
    of the test process (a full garbage collection of the suite's heap takes up to 0.7 s)
    failed a single read before the whole time was up."""
    monkeypatch.setattr(sdk_provider, "WHOLE_STREAM_TIMEOUTS", 3)
    return 2.0, 6.0


@pytest.mark.parametrize("cls", CLIENTS, ids=["lean", "sdk"])
def test_a_stream_that_never_ends_fails_after_its_whole_time(
    cls: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    timeout, whole = few_long_reads(monkeypatch)
    started = time.monotonic()
    with RawServer(empty_events) as server, pytest.raises(ModelError) as caught:
        complete(model(cls, server.url, timeout=timeout), [])
    assert f"did not finish its streamed answer within {whole:g} s" in str(caught.value)
    # It ran its whole time: the single waits were never long.
    assert time.monotonic() - started >= whole


@pytest.mark.parametrize("cls", CLIENTS, ids=["lean", "sdk"])
def test_streamed_text_stops_at_max_reply_chars(cls: Any) -> None:
    shown: list[str] = []
    most = 50_000

    async def main() -> None:
        chosen = model(cls, server.url, timeout=5.0)
        trace = TurnTrace("Shop", "s1", "p1", 1, "hi")
        call = call_model(
            chosen, REQUEST, trace, iteration=0, stream=shown.append, max_reply_chars=most
        )
        await asyncio.wait_for(call, HANG)

    with RawServer(endless_text) as server, pytest.raises(LimitReached) as caught:
        asyncio.run(main())
    assert caught.value.limit == "max_reply_chars"
    assert sum(map(len, shown)) <= most  # the client was shown no more than the limit
    assert sum(map(len, shown)) >= most - 1000


def test_a_turn_whose_streamed_reply_never_ends_ends_and_the_session_goes_on() -> None:
    """Through the engine, as serve's event streams and chat run it: the turn ends with
    the limit named in its error and trace, and the next turn is answered."""
    turns = iter([endless_text, lambda h, b: _answer(h, "Hello again")])

    def answer(handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        next(turns)(handler, body)

    with RawServer(answer) as server:
        chosen = model(LeanOpenAIModel, server.url, timeout=5.0)
        agent = agentscript.load(SHOP)
        session = agent.session(model=chosen, limits=Limits(max_reply_chars=20_000))
        shown: list[str] = []
        session.on_text = shown.append
        first = session.send("hi")
        second = session.send("still there?")
    assert first.error is not None and "max_reply_chars" in first.error
    # The first turn's streamed text stops at the bound; its error message follows, said as
    # the turn fails (engine/speech.py), then the second turn's answer.
    assert shown[-3:] == ["\n\n", first.text, "Hello again"]
    assert sum(map(len, shown[:-3])) <= 20_000
    llm = [s for s in first.trace["planTrace"]["steps"] if s["type"] == "LLM_STEP"]
    assert "max_reply_chars" in llm[-1]["error"]
    assert second.error is None and second.text == "Hello again"


def _answer(handler: BaseHTTPRequestHandler, text: str) -> None:
    _start_stream(handler)
    _chunk(handler, openai_stream(text))
    _chunk(handler, b"")


def test_a_sink_that_fails_cuts_the_stream_and_only_that_turn_fails() -> None:
    """A reader gone away (a closed pipe under `chat`) is a stream cut off: the turn fails by
    the rule of failed turns, and the session goes on; only the reply limit ends a turn as a
    limit."""

    def answer(handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        _answer(handler, "Hello again")

    def closed_pipe(_text: str) -> None:
        raise BrokenPipeError(32, "Broken pipe")

    with RawServer(answer) as server:
        session = agentscript.load(SHOP).session(model=model(LeanOpenAIModel, server.url))
        session.on_text = closed_pipe
        first = session.send("hi")
        shown: list[str] = []
        session.on_text = shown.append
        second = session.send("still there?")
    assert first.error is not None and "cut off mid-stream" in first.error
    assert second.error is None and second.text == "Hello again" and shown == ["Hello again"]


def whole_answer_a_byte_at_a_time(handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
    """A whole (not streamed) answer whose body comes a byte every 50 ms: no single read waits
    long, and it would take a minute."""
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", "1200")
    handler.end_headers()
    with contextlib.suppress(OSError):
        for _ in range(1200):
            handler.wfile.write(b" ")
            handler.wfile.flush()
            time.sleep(0.05)
    handler.close_connection = True


@pytest.mark.parametrize("cls", CLIENTS, ids=["lean", "sdk"])
def test_a_whole_answer_that_trickles_in_fails_within_its_whole_time(
    cls: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    timeout, whole = few_long_reads(monkeypatch)
    started = time.monotonic()

    async def main() -> Any:
        return await asyncio.wait_for(
            model(cls, server.url, timeout=timeout).complete(REQUEST), HANG
        )

    with RawServer(whole_answer_a_byte_at_a_time) as server, pytest.raises(ModelError) as caught:
        asyncio.run(main())
    # The lean client bounds each whole body by the timeout, the SDK path by its whole time.
    assert time.monotonic() - started < whole + 5
    wanted = (
        f"did not finish its answer within {whole:g} s"
        if cls is OpenAIModel
        else f"did not answer within {timeout:g} s"
    )
    assert wanted in str(caught.value)
