"""OpenAIModel against a local stand-in Chat Completions server, over real HTTP.

Also the shared retry and error-wording helpers of ``agentscript.models.retry``.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import pytest

from agentscript.models.base import (
    Message,
    ModelError,
    ModelRequest,
    ModelResponse,
    ToolCall,
    ToolSpec,
    Usage,
)
from agentscript.models.openai_provider import (
    PLACEHOLDER_API_KEY,
    OpenAIModel,
    build_messages,
    build_tools,
    parse_tool_arguments,
)
from agentscript.models.retry import (
    RetriesExhausted,
    RetryPolicy,
    call_with_retries,
    describe_status,
    is_transient_status,
    redact,
    server_message,
)
from agentscript.models.sdk_provider import nonempty
from fakes.llm_servers import FakeCall, OpenAIServer, Reply, clear_env, complete, model_at
from fakes.ports import refused_port

KEY = "sk-test-secret-123456"

WEATHER = ToolSpec(
    "get_weather",
    "Look up the weather",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    clear_env(monkeypatch, "OPENAI_")


@pytest.fixture(autouse=True, params=["sdk", "lean"])
def client_kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test runs with the official SDK and with the lean client (openai-lean:), which
    must behave the same: same requests, same answers, same errors and retries."""
    if request.param == "lean":
        from agentscript.models.openai_lean import LeanOpenAIModel

        monkeypatch.setitem(globals(), "OpenAIModel", LeanOpenAIModel)
    return str(request.param)


def request(**overrides: Any) -> ModelRequest:
    values: dict[str, Any] = {
        "system": "You are a helpful agent.",
        "instructions": "Answer about the weather.",
        "messages": [Message("user", "Weather in Paris?")],
        "tools": [WEATHER],
    }
    values.update(overrides)
    return ModelRequest(**values)


def make(server: OpenAIServer, **options: Any) -> OpenAIModel:
    return model_at(server, OpenAIModel, "gpt-test", api_key=KEY, **options)


# -- requests sent ---------------------------------------------------------------------------


def test_text_answer_and_request_shape() -> None:
    with OpenAIServer([Reply(text="Sunny.", usage=(30, 4))]) as server:
        model = make(server, params={"temperature": 0.2, "max_tokens": 50})
        response = complete(model, request(params={"temperature": 0.0, "top_p": 0.9}))
    assert response == ModelResponse(
        text="Sunny.",
        tool_calls=[],
        usage=Usage(30, 4),
        model="gpt-test",
        stop_reason="stop",
    )
    sent = server.last
    assert sent.path == "/v1/chat/completions"
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    body = sent.body
    assert body["model"] == "gpt-test"
    assert body["messages"] == [
        {"role": "system", "content": "You are a helpful agent.\n\nAnswer about the weather."},
        {"role": "user", "content": "Weather in Paris?"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Look up the weather",
                "parameters": WEATHER.parameters,
            },
        }
    ]
    # Request params win over the model's own.
    assert body["temperature"] == 0.0
    assert body["top_p"] == 0.9
    assert body["max_tokens"] == 50
    assert "stream" not in body


@pytest.mark.parametrize(
    "text",
    ["café, 東京, 🙂", 'line\u2028separator, NUL \x00, quote " and \\', "lone \ud800 surrogate"],
)
def test_every_character_of_the_conversation_reaches_the_server(
    text: str, client_kind: str
) -> None:
    with OpenAIServer([Reply(text="ok")]) as server:
        if client_kind == "sdk" and "\ud800" in text:
            # The official SDK cannot encode it: the call fails as a model error, no traceback.
            with pytest.raises(ModelError, match="surrogates not allowed"):
                complete(make(server), request(messages=[Message("user", text)]))
            return
        # The lean client writes its body with orjson, which refuses a lone surrogate: that
        # body falls back to the standard library's escapes instead of failing the call.
        complete(make(server), request(messages=[Message("user", text)]))
    assert server.last.body["messages"][-1] == {"role": "user", "content": text}


def test_history_with_tool_calls_and_results() -> None:
    history = [
        Message("user", "Weather in Paris and Rome?"),
        Message(
            "assistant",
            "",
            tool_calls=[
                ToolCall("call_a", "get_weather", {"city": "Paris"}),
                ToolCall("call_b", "get_weather", None, raw_arguments="{city: Rome"),
            ],
        ),
        Message("tool", '{"temp": 21}', tool_call_id="call_a", name="get_weather"),
        Message("tool", "error: bad arguments", tool_call_id="call_b", name="get_weather"),
        Message("assistant", "Paris is 21 degrees."),
    ]
    assert build_messages(request(messages=history, system="", instructions="")) == [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                },
                {
                    "id": "call_b",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": "{city: Rome"},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_a", "content": '{"temp": 21}'},
        {"role": "tool", "tool_call_id": "call_b", "content": "error: bad arguments"},
        {"role": "assistant", "content": "Paris is 21 degrees."},
    ]
    with OpenAIServer([Reply(text="Done.")]) as server:
        complete(make(server), request(messages=history))
    assert [m["role"] for m in server.last.body["messages"]] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "assistant",
    ]


def test_no_tools_and_no_system_are_left_out() -> None:
    with OpenAIServer([Reply(text="Hi")]) as server:
        complete(make(server), request(tools=[], system=" ", instructions=""))
    assert "tools" not in server.last.body
    assert server.last.body["messages"] == [{"role": "user", "content": "Weather in Paris?"}]


def test_build_tools() -> None:
    assert build_tools([ToolSpec("noop", "Does nothing")]) == [
        {
            "type": "function",
            "function": {
                "name": "noop",
                "description": "Does nothing",
                "parameters": {"type": "object", "properties": {}, "required": []},
            },
        }
    ]


def test_bad_messages_are_model_errors() -> None:
    with pytest.raises(ModelError, match="no tool_call_id"):
        build_messages(request(messages=[Message("tool", "x")]))
    with pytest.raises(ModelError, match="Unsupported message role 'robot'"):
        build_messages(request(messages=[Message("robot", "x")]))


def test_reserved_params_are_refused() -> None:
    with OpenAIServer([]) as server, pytest.raises(ModelError, match="messages"):
        complete(make(server), request(params={"messages": []}))
    assert server.requests == []


# -- responses parsed ------------------------------------------------------------------------


def test_parallel_tool_calls() -> None:
    calls = [
        FakeCall.of("get_weather", {"city": "Paris"}, id="call_p"),
        FakeCall.of("get_weather", {"city": "Rome"}, id="call_r"),
    ]
    with OpenAIServer([Reply(calls=calls)]) as server:
        response = complete(make(server), request())
    assert response.text is None
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
        ("call_p", "get_weather", {"city": "Paris"}),
        ("call_r", "get_weather", {"city": "Rome"}),
    ]


def test_malformed_arguments_never_raise() -> None:
    calls = [FakeCall("get_weather", '{"city": "Par'), FakeCall("get_weather", "[1, 2]")]
    with OpenAIServer([Reply(calls=calls)]) as server:
        response = complete(make(server), request())
    assert [(c.arguments, c.raw_arguments) for c in response.tool_calls] == [
        (None, '{"city": "Par'),
        (None, "[1, 2]"),
    ]


def test_nonempty() -> None:
    assert nonempty(" Paris ") == " Paris "
    assert nonempty(" \n") is None
    assert nonempty(None) is None


def test_parse_tool_arguments() -> None:
    assert parse_tool_arguments('{"a": 1}') == ({"a": 1}, '{"a": 1}')
    assert parse_tool_arguments("") == ({}, "")
    assert parse_tool_arguments(None) == ({}, "")
    assert parse_tool_arguments("null") == (None, "null")
    assert parse_tool_arguments("{oops") == (None, "{oops")
    assert parse_tool_arguments({"b": 2}) == ({"b": 2}, '{"b": 2}')


# -- streaming -------------------------------------------------------------------------------


def test_streaming_text_reaches_the_sink_in_pieces() -> None:
    pieces: list[str] = []
    with OpenAIServer([Reply(text="It is sunny in Paris.", usage=(12, 6))]) as server:
        response = complete(make(server), request(), stream=pieces.append)
    assert len(pieces) > 1
    assert "".join(pieces) == "It is sunny in Paris."
    assert response.text == "It is sunny in Paris."
    assert response.usage == Usage(12, 6)
    assert server.last.body["stream"] is True
    assert server.last.body["stream_options"] == {"include_usage": True}


def test_streaming_interleaved_parallel_tool_calls() -> None:
    calls = [
        FakeCall.of("get_weather", {"city": "Paris", "unit": "celsius"}, id="call_1"),
        FakeCall.of("get_weather", {"city": "Rome", "unit": "celsius"}, id="call_2"),
        FakeCall("get_time", '{"zone": "CET"', id="call_3"),
    ]
    pieces: list[str] = []
    with OpenAIServer([Reply(text="Checking.", calls=calls, interleave=True)]) as server:
        response = complete(make(server), request(), stream=pieces.append)
    assert "".join(pieces) == "Checking."
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
        ("call_1", "get_weather", {"city": "Paris", "unit": "celsius"}),
        ("call_2", "get_weather", {"city": "Rome", "unit": "celsius"}),
        ("call_3", "get_time", None),
    ]
    assert response.tool_calls[2].raw_arguments == '{"zone": "CET"'


def test_streaming_without_usage_is_tolerated() -> None:
    with OpenAIServer([Reply(text="Hi", stream_usage=False)]) as server:
        response = complete(make(server), request(), stream=lambda _: None)
    assert response.text == "Hi"
    assert response.usage is None


def test_error_after_streamed_text_is_not_retried() -> None:
    pieces: list[str] = []
    script = [Reply(text="Hello world", stream_error="backend exploded"), Reply(text="never")]
    with OpenAIServer(script) as server, pytest.raises(ModelError, match="backend exploded"):
        complete(make(server), request(), stream=pieces.append)
    assert pieces == ["Hel"]
    assert len(server.requests) == 1


# -- failures --------------------------------------------------------------------------------


def test_rate_limit_and_server_error_are_retried() -> None:
    script = [Reply(status=429), Reply(status=500), Reply(text="Finally.")]
    with OpenAIServer(script) as server:
        response = complete(make(server, max_retries=2), request())
    assert response.text == "Finally."
    assert len(server.requests) == 3


def test_streaming_request_is_retried_before_any_text() -> None:
    pieces: list[str] = []
    with OpenAIServer([Reply(status=503), Reply(text="Back.")]) as server:
        response = complete(make(server), request(), stream=pieces.append)
    assert response.text == "Back."
    assert "".join(pieces) == "Back."
    assert len(server.requests) == 2


def test_retries_exhausted() -> None:
    script = [Reply(status=500, error="upstream down")] * 3
    with OpenAIServer(script) as server, pytest.raises(ModelError) as info:
        complete(make(server, max_retries=2), request())
    assert len(server.requests) == 3
    message = str(info.value)
    assert "HTTP 500" in message
    assert "3 attempts" in message
    assert "upstream down" in message


def test_bad_key_is_not_retried_and_not_shown() -> None:
    script = [Reply(status=401, error=f"Incorrect API key provided: {KEY}")]
    with OpenAIServer(script) as server, pytest.raises(ModelError) as info:
        complete(make(server), request())
    assert len(server.requests) == 1
    assert "rejected the API key" in str(info.value)
    assert "OPENAI_API_KEY" in str(info.value)
    assert KEY not in str(info.value)


def test_unknown_model() -> None:
    script = [Reply(status=404, error="The model `gpt-test` does not exist")]
    with (
        OpenAIServer(script) as server,
        pytest.raises(ModelError, match="does not know model 'gpt-test'"),
    ):
        complete(make(server), request())


def test_refused_request_includes_server_message_without_secrets() -> None:
    script = [Reply(status=400, error=f"Invalid 'tools[0]' (key {KEY})")]
    with OpenAIServer(script) as server, pytest.raises(ModelError) as info:
        complete(make(server), request())
    message = str(info.value)
    assert "refused the request (HTTP 400)" in message
    assert "Invalid 'tools[0]'" in message
    assert KEY not in message
    assert "***" in message


def test_timeout_becomes_model_error() -> None:
    with OpenAIServer([Reply(text="late", delay=5.0)]) as server:
        model = make(server, timeout=0.3, max_retries=0)
        with pytest.raises(ModelError, match=r"did not answer within 0\.3 s"):
            complete(model, request())


def test_connection_refused() -> None:
    with refused_port() as port:
        model = OpenAIModel(
            "gpt-test", base_url=f"http://127.0.0.1:{port}/v1", max_retries=1, retry_base_delay=0
        )
        with pytest.raises(
            ModelError, match=r"Could not connect to http://127\.0\.0\.1:\d+/v1 \(2 attempts\)"
        ):
            complete(model, request())


@pytest.mark.parametrize("lean", [False, True], ids=["sdk", "lean"])
def test_errors_name_the_server_without_the_credentials_its_url_carries(lean: bool) -> None:
    from agentscript.models.openai_lean import LeanOpenAIModel

    with refused_port() as port:
        url = f"http://app:hunter2@127.0.0.1:{port}/v1?api-key=tok-in-query"
        cls = LeanOpenAIModel if lean else OpenAIModel
        model = cls("gpt-test", base_url=url, max_retries=0, retry_base_delay=0)
        with pytest.raises(ModelError) as caught:
            complete(model, request())
    message = str(caught.value)
    assert f"Could not connect to http://127.0.0.1:{port}/v1." in message
    assert "hunter2" not in message and "tok-in-query" not in message
    assert "hunter2" not in repr(model) and "tok-in-query" not in repr(model)


# -- configuration ---------------------------------------------------------------------------


def test_missing_key_without_base_url() -> None:
    with pytest.raises(ModelError) as info:
        OpenAIModel("gpt-4o-mini")
    assert "set OPENAI_API_KEY" in str(info.value)
    assert "--base-url" in str(info.value)


def test_local_server_needs_no_key() -> None:
    with OpenAIServer([Reply(text="Local.")]) as server:
        model = OpenAIModel("llama3.1:8b", base_url=server.base_url)
        assert complete(model, request()).text == "Local."
    assert server.last.headers["authorization"] == f"Bearer {PLACEHOLDER_API_KEY}"
    assert server.last.body["model"] == "llama3.1:8b"


def test_environment_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    with OpenAIServer([Reply(text="From env.")]) as server:
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        model = OpenAIModel("gpt-test")
        assert model.base_url == server.base_url
        assert complete(model, request()).text == "From env."
    assert server.last.headers["authorization"] == f"Bearer {KEY}"


def test_model_is_reusable_across_event_loops() -> None:
    with OpenAIServer([Reply(text="one"), Reply(text="two")]) as server:
        model = make(server)
        assert complete(model, request()).text == "one"
        assert complete(model, request()).text == "two"


def test_repr_and_name_hide_the_key(client_kind: str) -> None:
    model = OpenAIModel("gpt-4o", api_key=KEY)
    assert model.name == ("openai:gpt-4o" if client_kind == "sdk" else "openai-lean:gpt-4o")
    assert KEY not in repr(model)


def test_empty_model_name() -> None:
    with pytest.raises(ModelError, match="model name is empty"):
        OpenAIModel(" ", api_key=KEY)


def test_missing_sdk(monkeypatch: pytest.MonkeyPatch, client_kind: str) -> None:
    if client_kind == "lean":
        pytest.skip("the lean client needs no SDK")
    monkeypatch.setitem(sys.modules, "openai", None)
    with pytest.raises(ModelError, match=r"pip install 'agentscript\[openai\]'"):
        OpenAIModel("gpt-4o", api_key=KEY)


# -- retry and wording helpers ---------------------------------------------------------------


def test_retry_policy_delays() -> None:
    policy = RetryPolicy(max_retries=5, base_delay=1.0, max_delay=3.0)
    for retry, (low, high) in enumerate([(0.5, 1.0), (1.0, 2.0), (2.0, 3.0), (3.0, 3.0)]):
        assert low <= policy.delay(retry) <= high
    with pytest.raises(ValueError):
        RetryPolicy(max_retries=-1)


def test_call_with_retries() -> None:
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    outcomes: list[Exception | str] = [TimeoutError(), TimeoutError(), "ok"]

    async def flaky() -> str:
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    def transient(exc: BaseException) -> bool:
        return isinstance(exc, TimeoutError)

    policy = RetryPolicy(max_retries=2, base_delay=1.0)
    assert asyncio.run(call_with_retries(flaky, policy, transient, sleep=sleep)) == "ok"
    assert len(waits) == 2

    outcomes[:] = [TimeoutError(), TimeoutError()]
    with pytest.raises(RetriesExhausted) as info:
        asyncio.run(call_with_retries(flaky, RetryPolicy(max_retries=1), transient, sleep=sleep))
    assert info.value.attempts == 2
    assert isinstance(info.value.__cause__, TimeoutError)

    outcomes[:] = [ValueError("permanent")]
    with pytest.raises(ValueError, match="permanent"):
        asyncio.run(call_with_retries(flaky, policy, transient, sleep=sleep))


def test_server_message_shapes() -> None:
    assert server_message({"error": {"message": "bad tool"}}) == "bad tool"
    assert server_message({"type": "error", "error": {"type": "x", "message": "m"}}) == "m"
    assert server_message({"error": "flat"}) == "flat"
    assert server_message({"detail": "fastapi style"}) == "fastapi style"
    assert server_message("plain text") == "plain text"
    assert server_message(None, "fallback") == "fallback"
    assert server_message("x" * 600).endswith("...")


def test_describe_status() -> None:
    def say(status: int, attempts: int = 1) -> str:
        return describe_status("P", status, "why", model="m", key_env="P_KEY", attempts=attempts)

    assert say(401) == "P rejected the API key (HTTP 401). Check P_KEY."
    assert "may use model 'm'" in say(403)
    assert "does not know model 'm' (HTTP 404): why" in say(404)
    assert say(429, 3).startswith("P is rate limiting requests")
    assert "after 3 attempts" in say(429, 3)
    assert say(502) == "P had a server error (HTTP 502): why"
    assert say(422) == "P refused the request (HTTP 422): why"


def test_transient_statuses_and_redaction() -> None:
    assert [s for s in (400, 401, 404, 408, 409, 429, 500, 529) if is_transient_status(s)] == [
        408,
        409,
        429,
        500,
        529,
    ]
    assert redact("key sk-abcdef used", ["sk-abcdef", None, ""]) == "key *** used"


# -- stop reasons and refusals -----------------------------------------------------------


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
def test_the_finish_reason_is_kept_as_the_stop_reason(streamed: bool) -> None:
    with OpenAIServer([Reply(text=None, stop_reason="content_filter")]) as server:
        response = complete(make(server), request(), stream=(lambda _: None) if streamed else None)
    assert response.stop_reason == "content_filter"
    assert response.empty()


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
def test_a_refusal_is_the_answer_text_whole_or_streamed(streamed: bool) -> None:
    pieces: list[str] = []
    sink = pieces.append if streamed else None
    with OpenAIServer([Reply(text=None, refusal="I can't help with that.")]) as server:
        response = complete(make(server), request(), stream=sink)
    assert response.text == "I can't help with that."
    assert response.stop_reason == "stop"
    if streamed:  # the user sees the refusal as it arrives, like any text
        assert "".join(pieces) == "I can't help with that."


def test_a_hostile_finish_reason_is_kept_short() -> None:
    with OpenAIServer([Reply(text="Hi", stop_reason="x" * 10_000)]) as server:
        response = complete(make(server), request())
    assert response.stop_reason == "x" * 100


# -- the size of a whole answer --------------------------------------------------------------


def test_a_whole_answer_over_the_bound_is_dropped_and_not_retried(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agentscript.models import sdk_provider

    monkeypatch.setattr(sdk_provider, "MAX_ANSWER_BYTES", 2_000)
    with OpenAIServer([Reply(text="x" * 5_000), Reply(text="never")]) as server:
        with pytest.raises(ModelError) as caught:
            complete(make(server), request())
        assert len(server.requests) == 1  # it would come again: not retried
    assert str(caught.value) == (
        "OpenAI model 'gpt-test': the answer is over 2000 bytes; it was dropped"
    )


def test_a_whole_answer_under_the_bound_passes_and_is_asked_for_uncompressed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agentscript.models import sdk_provider

    monkeypatch.setattr(sdk_provider, "MAX_ANSWER_BYTES", 2_000)
    with OpenAIServer([Reply(text="x" * 1_000)]) as server:
        assert complete(make(server), request()).text == "x" * 1_000
        # the bound counts bytes as they arrive: a compressed body could expand past it
        assert server.last.headers.get("accept-encoding") == "identity"
