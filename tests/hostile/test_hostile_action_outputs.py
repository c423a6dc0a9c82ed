"""Issue 9 item 2: action outputs, computed values, model replies and the history are checked
and bounded before they reach state, traces, saved sessions or the model."""

from __future__ import annotations

import datetime
import json
from pathlib import Path
from typing import Any

import pytest
from hostile_helpers import Driven, load_agent, steps

import agentscript
from agentscript.limits import Limits
from agentscript.models.base import Message
from agentscript.models.function import FunctionInfo, FunctionModel

FETCH = ({"tool": "fetch"}, {"say": "done"})


def fetch_with(result: Any, limits: Limits | None = None) -> tuple[Driven, Any]:
    driven = Driven(load_agent("outputs"), actions={"fetch": lambda: result}, limits=limits)
    return driven, driven.send("go", *FETCH)


def self_referencing() -> dict[str, Any]:
    loop: dict[str, Any] = {"label": "x"}
    loop["self"] = loop
    return loop


@pytest.mark.parametrize(
    ("outputs", "problem"),
    [
        ({"label": 5}, "output 'label' of action 'fetch' is string: expected a string"),
        ({"label": {"a": 1}}, "expected a string"),
        ({"label": True}, "expected a string"),
        ({"label": float("inf")}, "inf is not a finite JSON number"),
        ({"label": float("nan")}, "nan is not a finite JSON number"),
        ({"label": {1, 2}}, "a set is not a JSON value"),
        ({"label": datetime.datetime(2026, 1, 1)}, "a datetime is not a JSON value"),
        ({"label": b"bytes"}, "a bytes is not a JSON value"),
        ({"extra": {1: "int key"}}, "not a string"),
        (self_referencing(), "contains itself (a cycle)"),
        # Issue 10 sweep: an integer CPython refuses to print once crashed the turn when its
        # tool result was written (json.dumps raised ValueError).
        ({"extra": 10**5000}, "outputs.extra: an integer too long to print as JSON"),
    ],
)
def test_bad_action_output_is_an_error_result_not_stored(outputs: Any, problem: str) -> None:
    driven, reply = fetch_with(outputs)
    action = steps(reply, "ACTION_STEP")[0]
    assert problem in action["error"]
    assert action["output"] is None
    assert reply.variables["label"] == ""  # nothing stored
    assert reply.error is None  # S12: the model got an error result and answered
    tool_result = next(m for m in driven.session.state.history if m.role == "tool")
    assert problem in json.loads(tool_result.content)["error"]
    # Everything persisted stays strict JSON.
    json.dumps(reply.trace, allow_nan=False)
    json.dumps(driven.session.to_json(), allow_nan=False)


def test_none_output_value_means_unset_and_a_good_output_is_stored() -> None:
    _, reply = fetch_with({"label": "ok", "note": None})
    assert steps(reply, "ACTION_STEP")[0]["error"] is None
    assert reply.variables["label"] == "ok"
    _, reply = fetch_with({"label": None})
    assert reply.variables["label"] is None


@pytest.mark.parametrize("result", [None, {}])
def test_action_returning_none_leaves_its_declared_outputs_unset(result: Any) -> None:
    _, reply = fetch_with(result)
    action = steps(reply, "ACTION_STEP")[0]
    assert action["error"] is None and action["output"] == {"label": None}
    assert reply.error is None  # the callback read None instead of failing on the name
    assert reply.variables["label"] is None


def test_number_overflow_is_an_evaluation_error_not_a_stored_inf() -> None:
    driven = Driven(load_agent("outputs"))
    reply = driven.send("go", {"tool": "overflow"}, {"say": "x"})
    assert reply.error is not None and "number is too large" in reply.error
    assert reply.variables["amount"] == 0
    json.dumps(driven.session.to_json(), allow_nan=False)


def test_giant_action_output_is_capped_and_the_trace_stays_small() -> None:
    limits = Limits(max_output_chars=10_000)
    _, reply = fetch_with({"label": "x" * 5_000_000}, limits)
    action = steps(reply, "ACTION_STEP")[0]
    assert "Limits.max_output_chars (10000 characters)" in action["error"]
    assert len(json.dumps(reply.trace)) < 20_000


def test_giant_model_reply_ends_the_turn_and_is_not_kept() -> None:
    driven = Driven(load_agent("outputs"), limits=Limits(max_reply_chars=1_000))
    reply = driven.send("go", {"say": "y" * 100_000})
    assert reply.error is not None and "Limits.max_reply_chars" in reply.error
    assert all(len(m.content) < 1_000 for m in driven.session.state.history)
    assert len(json.dumps(reply.trace)) < 10_000
    # The session stays usable.
    assert driven.send("again", {"say": "short"}).text == "short"


def test_repeated_string_doubling_is_stopped_by_the_variable_cap() -> None:
    driven = Driven(load_agent("outputs"), limits=Limits(max_variable_chars=1_000))
    reply = driven.send("go", {"tool": "grow"}, {"say": "x"})
    assert reply.error is None  # 2 -> 32 characters: within the cap
    for _ in range(3):
        reply = driven.send("go", {"tool": "grow"}, {"say": "x"})
        if reply.error:
            break
    assert reply.error is not None and "Limits.max_variable_chars (1000 characters)" in reply.error
    assert len(reply.variables["s"]) <= 1_000


def test_history_is_trimmed_to_its_cap_oldest_exchanges_first() -> None:
    driven = Driven(load_agent("outputs"), limits=Limits(max_history_chars=2_000))
    for turn in range(20):
        reply = driven.send(f"turn {turn} " + "z" * 200, {"say": "ok " + "w" * 200})
    history = driven.session.state.history
    assert history[0].role == "user" and history[-1].content.startswith("ok")
    # Trimmed before each turn: the cap holds for what the turn starts with, plus one exchange.
    assert sum(len(m.content) for m in history) <= 2_000 + 500
    assert steps(reply, "EVENT_STEP")[0]["event"] == "history_trimmed"


def test_mantle_tool_result_that_is_not_json_is_an_error_result() -> None:
    import agentscript
    from agentscript.actions.registry import StubBook
    from agentscript.models.scripted import ScriptedModel, parse_move

    examples = Path(__file__).parents[2] / "examples"
    agent = agentscript.load(examples / "card_bank", stub_missing_tools=True)
    model = ScriptedModel()
    stubs = StubBook.from_data({"get_balance": {"outputs": {"balance": float("nan")}}})
    session = agent.session(
        model=model,
        stubs=stubs,
        variables={"project.authenticated": True, "project.customer_id": "1001"},
    )
    moves = [
        {"tool": "activate_skill", "args": {"skill": "check_balance"}},
        {"tool": "get_balance"},
        {"say": "done"},
    ]
    model.begin_turn([parse_move(m) for m in moves])
    reply = session.send("balance?")
    action = steps(reply, "ACTION_STEP")[0]
    assert "not a finite JSON number" in action["error"]
    json.dumps(session.to_json(), allow_nan=False)


def test_an_exchange_longer_than_the_cap_is_not_sent_again_next_turn() -> None:
    # Trimming kept the last exchange whatever its size, and ran before the turn's user
    # message was added: the exchange a large result made was sent whole the turn after.
    driven, first = fetch_with({"label": "x" * 5_000}, Limits(max_history_chars=2_000))
    assert first.error is None
    reply = driven.send("again", {"say": "ok"})
    (trimmed,) = [s for s in steps(reply, "EVENT_STEP") if s["event"] == "history_trimmed"]
    assert trimmed["dropped"] > 0
    history = driven.session.state.history
    assert [(m.role, m.content) for m in history] == [("user", "again"), ("assistant", "ok")]
    (call,) = steps(reply, "LLM_STEP")
    assert all("x" * 100 not in json.dumps(m) for m in call["input"]["messages"])


def test_a_mantle_exchange_longer_than_the_cap_is_not_sent_again_next_turn() -> None:
    received: list[list[str]] = []

    def answer(messages: list[Message], info: FunctionInfo) -> str:
        received.append([m.content for m in messages])
        return "ok"

    agent = agentscript.load(Path(__file__).parents[2] / "examples" / "card_bank")
    session = agent.session(model=FunctionModel(answer), limits=Limits(max_history_chars=3_000))
    session.send("hi " + "w" * 5_000)
    reply = session.send("again")
    assert received[-1] == ["again"]
    assert [s["event"] for s in steps(reply, "EVENT_STEP")] == ["history_trimmed"]
