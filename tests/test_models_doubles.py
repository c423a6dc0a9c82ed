"""The test doubles shipped in ``agentscript.models``: FunctionModel and CallEveryToolModel."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import agentscript
from agentscript.actions import StubBook
from agentscript.models.all_tools import (
    CallEveryToolModel,
    called_this_turn,
    sample_arguments,
    sample_value,
)
from agentscript.models.base import Message, ModelError, ModelResponse, ToolCall
from agentscript.models.function import FunctionInfo, FunctionModel, as_response

ROOT = Path(__file__).resolve().parents[1]
ORDERS = ROOT / "examples" / "order_status" / "order_status.agent"
CARD_BANK = ROOT / "examples" / "card_bank"
STUBS = {
    "get_delivery_date": {"outputs": {"delivery_date": "February 10, 2026"}},
    "check_if_late": {"outputs": {"is_late": True}},
    "create_case": {"outputs": {"case_number": "C-1"}},
}


def steps(reply: Any, kind: str) -> list[dict[str, Any]]:
    return [s for s in reply.trace["planTrace"]["steps"] if s["type"] == kind]


def orders_session(model: Any) -> Any:
    agent = agentscript.load(ORDERS)
    return agent.session(model=model, stubs=StubBook.from_data(STUBS), variables={"order_ID": "9"})


def test_function_model_sees_the_messages_and_the_offered_tools() -> None:
    seen: list[tuple[list[str], list[str], str, int]] = []

    def answer(messages: list[Message], info: FunctionInfo) -> Any:
        seen.append(([m.role for m in messages], info.tool_names, info.node, info.calls_before))
        return info.call("go_to_orders") if info.calls_before == 0 else "Here it is."

    reply = orders_session(FunctionModel(answer)).send("where?")
    assert reply.text == "Here it is."
    assert seen[0] == (["user"], ["go_to_orders", "go_to_escalation"], "router", 0)
    assert seen[1][2:] == ("Order_Management", 1)
    assert seen[1][0][:3] == ["user", "assistant", "tool"]


def test_function_model_accepts_async_functions_and_whole_responses() -> None:
    async def answer(messages: list[Message], info: FunctionInfo) -> ModelResponse:
        if info.calls_before == 0:
            return ModelResponse(text="let me look", tool_calls=[info.call("go_to_orders")])
        return ModelResponse(text="Found it.")

    model = FunctionModel(answer, name="mine")
    reply = orders_session(model).send("where?")
    assert reply.text == "Found it."
    assert [s["output"]["text"] for s in steps(reply, "LLM_STEP")] == ["let me look", "Found it."]


def test_function_model_errors_are_model_failures() -> None:
    def answer(messages: list[Message], info: FunctionInfo) -> str:
        raise ModelError("the provider is down")

    reply = orders_session(FunctionModel(answer)).send("where?")
    assert reply.error is not None and "the provider is down" in reply.error


def test_function_model_streams_text_answers() -> None:
    chunks: list[str] = []
    session = orders_session(FunctionModel(lambda messages, info: "Hello there."))
    session.on_text = chunks.append
    assert session.send("hi").text == "Hello there."
    assert chunks == ["Hello there."]


def test_function_model_rejects_other_answers_with_a_type_error() -> None:
    with pytest.raises(TypeError, match="returns a str, a ToolCall"):
        as_response(42)
    calls = as_response([ToolCall("a", "t", {})]).tool_calls
    assert [c.name for c in calls] == ["t"]


def test_function_model_tool_call_ids_are_unique_across_calls() -> None:
    ids: list[str] = []

    def answer(messages: list[Message], info: FunctionInfo) -> Any:
        if info.calls_before < 2:
            call = info.call("go_to_orders" if info.calls_before == 0 else "create_case")
            ids.append(call.id)
            return call
        return "ok"

    orders_session(FunctionModel(answer)).send("x")
    assert len(ids) == 2 and len(set(ids)) == 2


def test_call_every_tool_calls_each_offered_tool_once_then_answers() -> None:
    model = CallEveryToolModel("All done.", skip=["go_to_orders"])
    reply = orders_session(model).send("help")
    assert reply.error is None
    assert model.called[0] == "go_to_escalation"
    assert len(model.called) == len(set(model.called))
    offered = {t.name for r in model.requests for t in r.tools}
    assert offered == set(model.called) | {"go_to_orders"}


def test_call_every_tool_follows_transitions_and_runs_the_next_subagents_tools() -> None:
    model = CallEveryToolModel()
    reply = orders_session(model).send("where?")
    assert model.called[0] == "go_to_orders"
    assert reply.path == ["router", "Order_Management"]
    assert reply.error is None


def test_call_every_tool_uses_given_arguments_else_samples_of_the_declared_types() -> None:
    assert sample_arguments(
        {
            "properties": {
                "s": {"type": "string"},
                "i": {"type": "integer"},
                "n": {"type": ["number", "null"]},
                "b": {"type": "boolean"},
                "e": {"type": "string", "enum": ["x", "y"]},
                "l": {"type": "array", "items": {"type": "integer"}},
            }
        }
    ) == {"s": "sample", "i": 1, "n": 1.5, "b": True, "e": "x", "l": [1]}
    assert sample_value({"const": 3}) == 3

    agent = agentscript.load(CARD_BANK)
    model = CallEveryToolModel(arguments={"activate_skill": {"skill_name": "lost_card"}})
    reply = agent.session(model=model).send("I lost my card")
    first = next(c for m in model.requests[1].messages for c in m.tool_calls)
    assert (first.name, first.arguments) == ("activate_skill", {"skill_name": "lost_card"})
    assert model.called.count("activate_skill") == 1
    assert reply.error is None


def test_call_every_tool_starts_afresh_each_turn() -> None:
    model = CallEveryToolModel(skip=["go_to_escalation"])
    session = orders_session(model)
    session.send("one")
    session.send("two")
    assert model.called[0] == "go_to_orders"
    assert len(model.called) >= 2  # the second turn called a tool again


def test_called_this_turn_counts_calls_since_the_last_user_message() -> None:
    call = Message("assistant", tool_calls=[ToolCall("1", "t", {})])
    assert called_this_turn([Message("user", "a"), call]) == {"t"}
    assert called_this_turn([call, Message("user", "b")]) == set()
