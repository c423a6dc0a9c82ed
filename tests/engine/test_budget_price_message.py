"""A cost cap without a price for the model: the turn's error names both places a price can
be given, since the Budget may come from agentscript.toml or from Python."""

from __future__ import annotations

from pathlib import Path

import pytest

import agentscript
from agentscript.engine.budgets import Budget, Caps
from agentscript.models.scripted import Move, ScriptedModel

AGENT = """\
system:
    instructions: "Be brief."
    messages:
        error: "Sorry, I cannot go on."
config:
    developer_name: "priced"
start_agent main:
    description: "main"
    reasoning:
        instructions: ->
            | Answer.
"""


@pytest.fixture
def agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> agentscript.AgentBase:
    monkeypatch.delenv("AGENTSCRIPT_CONFIG", raising=False)
    path = tmp_path / "priced.agent"
    path.write_text(AGENT)
    return agentscript.load(path)


def test_a_python_budget_without_a_price_names_the_toml_table_and_the_budget_field(
    agent: agentscript.AgentBase,
) -> None:
    model = ScriptedModel([Move(text="Hello.")])
    reply = agent.session(model=model, budget=Budget(turn=Caps(cost=1.0))).send("hi")
    assert reply.error is not None
    assert "no price is known for model 'scripted'" in reply.error
    assert '[prices."scripted"]' in reply.error and "to agentscript.toml" in reply.error
    assert 'prices={"scripted": Price(input=..., output=...)} to the Budget' in reply.error
    assert "agentscript.toml has no price" not in reply.error  # not blamed on a file unused
