"""Issue 9, item 7: a hidden tool and an unknown tool read the same to the model, in both
formats, while the trace keeps the true cause for the developer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import agentscript
from agentscript.engine.session import Reply
from agentscript.models.base import Message, ModelResponse, ToolCall
from agentscript.models.function import FunctionInfo, FunctionModel
from agentscript.not_offered import NotOffered, not_offered_message

ROOT = Path(__file__).resolve().parents[2]
ORDERS = ROOT / "examples" / "order_status" / "order_status.agent"
GATE = ROOT / "examples" / "security_gate" / "security_gate.agent"
CARD_BANK = ROOT / "examples" / "card_bank"


def steps(reply: Reply, kind: str) -> list[dict[str, Any]]:
    return [s for s in reply.trace["planTrace"]["steps"] if s["type"] == kind]


def calls_then_says(*first: tuple[str, dict[str, Any]]) -> FunctionModel:
    """Calls each of ``first`` in one answer on the model's first call, then says 'ok';
    records what every tool result told it."""

    def answer(messages: list[Message], info: FunctionInfo) -> ModelResponse | str:
        if info.calls_before == 0:
            return ModelResponse(tool_calls=[info.call(n, a) for n, a in first])
        return "ok"

    return FunctionModel(answer)


def told(model: FunctionModel, name: str) -> list[Any]:
    """What the tool results for calls of ``name`` said to the model, in order."""
    results: list[Any] = []
    for message in model.requests[-1].messages:
        if message.role == "tool" and message.name == name:
            results.append(json.loads(message.content))
    return results


def test_agent_script_hidden_and_unknown_tools_read_the_same_to_the_model() -> None:
    agent = agentscript.load(GATE)
    # In `account`, update_account is hidden until is_verified; no_such_tool does not exist.
    script = iter(
        [
            [ToolCall("a1", "go_account", {})],
            [
                ToolCall("b1", "update_account", {"field": "address", "value": "x"}),
                ToolCall("b2", "no_such_tool", {}),
            ],
        ]
    )

    def answer(messages: list[Message], info: FunctionInfo) -> list[ToolCall] | str:
        return next(script, "ok")

    model = FunctionModel(answer)
    reply = agent.session(model=model).send("change my address")

    hidden, unknown = told(model, "update_account"), told(model, "no_such_tool")
    assert hidden == [{"error": not_offered_message("update_account")}]
    assert unknown == [{"error": not_offered_message("no_such_tool")}]
    # Same words, with only the name the model itself sent differing.
    assert hidden[0]["error"].replace("update_account", "X") == unknown[0]["error"].replace(
        "no_such_tool", "X"
    )
    refused = {s["name"]: s for s in steps(reply, "REFUSED_STEP")}
    assert refused["update_account"]["cause"] == NotOffered.HIDDEN
    assert refused["no_such_tool"]["cause"] == NotOffered.UNKNOWN
    assert "unknown tool 'no_such_tool'" in refused["no_such_tool"]["reason"]
    assert reply.actions == ["go_account"]  # neither ran


def test_agent_script_unknown_tool_result_does_not_list_the_offered_tools() -> None:
    agent = agentscript.load(ORDERS)
    model = calls_then_says(("create_case", {}), ("nope", {}))
    agent.session(model=model, variables={"order_ID": "1"}).send("hi")
    for name in ("create_case", "nope"):
        (result,) = told(model, name)
        assert result == {"error": f"tool '{name}' is not available now"}


def test_mantle_hidden_and_unknown_tools_read_the_same_to_the_model() -> None:
    agent = agentscript.load(CARD_BANK)
    # In card_replace, block_card is hidden until a card id is set; no_such_tool is unknown.
    script = iter(
        [
            [ToolCall("a1", "activate_skill", {"skill": "card_replace"})],
            [ToolCall("b1", "block_card", {"card_id": "C-1"}), ToolCall("b2", "no_such_tool", {})],
        ]
    )

    def answer(messages: list[Message], info: FunctionInfo) -> list[ToolCall] | str:
        return next(script, "ok")

    model = FunctionModel(answer)
    session = agent.session(
        model=model,
        variables={
            "project.authenticated": True,
            "project.customer_id": "1",
            "project.customer_name": "Ada",
        },
    )
    reply = session.send("I lost my card")

    assert told(model, "block_card") == [{"error": not_offered_message("block_card")}]
    assert told(model, "no_such_tool") == [{"error": not_offered_message("no_such_tool")}]
    refused = {s["name"]: s for s in steps(reply, "REFUSED_STEP")}
    assert refused["block_card"]["cause"] == NotOffered.HIDDEN
    assert refused["no_such_tool"]["cause"] == NotOffered.UNKNOWN
    assert (
        refused["no_such_tool"]["reason"] == "unknown tool 'no_such_tool' for skill 'card_replace'"
    )


def test_mantle_tool_called_with_no_active_skill_reads_like_a_hidden_one() -> None:
    agent = agentscript.load(CARD_BANK)
    model = calls_then_says(("block_card", {"card_id": "C-1"}))
    reply = agent.session(model=model).send("hi")
    assert told(model, "block_card") == [{"error": not_offered_message("block_card")}]
    (refused,) = steps(reply, "REFUSED_STEP")
    assert refused["cause"] == NotOffered.UNKNOWN and "no skill is active" in refused["reason"]
