"""Model resilience against the local fake LLM servers: Retry-After on 429/503 is honoured
(bounded), backoff is jittered, and a fallback model answers when the primary keeps failing,
all visible in the trace (``LLM_STEP.modelEvents``)."""

from __future__ import annotations

import asyncio
import email.utils
from pathlib import Path

import pytest
from tests.fakes.llm_servers import OpenAIServer, Reply, model_at

import agentscript
from agentscript.chat import choose_model
from agentscript.models.base import ModelError, ModelRequest
from agentscript.models.fallback import FallbackModel
from agentscript.models.openai_provider import OpenAIModel
from agentscript.models.retry import RetryPolicy, parse_retry_after

AGENT = """\
system:
    instructions: "Be brief."
    messages:
        error: "Sorry."
config:
    developer_name: "resilient"
start_agent main:
    description: "main"
    reasoning:
        instructions: ->
            | Answer.
"""


def request() -> ModelRequest:
    return ModelRequest(system="s", instructions="i", messages=[], tools=[])


def load(tmp_path: Path) -> agentscript.AgentBase:
    path = tmp_path / "resilient.agent"
    path.write_text(AGENT)
    return agentscript.load(path, dialect="agentscript")


def llm_steps(reply: agentscript.Reply) -> list[dict[str, object]]:
    return [s for s in reply.trace["planTrace"]["steps"] if s["type"] == "LLM_STEP"]


def test_retry_after_is_honoured_and_traced(tmp_path: Path) -> None:
    with OpenAIServer([Reply(status=429, retry_after="1"), Reply(text="Hi.")]) as server:
        model = model_at(server, OpenAIModel, "gpt-test", api_key="sk-test")
        reply = load(tmp_path).session(model=model).send("hello")
    assert reply.text == "Hi."
    (step,) = llm_steps(reply)
    (event,) = step["modelEvents"]  # type: ignore[misc]
    assert event["event"] == "retry" and event["reason"] == "HTTP 429"
    assert event["retryAfterS"] == 1.0 and event["waitS"] == 1.0


def test_retry_after_beyond_the_bound_is_not_waited_for() -> None:
    script = [Reply(status=503, retry_after="3600"), Reply(text="too late")]
    with OpenAIServer(script) as server, pytest.raises(ModelError, match="HTTP 503"):
        model = model_at(server, OpenAIModel, "gpt-test", api_key="sk-test")
        asyncio.run(model.complete(request()))
    assert len(server.requests) == 1  # failed at once instead of waiting an hour


def test_retry_after_reads_seconds_and_http_dates() -> None:
    assert parse_retry_after("7") == 7.0
    date = email.utils.formatdate(1_000_060, usegmt=True)
    assert parse_retry_after(date, now=1_000_000) == pytest.approx(60.0)
    assert parse_retry_after("soon") is None
    assert parse_retry_after(None) is None


def test_backoff_is_jittered_within_bounds() -> None:
    policy = RetryPolicy(base_delay=1.0, max_delay=100.0)
    delays = {policy.delay(2) for _ in range(50)}
    assert all(2.0 <= d <= 4.0 for d in delays)  # half to all of base * 2**2
    assert len(delays) > 1


def test_fallback_answers_when_the_primary_keeps_failing(tmp_path: Path) -> None:
    with (
        OpenAIServer([Reply(status=503)] * 2) as down,
        OpenAIServer([Reply(text="From the fallback.")]) as up,
    ):
        primary = model_at(down, OpenAIModel, "primary", api_key="sk-test", max_retries=1)
        fallback = model_at(up, OpenAIModel, "backup", api_key="sk-test")
        reply = load(tmp_path).session(model=FallbackModel(primary, fallback)).send("hi")
    assert reply.error is None
    assert reply.text == "From the fallback."
    (step,) = llm_steps(reply)
    events = step["modelEvents"]
    assert [e["event"] for e in events] == ["retry", "fallback"]  # type: ignore[union-attr]
    assert events[1]["from"] == "openai:primary" and events[1]["to"] == "openai:backup"  # type: ignore[index]


def test_primary_is_skipped_during_cooldown_after_repeated_failures() -> None:
    now = [0.0]
    with (
        OpenAIServer([Reply(status=400)]) as down,
        OpenAIServer([Reply(text="one"), Reply(text="two"), Reply(text="three")]) as up,
    ):
        primary = model_at(down, OpenAIModel, "primary", api_key="sk-test")
        fallback = model_at(up, OpenAIModel, "backup", api_key="sk-test")
        model = FallbackModel(primary, fallback, open_after=1, cooldown=30, clock=lambda: now[0])
        assert asyncio.run(model.complete(request())).text == "one"
        second = asyncio.run(model.complete(request()))
        assert second.text == "two"
        assert "cooldown" in second.events[0]["reason"]
        assert len(down.requests) == 1  # not asked again during the cooldown
        now[0] = 31.0
        assert asyncio.run(model.complete(request())).text == "three"
        assert len(down.requests) == 2  # tried again after it


def test_both_failing_is_one_model_failure_with_both_stories(tmp_path: Path) -> None:
    with (
        OpenAIServer([Reply(status=400, error="bad primary")]) as a,
        OpenAIServer([Reply(status=400, error="bad backup")]) as b,
    ):
        model = FallbackModel(
            model_at(a, OpenAIModel, "primary", api_key="sk-test"),
            model_at(b, OpenAIModel, "backup", api_key="sk-test"),
        )
        reply = load(tmp_path).session(model=model).send("hi")
    assert reply.error is not None and "bad backup" in reply.error
    (step,) = llm_steps(reply)
    assert "bad primary" in step["modelEvents"][0]["reason"]  # type: ignore[index]


def test_resilience_table_configures_the_fallback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    (tmp_path / "agentscript.toml").write_text(
        '[resilience]\nfallback = "openai:gpt-backup"\nopen_after = 2\n'
    )
    agent = load(tmp_path)
    model = choose_model(agent, spec="openai:gpt-main")
    assert isinstance(model, FallbackModel)
    assert (model.primary.name, model.fallback.name, model.open_after) == (
        "openai:gpt-main",
        "openai:gpt-backup",
        2,
    )


def test_malformed_resilience_table_is_a_load_error(tmp_path: Path) -> None:
    (tmp_path / "agentscript.toml").write_text('[resilience]\nfallback = "nope"\n')
    with pytest.raises(agentscript.AgentScriptError, match="fallback must be a model spec"):
        load(tmp_path)
