"""Values a host (or a server's client) gives a new session's variables: a value nested deeper
than a saved session can be read back with is refused by name, in both formats, and a request
naming thousands of unknown variables gets a message of reasonable length."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import agentscript
from agentscript.limits import MAX_GIVEN_DEPTH, MAX_NAMES_SHOWN
from agentscript.models.scripted import ScriptedModel

TOOLS = Path(__file__).parents[1] / "engine" / "agents" / "tools.agent"
CARD_BANK = Path(__file__).parents[2] / "examples" / "card_bank"


def nested(levels: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(levels - 1):
        value = {"a": value}
    return value


def test_given_variable_as_deep_as_allowed_is_saved_and_restored() -> None:
    agent = agentscript.load(TOOLS)
    session = agent.session(model=ScriptedModel(), variables={"payload": nested(MAX_GIVEN_DEPTH)})
    restored = agent.restore(session.to_json(), model=ScriptedModel())
    assert restored.variables["payload"] == nested(MAX_GIVEN_DEPTH)


@pytest.mark.parametrize("levels", [MAX_GIVEN_DEPTH + 1, 300, 5_000])
def test_given_variable_nested_too_deep_is_refused_by_name(levels: int) -> None:
    agent = agentscript.load(TOOLS)
    deep = {"payload": nested(levels)}
    message = f"@variables.payload: nested more than {MAX_GIVEN_DEPTH} levels deep"
    with pytest.raises(ValueError, match=message):
        agent.session(model=ScriptedModel(), variables=deep)
    saved = agent.session(model=ScriptedModel()).to_json()
    with pytest.raises(ValueError, match=message):
        agent.restore(saved, model=ScriptedModel(), variables=deep)


def test_mantle_given_memory_nested_too_deep_is_refused_before_it_is_typed() -> None:
    agent = agentscript.load(CARD_BANK)
    name = sorted(agent.initial_variables({}))[0]
    with pytest.raises(ValueError, match=f"@variables.{name}: nested more than"):
        agent.session(model=ScriptedModel(), variables={name: [nested(MAX_GIVEN_DEPTH + 1)]})


@pytest.mark.parametrize("path", [TOOLS, CARD_BANK], ids=["agent_script", "mantle"])
def test_thousands_of_unknown_variables_get_a_short_message(path: Path) -> None:
    agent = agentscript.load(path)
    unknown = {f"nope_{n:05}": 1 for n in range(5_000)}
    with pytest.raises(ValueError) as caught:
        agent.session(model=ScriptedModel(), variables=unknown)
    message = str(caught.value)
    assert "'nope_00000'" in message and f"... and {5_000 - MAX_NAMES_SHOWN} more]" in message
    assert f"'nope_{MAX_NAMES_SHOWN:05}'" not in message and len(message) < 2_000
