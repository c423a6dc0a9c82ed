"""AnthropicModel against a local stand-in Messages API server, over real HTTP."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from agentscript.models.anthropic_provider import (
    CONVERSATION_START,
    DEFAULT_MAX_TOKENS,
    AnthropicModel,
    build_messages,
    build_tools,
)
from agentscript.models.base import (
    Message,
    ModelError,
    ModelRequest,
    ModelResponse,
    ToolCall,
    ToolSpec,
    Usage,
)
from agentscript.models.sdk_provider import PLACEHOLDER_API_KEY
from fakes.llm_servers import AnthropicServer, FakeCall, Reply, clear_env, complete, model_at

KEY = "sk-ant-test-secret-98765"

LOOKUP = ToolSpec(
    "lookup_order",
    "Find an order",
    {"type": "object", "properties": {"order": {"type": "string"}}, "required": ["order"]},
)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    clear_env(monkeypatch, "ANTHROPIC_")
    # Keeps the SDK away from any credentials file of the machine running the tests.
    monkeypatch.setenv("ANTHROPIC_CONFIG_DIR", str(tmp_path))


def request(**overrides: Any) -> ModelRequest:
    values: dict[str, Any] = {
        "system": "You are an order assistant.",
        "instructions": "Look orders up.",
        "messages": [Message("user", "Where is order 42?")],
        "tools": [LOOKUP],
    }
    values.update(overrides)
    return ModelRequest(**values)


def make(server: AnthropicServer, **options: Any) -> AnthropicModel:
    return model_at(server, AnthropicModel, "claude-test", api_key=KEY, **options)


def sent_key(headers: dict[str, str]) -> str:
    """The credential as the SDK sent it (x-api-key or a bearer token, by SDK version)."""
    return headers.get("x-api-key") or headers.get("authorization", "").removeprefix("Bearer ")


# -- requests sent ---------------------------------------------------------------------------


def test_text_answer_and_request_shape() -> None:
    with AnthropicServer([Reply(text="It ships tomorrow.", usage=(40, 9))]) as server:
        model = make(server, params={"temperature": 0.5})
        response = complete(model, request(params={"temperature": 0.0, "stop": "END"}))
    assert response == ModelResponse(
        text="It ships tomorrow.",
        tool_calls=[],
        usage=Usage(40, 9),
        model="claude-test",
        stop_reason="end_turn",
    )
    sent = server.last
    assert sent.path == "/v1/messages"
    assert sent_key(sent.headers) == KEY
    assert "anthropic-version" in sent.headers
    body = sent.body
    assert body["model"] == "claude-test"
    assert body["system"] == "You are an order assistant.\n\nLook orders up."
    assert body["messages"] == [{"role": "user", "content": "Where is order 42?"}]
    assert body["tools"] == [
        {"name": "lookup_order", "description": "Find an order", "input_schema": LOOKUP.parameters}
    ]
    assert body["max_tokens"] == DEFAULT_MAX_TOKENS
    assert body["temperature"] == 0.0
    assert body["stop_sequences"] == ["END"]
    assert "stop" not in body


def test_max_tokens_can_be_set() -> None:
    with AnthropicServer([Reply(text="a"), Reply(text="b")]) as server:
        model = make(server, params={"max_tokens": 300})
        complete(model, request())
        assert server.last.body["max_tokens"] == 300
        complete(model, request(params={"max_tokens": 64}))
        assert server.last.body["max_tokens"] == 64


def test_tool_results_are_grouped_into_one_user_message() -> None:
    history = [
        Message("user", "Orders 1 and 2?"),
        Message(
            "assistant",
            "Looking both up.",
            tool_calls=[
                ToolCall("toolu_1", "lookup_order", {"order": "1"}),
                ToolCall("toolu_2", "lookup_order", None, raw_arguments="{order:"),
            ],
        ),
        Message("tool", "shipped", tool_call_id="toolu_1", name="lookup_order"),
        Message("tool", "bad arguments", tool_call_id="toolu_2", name="lookup_order"),
        Message("assistant", "Order 1 shipped."),
        Message("user", "Thanks"),
    ]
    assert build_messages(history) == [
        {"role": "user", "content": "Orders 1 and 2?"},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Looking both up."},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "lookup_order",
                    "input": {"order": "1"},
                },
                {"type": "tool_use", "id": "toolu_2", "name": "lookup_order", "input": {}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "shipped"},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "bad arguments"},
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "Order 1 shipped."}]},
        {"role": "user", "content": "Thanks"},
    ]
    with AnthropicServer([Reply(text="You're welcome.")]) as server:
        complete(make(server), request(messages=history))
    assert len(server.last.body["messages"]) == 5


def test_history_must_open_with_a_user_turn() -> None:
    assert build_messages([]) == [{"role": "user", "content": CONVERSATION_START}]
    welcome = [Message("assistant", "Hi! How can I help?"), Message("user", "Order 42")]
    assert build_messages(welcome)[0] == {"role": "user", "content": CONVERSATION_START}
    # An empty assistant turn is dropped: the API rejects empty content.
    assert build_messages([Message("user", "a"), Message("assistant", "")]) == [
        {"role": "user", "content": "a"}
    ]


def test_bad_messages_are_model_errors() -> None:
    with pytest.raises(ModelError, match="no tool_call_id"):
        build_messages([Message("tool", "x")])
    with pytest.raises(ModelError, match="Unsupported message role 'system'"):
        build_messages([Message("system", "x")])


def test_reserved_params_and_empty_parts() -> None:
    with AnthropicServer([Reply(text="ok")]) as server:
        model = make(server)
        with pytest.raises(ModelError, match="system"):
            complete(model, request(params={"system": "x"}))
        complete(model, request(tools=[], system="", instructions=""))
    assert "tools" not in server.last.body
    assert "system" not in server.last.body


def test_build_tools() -> None:
    assert build_tools([ToolSpec("noop", "Nothing")]) == [
        {
            "name": "noop",
            "description": "Nothing",
            "input_schema": {"type": "object", "properties": {}, "required": []},
        }
    ]


# -- responses parsed ------------------------------------------------------------------------


def test_text_and_parallel_tool_uses() -> None:
    calls = [
        FakeCall.of("lookup_order", {"order": "1"}, id="toolu_a"),
        FakeCall.of("lookup_order", {"order": "2"}, id="toolu_b"),
    ]
    with AnthropicServer([Reply(text="Let me check.", calls=calls)]) as server:
        response = complete(make(server), request())
    assert response.text == "Let me check."
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
        ("toolu_a", "lookup_order", {"order": "1"}),
        ("toolu_b", "lookup_order", {"order": "2"}),
    ]


def test_non_object_input_never_raises() -> None:
    with AnthropicServer([Reply(calls=[FakeCall("lookup_order", "{broken")])]) as server:
        response = complete(make(server), request())
    [call] = response.tool_calls
    assert call.arguments is None
    assert call.raw_arguments == "{broken"


# -- streaming -------------------------------------------------------------------------------


def test_streaming_text_and_tool_input_deltas() -> None:
    calls = [
        FakeCall.of("lookup_order", {"order": "1", "verbose": True}, id="toolu_a"),
        FakeCall.of("lookup_order", {"order": "2"}, id="toolu_b"),
    ]
    pieces: list[str] = []
    with AnthropicServer([Reply(text="Checking both.", calls=calls, usage=(50, 20))]) as server:
        response = complete(make(server), request(), stream=pieces.append)
    assert len(pieces) > 1
    assert "".join(pieces) == "Checking both."
    assert response.text == "Checking both."
    assert [(c.id, c.name, c.arguments) for c in response.tool_calls] == [
        ("toolu_a", "lookup_order", {"order": "1", "verbose": True}),
        ("toolu_b", "lookup_order", {"order": "2"}),
    ]
    assert response.usage == Usage(50, 20)
    assert server.last.body["stream"] is True


def test_streaming_tool_use_without_input_and_with_bad_json() -> None:
    calls = [FakeCall("lookup_order", ""), FakeCall("lookup_order", '{"order": ')]
    with AnthropicServer([Reply(calls=calls)]) as server:
        response = complete(make(server), request(), stream=lambda _: None)
    assert response.text is None
    assert [(c.arguments, c.raw_arguments) for c in response.tool_calls] == [
        ({}, "{}"),
        (None, '{"order": '),
    ]


def test_error_event_after_streamed_text_is_not_retried() -> None:
    pieces: list[str] = []
    script = [Reply(text="Hello world", stream_error="Overloaded"), Reply(text="never")]
    with AnthropicServer(script) as server, pytest.raises(ModelError, match="Overloaded"):
        complete(make(server), request(), stream=pieces.append)
    assert pieces == ["Hel"]
    assert len(server.requests) == 1


# -- failures --------------------------------------------------------------------------------


def test_rate_limit_and_overload_are_retried() -> None:
    script = [Reply(status=429), Reply(status=529), Reply(text="Done.")]
    with AnthropicServer(script) as server:
        response = complete(make(server, max_retries=2), request())
    assert response.text == "Done."
    assert len(server.requests) == 3


def test_retries_exhausted() -> None:
    script = [Reply(status=500, error="internal trouble")] * 2
    with AnthropicServer(script) as server, pytest.raises(ModelError) as info:
        complete(make(server, max_retries=1), request())
    assert len(server.requests) == 2
    assert "HTTP 500" in str(info.value)
    assert "2 attempts" in str(info.value)
    assert "internal trouble" in str(info.value)


def test_bad_key() -> None:
    script = [Reply(status=401, error=f"invalid x-api-key {KEY}")]
    with AnthropicServer(script) as server, pytest.raises(ModelError) as info:
        complete(make(server), request())
    assert len(server.requests) == 1
    assert "rejected the API key" in str(info.value)
    assert "ANTHROPIC_API_KEY" in str(info.value)
    assert KEY not in str(info.value)


def test_unknown_model_and_refused_request() -> None:
    script = [
        Reply(status=404, error="model: claude-test"),
        Reply(status=400, error="max_tokens: must be at most 8192"),
    ]
    with AnthropicServer(script) as server:
        model = make(server)
        with pytest.raises(ModelError, match="does not know model 'claude-test'"):
            complete(model, request())
        with pytest.raises(ModelError, match=r"refused the request \(HTTP 400\): max_tokens"):
            complete(model, request())


def test_timeout_becomes_model_error() -> None:
    with AnthropicServer([Reply(text="late", delay=5.0)]) as server:
        model = make(server, timeout=0.3, max_retries=0)
        with pytest.raises(ModelError, match=r"did not answer within 0\.3 s"):
            complete(model, request())


# -- configuration ---------------------------------------------------------------------------


def test_missing_key_without_base_url() -> None:
    with pytest.raises(ModelError) as info:
        AnthropicModel("claude-sonnet-4-5")
    assert "set ANTHROPIC_API_KEY" in str(info.value)
    assert "--base-url" in str(info.value)


def test_environment_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    with AnthropicServer([Reply(text="From env.")]) as server:
        monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.base_url)
        model = AnthropicModel("claude-test")
        assert complete(model, request()).text == "From env."
    assert sent_key(server.last.headers) == KEY


def test_auth_token_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    with AnthropicServer([Reply(text="ok")]) as server:
        monkeypatch.setenv("ANTHROPIC_AUTH_TOKEN", "token-abcdef")
        model = AnthropicModel("claude-test", base_url=server.base_url)
        complete(model, request())
    assert server.last.headers["authorization"] == "Bearer token-abcdef"


def test_proxy_without_key_gets_placeholder() -> None:
    with AnthropicServer([Reply(text="ok")]) as server:
        complete(AnthropicModel("claude-test", base_url=server.base_url), request())
    assert sent_key(server.last.headers) == PLACEHOLDER_API_KEY


def test_repr_hides_the_key() -> None:
    model = AnthropicModel("claude-sonnet-4-5", api_key=KEY)
    assert model.name == "anthropic:claude-sonnet-4-5"
    assert KEY not in repr(model)


def test_missing_sdk(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "anthropic", None)
    with pytest.raises(ModelError, match=r"pip install 'agentscript\[anthropic\]'"):
        AnthropicModel("claude-sonnet-4-5", api_key=KEY)


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
def test_the_stop_reason_is_kept(streamed: bool) -> None:
    with AnthropicServer([Reply(text=None, stop_reason="max_tokens")]) as server:
        response = complete(make(server), request(), stream=(lambda _: None) if streamed else None)
    assert response.stop_reason == "max_tokens"
    assert response.empty()


def test_a_whole_answer_over_the_bound_is_dropped_and_not_retried(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from agentscript.models import sdk_provider

    monkeypatch.setattr(sdk_provider, "MAX_ANSWER_BYTES", 2_000)
    with AnthropicServer([Reply(text="x" * 5_000), Reply(text="never")]) as server:
        with pytest.raises(ModelError, match="the answer is over 2000 bytes; it was dropped"):
            complete(make(server), request())
        assert len(server.requests) == 1
