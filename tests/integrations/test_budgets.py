"""Budgets: each cap (LLM calls, input/output tokens, cost; per turn and per session) stops
the turn before the call that would cross it, nothing runs past it, the trace records the
cap, and the totals reach the trace, the Reply and the saved session."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.integrations.usage_model import UsageModel

import agentscript
from agentscript.engine.budgets import Budget, Caps, OnExceed, Price, parse_budget
from agentscript.models.scripted import Move

AGENT = """\
system:
    instructions: "Be brief."
    messages:
        error: "Sorry, I cannot go on."
config:
    developer_name: "budget_agent"
variables:
    count: mutable number = 0
start_agent main:
    description: "main"
    reasoning:
        instructions: ->
            | Count.
        actions:
            bump: @actions.bump
                set @variables.count = @outputs.count
    actions:
        bump:
            description: "Count one more"
            target: "python://counter:bump"
            outputs:
                count: number
"""

COUNTER = """\
calls = []


def bump():
    calls.append(1)
    return {"count": len(calls)}
"""


@pytest.fixture
def agent_path(tmp_path: Path) -> Path:
    path = tmp_path / "budget.agent"
    path.write_text(AGENT)
    (tmp_path / "counter.py").write_text(COUNTER)
    return path


def bumps(n: int) -> list[Move]:
    return [Move(calls=[("bump", {})]) for _ in range(n)] + [Move(text="Done.")]


def steps(reply: agentscript.Reply, kind: str) -> list[dict[str, object]]:
    return [s for s in reply.trace["planTrace"]["steps"] if s["type"] == kind]


def assert_stopped(
    reply: agentscript.Reply, model: UsageModel, calls: int, cap: str, in_turn: int | None = None
) -> None:
    assert model.calls == calls  # the call that would cross the cap was not made
    assert len(steps(reply, "LLM_STEP")) == (calls if in_turn is None else in_turn)
    (hit,) = steps(reply, "BUDGET_STEP")
    assert hit["cap"] == cap
    assert reply.text == "Sorry, I cannot go on."
    assert reply.error is not None and "budget" in reply.error


def test_turn_llm_call_cap_stops_before_the_third_call(agent_path: Path) -> None:
    agent = agentscript.load(agent_path)
    model = UsageModel(bumps(5))
    session = agent.session(model=model, budget=Budget(turn=Caps(llm_calls=2)))
    reply = session.send("count")
    assert_stopped(reply, model, 2, "llm_calls")
    assert session.variables["count"] == 2  # the two calls' actions ran, nothing after
    assert steps(reply, "BUDGET_STEP")[0]["scope"] == "turn"


def test_turn_cap_resets_each_turn_session_cap_does_not(agent_path: Path) -> None:
    agent = agentscript.load(agent_path)
    model = UsageModel([Move(text="a"), Move(text="b"), Move(text="c")])
    session = agent.session(
        model=model, budget=Budget(turn=Caps(llm_calls=1), session=Caps(llm_calls=2))
    )
    assert session.send("one").error is None
    assert session.send("two").error is None
    third = session.send("three")
    assert_stopped(third, model, 2, "llm_calls", in_turn=0)
    assert steps(third, "BUDGET_STEP")[0]["scope"] == "session"
    assert third.session_usage is not None and third.session_usage["llm_calls"] == 2


def test_input_token_cap_counts_reported_usage(agent_path: Path) -> None:
    agent = agentscript.load(agent_path)
    model = UsageModel(bumps(5), input_tokens=1000)
    budget = Budget(turn=Caps(input_tokens=2000))
    reply = agent.session(model=model, budget=budget).send("count")
    # 2 calls reach 2000 reported tokens; the third call's own input would cross the cap.
    assert_stopped(reply, model, 2, "input_tokens")
    assert reply.usage is not None and reply.usage["input_tokens"] == 2000


def test_output_token_cap_stops_once_the_cap_is_reached(agent_path: Path) -> None:
    agent = agentscript.load(agent_path)
    model = UsageModel(bumps(5), output_tokens=50)
    reply = agent.session(model=model, budget=Budget(turn=Caps(output_tokens=100))).send("x")
    assert_stopped(reply, model, 2, "output_tokens")


def test_cost_cap_uses_the_price_table(agent_path: Path) -> None:
    agent = agentscript.load(agent_path)
    model = UsageModel(bumps(5), input_tokens=1000, output_tokens=0)
    budget = Budget(session=Caps(cost=0.002), prices={"test:tiny": Price(1.0, 2.0)})
    reply = agent.session(model=model, budget=budget).send("x")
    # 1000 input tokens at 1.0 per million: 0.001 a call, so the third call would cross 0.002.
    assert_stopped(reply, model, 2, "cost")
    assert reply.usage is not None and reply.usage["cost"] == pytest.approx(0.002)


def test_a_call_a_fallback_answered_is_charged_at_the_fallbacks_price(agent_path: Path) -> None:
    from agentscript.models.base import ModelError, ModelRequest, ModelResponse, TextSink
    from agentscript.models.fallback import FallbackModel

    class Down:
        name = "test:primary"

        async def complete(
            self, request: ModelRequest, *, stream: TextSink | None = None
        ) -> ModelResponse:
            raise ModelError("the primary is down")

    backup = UsageModel([Move(text="From the backup.")], input_tokens=1000, output_tokens=0)
    backup.name = "test:backup"
    budget = Budget(
        session=Caps(cost=1.0),
        prices={"test:primary": Price(100.0, 100.0), "test:backup": Price(1.0, 1.0)},
    )
    model = FallbackModel(Down(), backup)  # type: ignore[arg-type]
    reply = agentscript.load(agent_path).session(model=model, budget=budget).send("x")
    assert reply.error is None and reply.text == "From the backup."
    # 1000 input tokens at the backup's 1.0 per million, not the primary's 100.0.
    assert reply.usage is not None and reply.usage["cost"] == pytest.approx(0.001)


def test_cost_cap_without_a_price_for_the_model_is_a_clear_error(agent_path: Path) -> None:
    agent = agentscript.load(agent_path)
    model = UsageModel(bumps(1))
    reply = agent.session(model=model, budget=Budget(turn=Caps(cost=1.0))).send("x")
    assert model.calls == 0
    assert reply.error is not None and '[prices."test:tiny"]' in reply.error


def test_escalate_mode_escalates_instead_of_only_failing(agent_path: Path) -> None:
    agent = agentscript.load(agent_path)
    model = UsageModel(bumps(3))
    budget = Budget(turn=Caps(llm_calls=1), on_exceed=OnExceed.ESCALATE)
    reply = agent.session(model=model, budget=budget).send("x")
    assert reply.escalated
    assert steps(reply, "BUDGET_STEP")[0]["action"] == "escalate"


def test_session_totals_survive_save_and_restore(agent_path: Path) -> None:
    agent = agentscript.load(agent_path)
    budget = Budget(session=Caps(llm_calls=2))
    session = agent.session(model=UsageModel([Move(text="a")]), budget=budget)
    session.send("one")
    saved = session.to_json()
    model = UsageModel([Move(text="b"), Move(text="c")])
    restored = agent.restore(saved, model=model, budget=budget)
    assert restored.send("two").error is None
    assert_stopped(restored.send("three"), model, 1, "llm_calls", in_turn=0)


def test_budgets_come_from_agentscript_toml(agent_path: Path) -> None:
    (agent_path.parent / "agentscript.toml").write_text(
        '[budgets]\nturn = { llm_calls = 1 }\n[prices."test:tiny"]\ninput = 0.5\noutput = 1.5\n'
    )
    agent = agentscript.load(agent_path)
    model = UsageModel(bumps(2), input_tokens=2000, output_tokens=1000)
    reply = agent.session(model=model).send("x")
    assert_stopped(reply, model, 1, "llm_calls")
    assert reply.usage is not None and reply.usage["cost"] == pytest.approx(0.0025)


@pytest.mark.parametrize(
    ("budgets", "prices", "message"),
    [
        ({"turn": {"calls": 1}}, {}, "unknown cap"),
        ({"turn": {"llm_calls": -1}}, {}, "whole number >= 0"),
        ({"on_exceed": "panic"}, {}, "on_exceed"),
        ({}, {"m": {"input": 1}}, "exactly `input` and `output`"),
    ],
)
def test_malformed_budget_tables_are_clear_errors(
    budgets: dict[str, object], prices: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        parse_budget(budgets, prices)


def test_price_table_missing_a_configured_model_is_a_load_error(agent_path: Path) -> None:
    (agent_path.parent / "agentscript.toml").write_text(
        '[models]\ndefault = "openai:gpt-4o-mini"\n'
        "[budgets]\nsession = { cost = 1.0 }\n"
        '[prices."openai:gpt-4o"]\ninput = 2.5\noutput = 10\n'
    )
    with pytest.raises(agentscript.AgentScriptError, match="no price for openai:gpt-4o-mini"):
        agentscript.load(agent_path)


def test_malformed_budget_in_toml_is_a_load_error(agent_path: Path) -> None:
    (agent_path.parent / "agentscript.toml").write_text("[budgets]\nturn = { tokens = 5 }\n")
    with pytest.raises(agentscript.AgentScriptError, match="unknown cap"):
        agentscript.load(agent_path)


def test_mantle_turn_obeys_the_same_caps() -> None:
    agent = agentscript.load("examples/card_bank")
    model = UsageModel([Move(calls=[("activate_skill", {"skill": "check_balance"})])] * 3)
    session = agent.session(
        model=model,
        budget=Budget(turn=Caps(llm_calls=1)),
        variables={"project.authenticated": True, "project.customer_id": "1001"},
    )
    reply = session.send("my balance?")
    assert model.calls == 1
    assert steps(reply, "BUDGET_STEP")[0]["cap"] == "llm_calls"
    assert reply.error is not None and "budget" in reply.error


def test_budget_step_is_built_by_the_typed_builder_with_its_documented_keys(
    agent_path: Path,
) -> None:
    from agentscript.trace_steps import StepType

    agent = agentscript.load(agent_path)
    model = UsageModel(bumps(3))
    reply = agent.session(model=model, budget=Budget(turn=Caps(llm_calls=1))).send("count")
    (hit,) = steps(reply, StepType.BUDGET_STEP.value)
    keys = {"type", "node", "iteration", "action", "scope", "cap", "limit", "wouldReach"}
    assert set(hit) == keys  # docs/trace.md
    assert (hit["action"], hit["scope"], hit["cap"], hit["limit"]) == (
        "error",
        "turn",
        "llm_calls",
        1.0,
    )
    for llm in steps(reply, StepType.LLM_STEP.value):
        assert llm["requestModel"] == model.name and llm["modelEvents"] == []


def test_limits_max_llm_calls_and_a_budget_cap_each_stop_with_their_own_error(
    agent_path: Path,
) -> None:
    """docs/limits.md: the lower of Limits.max_llm_calls and the turn's llm_calls cap wins."""
    agent = agentscript.load(agent_path)
    limited = agent.session(
        model=UsageModel(bumps(5)),
        limits=agentscript.Limits(max_llm_calls=2),
        budget=Budget(turn=Caps(llm_calls=3)),
    ).send("count")
    assert limited.error is not None and "Limits.max_llm_calls" in limited.error
    assert steps(limited, "BUDGET_STEP") == []
    capped = agent.session(
        model=UsageModel(bumps(5)),
        limits=agentscript.Limits(max_llm_calls=3),
        budget=Budget(turn=Caps(llm_calls=2)),
    ).send("count")
    assert capped.error is not None and "budget" in capped.error
    assert "Limits." not in capped.error and len(steps(capped, "BUDGET_STEP")) == 1


class FailingModel:
    """Every call fails, as a provider that is down."""

    name = "test:tiny"

    async def complete(self, request: object, *, stream: object = None) -> object:
        from agentscript.models.base import ModelError

        raise ModelError("the provider is down")


def test_a_turn_has_a_cost_only_where_prices_are_known(agent_path: Path) -> None:
    """Without a price table no turn says a cost: one whose calls all failed said 0.0 (no call
    was recorded, so none was found unpriced) where one that went well said nothing."""
    agent = agentscript.load(agent_path)
    failed = agent.session(model=FailingModel()).send("x")  # type: ignore[arg-type]
    assert failed.error is not None
    assert failed.usage is not None and "cost" not in failed.usage
    assert "cost" not in failed.trace["usage"]
    went_well = agent.session(model=UsageModel([Move(text="Done.")])).send("x")
    assert went_well.usage is not None and "cost" not in went_well.usage
    priced = Budget(prices={"test:tiny": Price(1.0, 2.0)})
    failed = agent.session(model=FailingModel(), budget=priced).send("x")  # type: ignore[arg-type]
    assert failed.usage is not None and failed.usage["cost"] == 0.0
    went_well = agent.session(model=UsageModel([Move(text="Done.")]), budget=priced).send("x")
    assert went_well.usage is not None and went_well.usage["cost"] == pytest.approx(0.00012)


def test_the_session_totals_have_a_cost_only_where_prices_are_known(agent_path: Path) -> None:
    """The turn's rule for the session's totals: without a price table an unpriced session
    whose calls all failed said 0.0, and None once one call went well."""
    agent = agentscript.load(agent_path)
    failed = agent.session(model=FailingModel()).send("x")  # type: ignore[arg-type]
    assert failed.session_usage is not None and failed.session_usage["cost"] is None
    went_well = agent.session(model=UsageModel([Move(text="Done.")])).send("x")
    assert went_well.session_usage is not None and went_well.session_usage["cost"] is None
    priced = Budget(prices={"test:tiny": Price(1.0, 2.0)})
    session = agent.session(model=FailingModel(), budget=priced)  # type: ignore[arg-type]
    failed = session.send("x")
    assert failed.session_usage is not None and failed.session_usage["cost"] == 0.0
    # The saved session keeps the meter's own figure: session caps go on from it.
    assert session.to_json()["extra"]["usage"]["cost"] == 0.0
    model = UsageModel([Move(text="Done."), Move(text="Again.")])
    session = agent.session(model=model, budget=priced)
    session.send("x")
    again = session.send("y")
    assert again.session_usage is not None
    assert again.session_usage["cost"] == pytest.approx(0.00024)
    assert again.session_usage["llm_calls"] == 2
