"""Per-subagent models: `model_config` of a subagent routes its LLM calls (issue: real models)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import agentscript
from agentscript.chat import choose_model, subagent_routes
from agentscript.models.base import ModelRequest
from agentscript.models.config import load_config
from agentscript.models.routing import RoutedModel
from agentscript.models.scripted import Move, ScriptedModel

AGENT = """\
system:
    instructions: "Be brief."
    messages:
        error: "Something failed."
config:
    developer_name: "routing"
model_config:
    model: "model://main"
start_agent router:
    description: "router"
    reasoning:
        instructions: ->
            | Route.
        actions:
            go: @utils.transition to @subagent.expert
subagent expert:
    description: "An expensive expert"
    model_config:
        model: "model://expert"
        params:
            temperature: 0.1
    reasoning:
        instructions: ->
            | Answer carefully.
subagent plain:
    description: "Uses the agent's model"
    reasoning:
        instructions: ->
            | Answer.
"""


@pytest.fixture
def agent_dir(tmp_path: Path) -> Path:
    (tmp_path / "routing.agent").write_text(AGENT)
    (tmp_path / "agentscript.toml").write_text(
        '[models]\n"model://main" = "openai:gpt-main"\n"model://expert" = "anthropic:claude-expert"\n'
    )
    return tmp_path


def test_each_request_goes_to_its_subagents_model(agent_dir: Path) -> None:
    agent = agentscript.load(agent_dir / "routing.agent", dialect="agentscript")
    main = ScriptedModel([Move(calls=[("go", {})])])
    expert = ScriptedModel([Move(text="Careful answer.")])
    routed = RoutedModel(main, {"model://expert": lambda: expert})
    reply = agent.session(model=routed).send("hard question")
    assert reply.text == "Careful answer."
    assert [r.node for r in main.requests] == ["router"]
    assert [r.node for r in expert.requests] == ["expert"]
    # The subagent's params travel with its requests.
    assert expert.requests[0].params == {"temperature": 0.1}


def test_routes_come_from_agentscript_toml_next_to_the_agent(agent_dir: Path) -> None:
    agent = agentscript.load(agent_dir / "routing.agent", dialect="agentscript")
    routes = subagent_routes(agent, load_config(start=agent_dir))
    assert set(routes) == {"model://expert"}  # the agent's own id is the default, not a route
    model = choose_model(agent, base_url="http://127.0.0.1:9")
    assert isinstance(model, RoutedModel)
    assert model.default.name == "openai:gpt-main"
    assert model.model_for("model://expert").name == "anthropic:claude-expert"
    assert model.model_for("model://unknown") is model.default
    assert model.model_for(None) is model.default


def test_an_unmapped_subagent_model_uses_the_default(agent_dir: Path) -> None:
    (agent_dir / "agentscript.toml").write_text('[models]\n"model://main" = "openai:gpt-main"\n')
    agent = agentscript.load(agent_dir / "routing.agent", dialect="agentscript")
    model = choose_model(agent, base_url="http://127.0.0.1:9")
    assert not isinstance(model, RoutedModel)
    assert model.name == "openai:gpt-main"


def test_routed_model_passes_requests_through() -> None:
    inner = ScriptedModel([Move(text="ok")])
    routed = RoutedModel(inner, {})
    request = ModelRequest(system="s", instructions="i", messages=[], tools=[], node="n")
    response = asyncio.run(routed.complete(request))
    assert response.text == "ok" and inner.requests == [request]
