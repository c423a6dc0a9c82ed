"""A finished turn's state fitted under ``MAX_SESSION_CHARS`` (``engine/fitting.py``).

The limit is lowered here (``restore`` reads it when called) so that the states stay small:
the order is earlier exchanges, then the turn's results (largest first), then the turn's
texts but its reply; what cannot fit says so; a fitted session goes on as its restore would.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import agentscript
from agentscript import jsontext
from agentscript.engine import restore
from agentscript.engine.fitting import fit_session
from agentscript.engine.history import message_chars
from agentscript.engine.session import AgentBase, Session
from agentscript.models.base import Message, ModelResponse, ToolCall
from agentscript.models.function import FunctionInfo, FunctionModel
from agentscript.trace_inputs import rebuild_messages

CAP = 300_000  # MAX_SESSION_CHARS in these tests
REASON = f"the saved session would be larger than MAX_SESSION_CHARS ({CAP} characters)"
DROPPED_RESULT = json.dumps({"error": f"result dropped: {REASON}"})

AGENT = """\
system:
    instructions: "Use the tools."
    messages:
        welcome: "Hi."
        error: "ERR"
config:
    developer_name: "Fits"
variables:
    a: mutable string = ""
        description: "Kept text"
    b: mutable string = ""
        description: "Kept text"
start_agent main:
    description: "main"
    reasoning:
        instructions: ->
            | Fetch pages.
        actions:
            fetch: @actions.fetch
                description: "Fetch a page"
                with size=...
            keep_a: @actions.fetch
                description: "Fetch a page and keep it in a"
                with size=...
                set @variables.a = @outputs.text
            keep_b: @actions.fetch
                description: "Fetch a page and keep it in b"
                with size=...
                set @variables.b = @outputs.text
    actions:
        fetch:
            description: "Fetch a page"
            target: "python://fits_pages:fetch"
            inputs:
                size: number
                    description: "Its length"
            outputs:
                text: string
"""
PAGES = """
def fetch(size: float) -> dict[str, object]:
    return {"text": "x" * int(size)}
"""


def answer(messages: list[Message], info: FunctionInfo) -> Any:
    """``fetch SIZE...`` calls fetch once per size, ``keep SIZE`` keeps a page in a and in b,
    ``talk SIZE`` says SIZE characters before each of two calls and in its reply; after the
    results, ``done``."""
    user = max(i for i, m in enumerate(messages) if m.role == "user")
    words = messages[user].content.split()
    calls = [m for m in messages[user:] if m.role == "assistant" and m.tool_calls]
    at = f"c{len(messages)}"
    if words[0] == "talk":
        size = int(words[1])
        if len(calls) < 2:
            call = ToolCall(f"{at}_0", "fetch", {"size": 10})
            return ModelResponse(text=str(len(calls)) * size, tool_calls=[call])
        return "r" * size
    if calls:
        return "done"
    if words[0] == "fetch":
        return [ToolCall(f"{at}_{i}", "fetch", {"size": int(s)}) for i, s in enumerate(words[1:])]
    if words[0] == "keep":
        return [ToolCall(f"{at}_{n}", f"keep_{n}", {"size": int(words[1])}) for n in "ab"]
    return "ok"


@pytest.fixture
def small_cap(monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(restore, "MAX_SESSION_CHARS", CAP)
    return CAP


def load(tmp_path: Path) -> AgentBase:
    (tmp_path / "fits_pages.py").write_text(PAGES)
    path = tmp_path / "fits.agent"
    path.write_text(AGENT)
    return agentscript.load(path)


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
    agent = load(tmp_path)
    session = conversation(agent, "talk 140000")
    fitted = fit_session(session, saved(session), CAP)
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
    agent = load(tmp_path)
    session = conversation(agent, "keep 160000")
    fitted = fit_session(session, saved(session), CAP)
    assert not fitted.fits and fitted.state is None and fitted.text is None
    assert fitted.results == 2


def test_a_fitted_session_goes_on_as_its_restore_would(tmp_path: Path, small_cap: int) -> None:
    agent = load(tmp_path)
    traces: list[Any] = []
    session = conversation(agent, "fetch 10", "fetch 120000 120000 120000", traces=traces)
    fitted = fit_session(session, saved(session), CAP)
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
