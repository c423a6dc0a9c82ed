"""An answer with neither text nor a tool call (docs/semantics.md, "Empty answers").

Both formats share the rule, in ``engine/llm.py``: the same request is asked once more (an
``empty_answer`` event in the LLM_STEP's ``modelEvents``), counted against
``Limits.max_llm_calls``; a second empty answer, or one cut at the token limit, fails the turn
with an error naming the stop reason. The user never gets silence as a reply.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from formats import agent_script, mantle, opening, steps

from agentscript.actions.registry import StubBook
from agentscript.engine.session import AgentBase, Session
from agentscript.limits import Limits
from agentscript.models.base import Message, ModelResponse
from agentscript.models.function import FunctionInfo, FunctionModel
from agentscript.models.scripted import Move, ScriptedModel

FORMATS = [agent_script, mantle]
IDS = ["agentscript", "mantle"]
Answer = Callable[[int, FunctionInfo], ModelResponse | str]


def chat(make: Callable[[Path], AgentBase], root: Path, answers: Answer, **kwargs: Any) -> Session:
    """A session whose model plays ``opening`` (Mantle activates its skill) then ``answers``
    (by call number, counted from the end of the opening)."""
    agent = make(root)
    moves = opening(agent)

    def answer(messages: list[Message], info: FunctionInfo) -> ModelResponse | str:
        if info.calls_before < len(moves):
            return ModelResponse(tool_calls=[info.call(*moves[info.calls_before].calls[0])])
        return answers(info.calls_before - len(moves), info)

    stubs = StubBook.from_data({"add": {"outputs": {"sum": 1}}})
    return agent.session(model=FunctionModel(answer), stubs=stubs, **kwargs)


def empty(reason: str | None = None) -> ModelResponse:
    return ModelResponse(text=None, stop_reason=reason)


@pytest.mark.parametrize("make", FORMATS, ids=IDS)
def test_an_empty_answer_is_asked_again_once_and_the_second_answer_is_the_reply(
    make: Callable[[Path], AgentBase], tmp_path: Path
) -> None:
    session = chat(make, tmp_path, lambda n, _: empty("stop") if n == 0 else "Here you are.")
    reply = session.send("hi")
    assert reply.error is None
    assert reply.text == "Here you are."
    llm = steps(reply, "LLM_STEP")[-1]
    assert llm["modelEvents"] == [{"event": "empty_answer", "stopReason": "stop"}]
    assert llm["output"]["text"] == "Here you are."
    # the two calls are counted, in one LLM_STEP
    assert reply.trace["usage"]["llm_calls"] == len(steps(reply, "LLM_STEP")) + 1


@pytest.mark.parametrize("make", FORMATS, ids=IDS)
def test_an_empty_answer_twice_fails_the_turn_naming_the_stop_reason(
    make: Callable[[Path], AgentBase], tmp_path: Path
) -> None:
    session = chat(make, tmp_path, lambda n, _: empty("end_turn"))
    reply = session.send("hi")
    assert reply.error == (
        "the model failed: it answered twice with neither text nor a tool call "
        "(stop reason 'end_turn')"
    )
    assert reply.text == "Sorry, something went wrong."  # the agent's error message
    llm = steps(reply, "LLM_STEP")[-1]
    assert llm["error"] == reply.error
    assert [e["event"] for e in llm["modelEvents"]] == ["empty_answer"]
    # the failed turn's history ends with what the user was told (semantics: failed turns)
    assert session.state.history[-1].content == "Sorry, something went wrong."


@pytest.mark.parametrize("make", FORMATS, ids=IDS)
@pytest.mark.parametrize("reason", ["length", "max_tokens"])
def test_an_empty_answer_cut_at_the_token_limit_fails_at_once(
    make: Callable[[Path], AgentBase], tmp_path: Path, reason: str
) -> None:
    asked: list[int] = []

    def answers(n: int, info: FunctionInfo) -> ModelResponse:
        asked.append(n)
        return empty(reason)

    reply = chat(make, tmp_path, answers).send("hi")
    assert asked == [0]  # asking again would end the same way
    assert reply.error == (
        f"the model failed: it ran out of tokens before it said anything (stop reason "
        f"'{reason}'); raise max_tokens in the agent's model parameters"
    )


@pytest.mark.parametrize("make", FORMATS, ids=IDS)
def test_an_empty_answer_after_a_tool_step_is_asked_again_and_keeps_the_history_whole(
    make: Callable[[Path], AgentBase], tmp_path: Path
) -> None:
    # Claude's way: a tool result, then an answer with no content at all.
    def answers(n: int, info: FunctionInfo) -> ModelResponse | str:
        if n == 0:
            return ModelResponse(tool_calls=[info.call("add", {"a": 2})])
        return empty("end_turn") if n == 1 else "Added."

    session = chat(make, tmp_path, answers)
    before = len(session.state.history)
    reply = session.send("add 2")
    assert reply.error is None and reply.text == "Added."
    roles = [m.role for m in session.state.history[before:]]
    assert roles[-3:] == ["assistant", "tool", "assistant"]
    assert session.state.history[-1].content == "Added."


@pytest.mark.parametrize("make", FORMATS, ids=IDS)
def test_S11_asking_again_counts_against_max_llm_calls(
    make: Callable[[Path], AgentBase], tmp_path: Path
) -> None:
    calls = 2 if make is mantle else 1  # Mantle's first call activates its skill
    asked: list[int] = []

    def answers(n: int, info: FunctionInfo) -> ModelResponse | str:
        asked.append(n)
        return empty() if n == 0 else "never sent"

    reply = chat(make, tmp_path, answers, limits=Limits(max_llm_calls=calls)).send("hi")
    assert asked == [0]
    assert reply.error is not None
    assert f"more than {calls} LLM calls in one turn" in reply.error
    assert steps(reply, "LLM_STEP")[-1]["modelEvents"] == [
        {"event": "empty_answer", "stopReason": None}
    ]


def test_a_scripted_empty_answer_is_asked_again_like_any_model(tmp_path: Path) -> None:
    # A conversation file scripts the retry with its own move: say "" then the answer.
    model = ScriptedModel()
    session = agent_script(tmp_path).session(model=model)
    model.begin_turn([Move(text=""), Move(text="Hi there.")])
    reply = session.send("hi")
    assert reply.text == "Hi there."
    assert model.unused_moves() == []


class SpaceThenText:
    """Streams white space and says nothing, then streams an answer (a provider drops an
    answer of white space only: ``nonempty``)."""

    name = "space-then-text"

    def __init__(self) -> None:
        self.calls = 0

    async def complete(self, request: Any, *, stream: Any = None) -> ModelResponse:
        self.calls += 1
        if self.calls == 1:
            if stream is not None:
                stream("\n\n")
            return ModelResponse(text=None, stop_reason="stop")
        if stream is not None:
            for piece in ("\n", "\nHel", "lo"):
                stream(piece)
        return ModelResponse(text="\n\nHello", stop_reason="stop")


def test_white_space_streamed_before_an_empty_answer_is_never_shown(tmp_path: Path) -> None:
    session = agent_script(tmp_path).session(model=SpaceThenText())
    shown: list[str] = []
    session.on_text = shown.append
    reply = session.send("hi")
    assert reply.error is None
    # the first answer's space was held, then dropped; the second's goes with its first text
    assert shown == ["\n\nHel", "lo"]
    assert "".join(shown) == "\n\nHello"
