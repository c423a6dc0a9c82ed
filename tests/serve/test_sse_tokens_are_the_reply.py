"""A streamed turn's ``token`` events are its reply: their text joined is the ``turn`` event's
``response``, framework messages and the blank lines between messages included."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx2 as httpx

from agentscript.models.base import Message, ModelError, ModelResponse
from agentscript.models.function import FunctionInfo, FunctionModel
from agentscript.server import sse
from agentscript.server.agents import load_agents, serve_agents
from agentscript.server.app import create_app
from agentscript.server.auth import ApiKeys
from agentscript.server.standin import StandInModel
from agentscript.store import store_from_url

from .harness import CARD_BANK

AGENT = """system:
    instructions: "Help."
    messages:
        welcome: "Hi"
        error: "Sorry, that failed."

config:
    developer_name: "Said"

connection messaging:
    escalation_message: "Transferring you to a human agent"
    outbound_route_type: "OmniChannelFlow"
    outbound_route_name: "flow://Route_To_Agent"

start_agent main:
    description: "main"
    reasoning:
        instructions: ->
            | main node
        actions:
            wipe: @actions.wipe_all
                description: "wipe"
            human: @utils.escalate
                description: "escalate"

    actions:
        wipe_all:
            description: "wipe"
            target: "flow://Wipe"
            require_user_confirmation: True
            outputs:
                ok: boolean
"""


def answer(messages: list[Message], info: FunctionInfo) -> ModelResponse | str:
    """By the user's words: the model's text streamed as a provider does, with its calls."""
    said = messages[-1].content
    if said == "fail":
        raise ModelError("the provider is down")
    if said in ("wipe", "sure, wipe"):
        text = "I can do that." if said == "sure, wipe" else None
        if text:
            info.stream(text)
        return ModelResponse(text=text, tool_calls=[info.call("wipe")])
    if said == "human":
        info.stream("One ")
        info.stream("moment.")
        return ModelResponse(text="One moment.", tool_calls=[info.call("human")])
    return "Hello there."


def turns(agent_file: Path, agent: str, texts: list[str], **variables: Any) -> list[Any]:
    """Each text sent as a streamed turn of one session: (tokens joined, the turn event)."""

    async def main() -> list[Any]:
        loaded = load_agents([str(agent_file), CARD_BANK])
        models = {"Said": FunctionModel(answer), "card-bank": StandInModel()}
        served = serve_agents(loaded, {a.name: models[a.name] for a in loaded})
        app = create_app(served, store_from_url("memory://"), keys=ApiKeys.of(), purge_every=None)
        out: list[Any] = []
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app), base_url="http://test"
            ) as client,
        ):
            created = await client.post(
                f"/v1/agents/{agent}/sessions", json={"variables": variables}
            )
            sid = created.json()["session_id"]
            for text in texts:
                response = await client.post(
                    f"/v1/sessions/{sid}/messages",
                    json={"text": text},
                    headers={"Accept": "text/event-stream"},
                )
                events = sse.parse(response.text)
                assert events[-1][0] == "turn", events[-3:]
                tokens = "".join(data["text"] for name, data in events if name == "token")
                out.append((tokens, events[-1][1]))
        return out

    return asyncio.run(main())


def test_sse_tokens_are_the_response_of_an_agent_script_turn(tmp_path: Path) -> None:
    path = tmp_path / "said.agent"
    path.write_text(AGENT)
    question = "Before I run wipe all, please confirm: yes or no?"
    played = turns(path, "Said", ["hi", "wipe", "no", "sure, wipe", "no", "human"])
    responses = [turn["response"] for _, turn in played]
    assert responses[0] == "Hello there."
    assert responses[1] == question
    assert responses[3] == f"I can do that.\n\n{question}"
    assert responses[5] == "One moment.\n\nTransferring you to a human agent"
    for tokens, turn in played:
        assert tokens == turn["response"]


def test_sse_tokens_are_the_response_of_a_failed_turn(tmp_path: Path) -> None:
    path = tmp_path / "said.agent"
    path.write_text(AGENT)
    [(tokens, turn)] = turns(path, "Said", ["fail"])
    assert turn["error"] is not None
    assert tokens == turn["response"] == "Sorry, that failed."


def test_sse_tokens_are_the_response_of_mantle_turns(tmp_path: Path) -> None:
    path = tmp_path / "said.agent"
    path.write_text(AGENT)
    played = turns(
        path,
        "card-bank",
        [
            # Signed in by the login tool: a client cannot preset what it writes.
            '/activate_skill {"skill": "authenticate"}',
            '/verify_customer {"customer_number": "1001", "pin": "4321"}',
            "/complete_skill",
            '/activate_skill {"skill": "card_replace"}',  # its utterance, then the model's text
            '/set_fields {"reason": "lost"}',
            '/activate_skill {"skill": "card_replace", "block": "order_card"}',  # a question
            "/cancel_skill",
            '/activate_skill {"skill": "check_balance"}',
            "/get_balance",
            "/complete_skill",  # the model's text, then the completion follow-up
        ],
    )
    responses = [turn["response"] for _, turn in played[3:]]
    assert responses[0].startswith("I can help you replace your card.\n\n")
    assert responses[2] == "Which card should we replace?"
    assert responses[-1].endswith("\n\nIs there anything else I can help you with?")
    for tokens, turn in played:
        assert tokens == turn["response"]
