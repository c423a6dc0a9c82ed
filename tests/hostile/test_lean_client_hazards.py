"""The lean OpenAI-compatible client (``openai-lean:``) against servers that misbehave at the
HTTP level: cut bodies, non-answers, closed kept-alive connections, chunked transfer. The
well-behaved cases run in tests/test_models_openai.py, with the SDK and with this client."""

from __future__ import annotations

import asyncio
import json
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest
from raw_server import (
    RawServer,
    cut_stream,
    html_page,
    json_string,
    openai_completion,
    openai_stream,
    send,
)

from agentscript.models.base import Message, ModelError, ModelRequest, ModelResponse
from agentscript.models.config import model_from_spec
from agentscript.models.openai_lean import LeanOpenAIModel

USAGE = {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
REQUEST = ModelRequest("You help.", "", [Message("user", "hi")], [])


def chunked(handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
    """The answer in chunked transfer encoding, cut into small chunks."""
    streaming = bool(body.get("stream"))
    payload = (
        openai_stream("hello there") if streaming else openai_completion("hello there", usage=USAGE)
    )
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream" if streaming else "application/json")
    handler.send_header("Transfer-Encoding", "chunked")
    handler.end_headers()
    for start in range(0, len(payload), 7):
        piece = payload[start : start + 7]
        handler.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
    handler.wfile.write(b"0\r\n\r\n")
    handler.wfile.flush()


def answer_then_hang_up(handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
    """A good answer on a kept-alive connection the server then closes without saying so."""
    if body.get("stream"):
        send(handler, 200, "text/event-stream", openai_stream("again"))
    else:
        send(handler, 200, "application/json", openai_completion("again", usage=USAGE))
    handler.close_connection = True


def complete(url: str, *, streaming: bool, model: LeanOpenAIModel | None = None) -> ModelResponse:
    model = model or LeanOpenAIModel("gpt-test", api_key="sk-test", base_url=url, max_retries=0)
    sink = (lambda _text: None) if streaming else None
    return asyncio.run(model.complete(REQUEST, stream=sink))


def test_openai_lean_spec_builds_the_lean_client() -> None:
    model = model_from_spec("openai-lean:gpt-test", base_url="http://127.0.0.1:9/v1")
    assert isinstance(model, LeanOpenAIModel)
    assert model.name == "openai-lean:gpt-test"


def test_a_stream_cut_mid_answer_is_reported_as_cut() -> None:
    with RawServer(cut_stream) as server, pytest.raises(ModelError) as caught:
        complete(server.url, streaming=True)
    message = str(caught.value)
    assert "cut off mid-stream after 13 character(s)" in message
    assert "Could not connect" not in message


def test_a_whole_answer_cut_short_is_a_broken_connection() -> None:
    with RawServer(cut_stream) as server, pytest.raises(ModelError) as caught:
        complete(server.url, streaming=False)
    assert "broke before the whole answer arrived" in str(caught.value)


@pytest.mark.parametrize("answer", [html_page, json_string], ids=["html", "json-string"])
@pytest.mark.parametrize("streaming", [True, False], ids=["streamed", "whole"])
def test_a_body_that_is_not_an_answer_is_a_clear_model_error(answer: Any, streaming: bool) -> None:
    with RawServer(answer) as server, pytest.raises(ModelError) as caught:
        complete(server.url, streaming=streaming)
    message = str(caught.value)
    assert "check that --base-url points at a server speaking the OpenAI API" in message
    assert "JSONDecodeError" not in message and "AttributeError" not in message


@pytest.mark.parametrize("streaming", [True, False], ids=["streamed", "whole"])
def test_chunked_answers_are_read_whole(streaming: bool) -> None:
    with RawServer(chunked) as server:
        response = complete(server.url, streaming=streaming)
    assert response.text == "hello there"


@pytest.mark.parametrize("streaming", [True, False], ids=["streamed", "whole"])
def test_a_kept_alive_connection_the_server_closed_is_replaced(streaming: bool) -> None:
    """The second call finds its pooled connection closed by the server: it is sent again on
    a new connection, not reported as a failure (no retry budget used: max_retries=0)."""
    with RawServer(answer_then_hang_up) as server:
        model = LeanOpenAIModel("gpt-test", api_key="sk-test", base_url=server.url, max_retries=0)

        async def twice() -> list[str | None]:
            first = await model.complete(REQUEST, stream=(lambda _t: None) if streaming else None)
            await asyncio.sleep(0.05)  # the server has closed the connection by now
            second = await model.complete(REQUEST, stream=(lambda _t: None) if streaming else None)
            return [first.text, second.text]

        assert asyncio.run(twice()) == ["again", "again"]
        assert len(server.bodies) == 2


def test_connections_are_reused_between_calls() -> None:
    opened: list[int] = []

    def answer(handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        opened.append(id(handler))  # one handler object per connection
        send(handler, 200, "application/json", openai_completion("ok", usage=USAGE))

    with RawServer(answer) as server:
        model = LeanOpenAIModel("gpt-test", api_key="sk-test", base_url=server.url)

        async def three() -> None:
            for _ in range(3):
                assert (await model.complete(REQUEST)).text == "ok"

        asyncio.run(three())
    assert len(set(opened)) == 1


def test_the_key_is_sent_and_never_shown() -> None:
    seen: list[str] = []

    def refuse(handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        seen.append(handler.headers.get("Authorization", ""))
        send(handler, 401, "application/json", b'{"error": {"message": "bad key sk-secret-1"}}')

    with RawServer(refuse) as server, pytest.raises(ModelError) as caught:
        model = LeanOpenAIModel("gpt-test", api_key="sk-secret-1", base_url=server.url)
        complete(server.url, streaming=False, model=model)
    assert seen == ["Bearer sk-secret-1"]
    assert "sk-secret-1" not in str(caught.value)
    assert "401" in str(caught.value) or "key" in str(caught.value).lower()


def test_a_bad_base_url_is_a_model_error() -> None:
    with pytest.raises(ModelError, match="not an http:// or https:// URL"):
        complete("ftp://example.com/v1", streaming=False)


def error_at_200(handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
    """A gateway passing on a failed upstream call as a successful answer."""
    error = {"error": {"message": "upstream model overloaded", "code": 502}}
    send(handler, 200, "application/json", json.dumps(error).encode())


@pytest.mark.parametrize("sdk", [False, True], ids=["lean", "sdk"])
def test_an_error_answered_with_status_200_is_reported_with_its_message(sdk: bool) -> None:
    from agentscript.models.openai_provider import OpenAIModel

    with RawServer(error_at_200) as server, pytest.raises(ModelError) as caught:
        cls = OpenAIModel if sdk else LeanOpenAIModel
        model = cls("gpt-test", api_key="sk-test", base_url=server.url, max_retries=0)
        asyncio.run(model.complete(REQUEST))
    assert str(caught.value) == (
        "OpenAI model 'gpt-test' answered with an error: upstream model overloaded"
    )
