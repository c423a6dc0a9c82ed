"""The two formats share one turn kernel: the drifts it removed stay removed.

- After a failed turn both histories have the same shape: every tool call answered, then the
  message said to the user as an assistant message (docs/semantics.md, "Failed turns").
- An integer too long to print in a tool call's arguments is refused the same way in both
  formats: a REFUSED_STEP and an error result, never an exception out of the turn.
- Before each model call, every tool call in the history has its answer.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from formats import agent_script, mantle, opening, session, steps

from agentscript.engine.kernel import (
    ToolCallWindow,
    answer_unanswered,
    bounds_problem,
    check_answered,
    unanswered_calls,
)
from agentscript.engine.session import AgentBase
from agentscript.errors import UnansweredToolCall
from agentscript.limits import Limits
from agentscript.models.base import Message, ToolCall
from agentscript.models.scripted import Move, ScriptedModel

FORMATS: list[Callable[[Path], AgentBase]] = [agent_script, mantle]
HUGE = 10**5000  # more digits than Python prints (4300)


def roles(history: list[Message]) -> list[str]:
    """The history's shape: roles, with the assistant messages that make tool calls marked."""
    return [f"{m.role}+calls" if m.tool_calls else m.role for m in history]


def failed_turn_history(
    make: Callable[[Path], AgentBase], root: Path, moves: list[Move]
) -> list[str]:
    """The shape of the history a failing second turn adds (the first one sets the stage:
    Mantle activates its skill there)."""
    agent = make(root)
    model = ScriptedModel()
    chat = session(agent, model)
    model.begin_turn([*opening(agent), Move(text="Ready.")])
    assert chat.send("hello").error is None
    before = len(chat.state.history)
    model.begin_turn(moves)  # the moves run out: the scripted model fails the turn
    reply = chat.send("go on")
    assert reply.error is not None and reply.text == "Sorry, something went wrong."
    return roles(chat.state.history[before:])


def test_a_turn_failing_before_any_tool_call_leaves_user_then_assistant_in_both_formats(
    tmp_path: Path,
) -> None:
    shapes = [failed_turn_history(make, tmp_path / make.__name__, []) for make in FORMATS]
    assert shapes[0] == shapes[1] == ["user", "assistant"]


def test_a_turn_failing_after_a_tool_step_keeps_the_same_history_in_both_formats(
    tmp_path: Path,
) -> None:
    moves = [Move(calls=[("add", {"a": 1})])]
    shapes = [failed_turn_history(make, tmp_path / make.__name__, moves) for make in FORMATS]
    assert shapes[0] == shapes[1] == ["user", "assistant+calls", "tool", "assistant"]


@pytest.mark.parametrize("make", FORMATS, ids=["agentscript", "mantle"])
def test_the_turn_after_a_failed_one_sends_every_tool_call_with_its_answer(
    make: Callable[[Path], AgentBase], tmp_path: Path
) -> None:
    agent = make(tmp_path)
    model = ScriptedModel()
    chat = session(agent, model, limits=Limits(max_llm_calls=len(opening(agent)) + 1))
    model.begin_turn([*opening(agent), Move(calls=[("add", {"a": 1})]), Move(text="never")])
    assert "Limits.max_llm_calls" in (chat.send("go").error or "")
    model.begin_turn([Move(text="Done.")])
    reply = chat.send("and now?")
    assert reply.error is None
    messages = steps(reply, "LLM_STEP")[0]["input"]["messages"]
    asked = {c["id"] for m in messages for c in m.get("tool_calls", [])}
    answered = {m["tool_call_id"] for m in messages if m["role"] == "tool"}
    assert asked and asked == answered
    assert messages[-2] == {"role": "assistant", "content": "Sorry, something went wrong."}


def over_long_integer_refusal(make: Callable[[Path], AgentBase], root: Path) -> list[str]:
    agent = make(root)
    model = ScriptedModel()
    chat = session(agent, model, trace_dir=root / "traces")
    model.begin_turn([*opening(agent), Move(calls=[("add", {"a": HUGE})]), Move(text="ok")])
    reply = chat.send("add a big one")
    assert reply.error is None and reply.text == "ok" and reply.trace_file is not None
    json.dumps(chat.to_json())  # the saved session holds no unprintable number either
    return [s["reason"] for s in steps(reply, "REFUSED_STEP")]


def test_an_integer_too_long_to_print_is_refused_the_same_way_in_both_formats(
    tmp_path: Path,
) -> None:
    reasons = [over_long_integer_refusal(make, tmp_path / make.__name__) for make in FORMATS]
    assert reasons[0] == reasons[1] and len(reasons[0]) == 1
    assert "'add'" in reasons[0][0] and "too long to print" in reasons[0][0]


def test_the_kernel_bounds_refuse_an_unprintable_integer_instead_of_raising() -> None:
    assert bounds_problem("add", {"a": HUGE}, Limits()) == (
        "the arguments of 'add' are not JSON data",
        "max_argument_chars",
    )
    assert bounds_problem("add", {"a": 1}, Limits()) is None
    assert bounds_problem("add", {"a": "x" * 50}, Limits(max_argument_chars=10)) == (
        "arguments of 'add' are too large (59 characters)",
        "max_argument_chars",
    )


def test_a_model_call_is_never_sent_with_an_unanswered_tool_call() -> None:
    call = ToolCall("c1", "add", {"a": 1})
    history = [Message("user", "go"), Message("assistant", "", tool_calls=[call])]
    with pytest.raises(UnansweredToolCall) as refused:
        check_answered(history)
    assert refused.value.call_ids == ["c1"]
    history.append(Message("user", "again"))
    assert answer_unanswered(history) == ["c1"]
    # The answer goes right after its call, before what followed.
    assert roles(history) == ["user", "assistant+calls", "tool", "user"]
    check_answered(history)


def test_the_tool_call_window_answers_every_call_and_holds_what_was_said() -> None:
    history: list[Message] = []
    calls = [ToolCall("a", "add", {}), ToolCall("b", "add", {})]
    window = ToolCallWindow(history)
    window.open("", calls)
    window.answer(calls[0], {"sum": 1})
    window.say("Working on it.")
    window.close("not run: the turn was stopped")
    assert roles(history) == ["assistant+calls", "tool", "tool", "assistant"]
    assert json.loads(history[2].content) == {"error": "not run: the turn was stopped"}
    assert unanswered_calls(history) == []


def test_repeated_or_empty_tool_call_ids_are_made_distinct_before_they_are_kept() -> None:
    from agentscript.engine.llm import distinct_ids
    from agentscript.models.base import Message, ToolCall

    history = [Message("assistant", "", tool_calls=[ToolCall("call_1", "a", {})])]
    calls = [ToolCall("call_1", "a", {}), ToolCall("", "b", {}), ToolCall("call_2", "c", {})]
    ids = [c.id for c in distinct_ids(calls, history)]
    assert len(set(ids)) == 3 and "call_1" not in ids and "" not in ids
    assert ids[2] == "call_2"
