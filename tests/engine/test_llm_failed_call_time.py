"""The time spent waiting on a model call that failed is the model's time, in both formats:
the failed LLM_STEP's ``durationMs`` and the turn's ``usage.llm_ms`` hold it (serve's /metrics
books a turn's time as model or engine time by ``llm_ms``). A fake clock makes the model's
wait exact instead of slept."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from engine_helpers import agent, steps

import agentscript
import agentscript.engine.llm as llm_module
import agentscript.trace as trace_module
from agentscript.engine.session import Reply
from agentscript.models.base import ModelError, ModelRequest, ModelResponse, TextSink
from agentscript.models.retry import RetriesExhausted, RetryPolicy, call_with_retries

CARD_BANK = Path(__file__).resolve().parents[2] / "examples" / "card_bank"
BODY = """
start_agent main:
    description: "main"
    reasoning:
        instructions: ->
            | Help.
"""


class Clock:
    """``time.perf_counter`` for the engine's timing: moves only when a model says so."""

    def __init__(self) -> None:
        self.now = 1000.0

    def perf_counter(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(llm_module, "time", fake)
    monkeypatch.setattr(trace_module, "time", fake)
    return fake


class FailsAfterWaiting:
    """Waits ``seconds`` on the fake clock, then raises ``error``."""

    name = "test:fails"

    def __init__(self, clock: Clock, error: Exception, seconds: float = 0.6) -> None:
        self.clock, self.error, self.seconds = clock, error, seconds
        self.spent = 0.0

    async def complete(
        self, request: ModelRequest, *, stream: TextSink | None = None
    ) -> ModelResponse:
        self.clock.now += self.seconds
        self.spent += self.seconds
        raise self.error


class RetriesThenGivesUp(FailsAfterWaiting):
    """A provider's retries: three attempts failing after 0.25 s each, with their waits."""

    async def complete(
        self, request: ModelRequest, *, stream: TextSink | None = None
    ) -> ModelResponse:
        async def attempt() -> ModelResponse:
            self.clock.now += 0.25
            self.spent += 0.25
            raise ConnectionError("connection reset")

        async def sleep(seconds: float) -> None:
            self.clock.now += seconds
            self.spent += seconds

        policy = RetryPolicy(max_retries=2, base_delay=1.0)
        try:
            return await call_with_retries(attempt, policy, lambda _: True, sleep=sleep)
        except RetriesExhausted as exc:
            raise ModelError(f"the provider failed: {exc}") from None


FAILURES = {
    "model_error": ModelError("the provider refused the request"),
    "timeout": TimeoutError("the provider did not answer in time"),
    "internal": RuntimeError("model exploded"),
}


def _failed_llm_step(reply: Reply) -> dict[str, Any]:
    (step,) = steps(reply, "LLM_STEP")
    assert step["error"], step
    return step


def assert_waited_time_is_model_time(reply: Reply, seconds: float) -> None:
    assert reply.error is not None
    step = _failed_llm_step(reply)
    assert step["durationMs"] == pytest.approx(seconds * 1000)
    assert reply.usage["llm_ms"] == pytest.approx(seconds * 1000)
    assert reply.trace["usage"]["llm_ms"] == pytest.approx(seconds * 1000)


@pytest.mark.parametrize("failure", sorted(FAILURES))
def test_a_failed_model_calls_wait_is_model_time_in_agent_script(
    tmp_path: Path, clock: Clock, failure: str
) -> None:
    model = FailsAfterWaiting(clock, FAILURES[failure])
    reply = agent(tmp_path, "failing", BODY).session(model=model).send("hi")
    assert_waited_time_is_model_time(reply, model.spent)


def test_a_failed_model_calls_retries_and_their_waits_are_model_time(
    tmp_path: Path, clock: Clock
) -> None:
    model = RetriesThenGivesUp(clock, RuntimeError("unused"))
    reply = agent(tmp_path, "retrying", BODY).session(model=model).send("hi")
    assert model.spent > 0.75  # three attempts and two waits
    assert_waited_time_is_model_time(reply, model.spent)


@pytest.mark.parametrize("failure", sorted(FAILURES))
def test_a_failed_model_calls_wait_is_model_time_in_mantle(clock: Clock, failure: str) -> None:
    model = FailsAfterWaiting(clock, FAILURES[failure])
    session = agentscript.load(CARD_BANK).session(
        model=model, variables={"project.authenticated": True, "project.customer_id": "1001"}
    )
    assert_waited_time_is_model_time(session.send("balance?"), model.spent)
