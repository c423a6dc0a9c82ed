"""A finished turn's state fitted under ``MAX_SESSION_CHARS`` (``engine/fitting.py``).

The limit is lowered here (``restore`` reads it when called) so that the states stay small:
the order is earlier exchanges, then the turn's results (largest first), then the turn's
texts but its reply; what cannot fit says so; a fitted session goes on as its restore would.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.fakes import fitting
from tests.fakes.fitting import CAP, DROPPED_RESULT, REASON, answer, write_agent

import agentscript
from agentscript import jsontext
from agentscript.engine.fitting import Fitted, fit_session
from agentscript.engine.history import message_chars
from agentscript.engine.session import AgentBase, Session
from agentscript.models.function import FunctionModel
from agentscript.trace_inputs import rebuild_messages

small_cap = fitting.small_cap  # the fixture


def load(tmp_path: Path) -> AgentBase:
    return agentscript.load(write_agent(tmp_path))


def conversation(agent: AgentBase, *turns: str, traces: list[Any] | None = None) -> Session:
    session = agent.session(model=FunctionModel(answer))
    for text in turns:
        reply = session.send(text)
        assert reply.ok, reply.error
        if traces is not None:
            traces.append(reply.trace)
    return session


def saved(session: Session) -> str:
    return jsontext.dumps(session.to_json(detached=False))


def fitted_after(
    tmp_path: Path, *turns: str, traces: list[Any] | None = None
) -> tuple[AgentBase, Session, Fitted]:
    """The agent, its session after ``turns`` and the session's state fitted under ``CAP``."""
    agent = load(tmp_path)
    session = conversation(agent, *turns, traces=traces)
    return agent, session, fit_session(session, saved(session), CAP)


def check_fitted(agent: AgentBase, session: Session, text: str | None) -> None:
    """The text fits, is the session's own state, and restores."""
    assert text is not None and len(text) <= CAP
    assert text == saved(session)
    agent.restore(text, model=FunctionModel(answer))
    # The ledger counts the history as it now is.
    assert session.history_chars() == sum(message_chars(m) for m in session.state.history)


def test_earlier_exchanges_are_dropped_before_any_result_of_the_turn(
    tmp_path: Path, small_cap: int
) -> None:
    agent = load(tmp_path)
    session = conversation(agent, "fetch 100000", "fetch 100001", "fetch 100002")
    text = saved(session)
    assert len(text) > CAP
    fitted = fit_session(session, text, CAP)
    assert fitted.fits and (fitted.dropped, fitted.results, fitted.texts) == (4, 0, 0)
    history = session.state.history
    assert history[0].role == "user" and history[0].content == "fetch 100001"
    results = [m.content for m in history if m.role == "tool"]
    assert [len(json.loads(r)["text"]) for r in results] == [100001, 100002]
    check_fitted(agent, session, fitted.text)


def test_the_turns_largest_results_are_dropped_first_as_error_results(
    tmp_path: Path, small_cap: int
) -> None:
    agent = load(tmp_path)
    session = conversation(agent, "hello", "fetch 50000 120000 80000 100000")
    before = list(session.state.history)
    fitted = fit_session(session, saved(session), CAP)
    # The earlier exchange goes first (it is small: not enough), then the largest result.
    assert fitted.fits and (fitted.dropped, fitted.results, fitted.texts) == (2, 1, 0)
    history = session.state.history
    assert history[0].content == "fetch 50000 120000 80000 100000"
    tools = [m for m in history if m.role == "tool"]
    old = [m for m in before if m.role == "tool"]
    assert [m.tool_call_id for m in tools] == [m.tool_call_id for m in old]
    assert [m.name for m in tools] == ["fetch"] * 4
    assert tools[1].content == DROPPED_RESULT
    assert [tools[i] is old[i] for i in range(4)] == [True, False, True, True]
    assert old[1].content != DROPPED_RESULT  # replaced, never edited
    check_fitted(agent, session, fitted.text)


def test_the_turns_texts_go_after_its_results_and_never_its_reply(
    tmp_path: Path, small_cap: int
) -> None:
    agent, session, fitted = fitted_after(tmp_path, "talk 140000")
    # Its results are shorter than an error result: kept.
    assert fitted.fits and (fitted.dropped, fitted.results, fitted.texts) == (0, 0, 1)
    texts = [m for m in session.state.history if m.role == "assistant"]
    marker = f"[text dropped: {REASON}]"
    assert [m.content[:1] for m in texts] == ["[", "1", "r"]
    assert texts[0].content == marker and texts[0].tool_calls[0].name == "fetch"
    assert texts[2].content == "r" * 140000
    check_fitted(agent, session, fitted.text)


def test_a_state_whose_variables_alone_are_too_large_cannot_fit(
    tmp_path: Path, small_cap: int
) -> None:
    _, _, fitted = fitted_after(tmp_path, "keep 160000")
    assert not fitted.fits and fitted.state is None and fitted.text is None
    assert fitted.results == 2


def test_a_fitted_session_goes_on_as_its_restore_would(tmp_path: Path, small_cap: int) -> None:
    traces: list[Any] = []
    turns = ("fetch 10", "fetch 120000 120000 120000")
    agent, session, fitted = fitted_after(tmp_path, *turns, traces=traces)
    assert fitted.fits and fitted.text is not None and fitted.results == 1
    kept_model, restored_model = FunctionModel(answer), FunctionModel(answer)
    restored = agent.restore(fitted.text, model=restored_model)
    assert restored.to_json() == session.to_json()
    session.model = kept_model
    session.resume()  # as a server keeping it does
    replies = [session.send("hello"), restored.send("hello")]
    requests = [
        [[m.to_json() for m in r.messages] for r in model.requests]
        for model in (kept_model, restored_model)
    ]
    assert requests[0] == requests[1]
    assert DROPPED_RESULT in [m["content"] for m in requests[0][0]]
    inputs = [
        [s["input"] for s in r.trace["planTrace"]["steps"] if s["type"] == "LLM_STEP"]
        for r in replies
    ]
    assert inputs[0] == inputs[1]
    # The traces rebuild what the model was given, the replaced result included.
    assert rebuild_messages([*traces, replies[0].trace])[-1] == requests[0][-1]
