"""A restored session is held to what a live turn allows: a held call's arguments are checked
as the model's call was, the history ends with every call answered and is no longer than a
turn leaves it, variables and the session id are within their bounds, and a lone surrogate
or an odd signature is a SessionRestoreError, never a raw exception."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from hostile_helpers import load_agent

import agentscript
from agentscript.actions.registry import StubBook
from agentscript.engine.restore import (
    MAX_SESSION_ID_CHARS,
    SESSION_KEY_ENV,
    Checker,
    SessionRestoreError,
)
from agentscript.engine.session import AgentBase, Session
from agentscript.limits import Limits
from agentscript.models.scripted import ScriptedModel, parse_move

STUBS = {"secret": {"outputs": {"done": True}}, "refund": {"outputs": {"refund_id": "R1"}}}


def restore(agent: AgentBase, data: Any, **kwargs: Any) -> Session:
    return agent.restore(data, model=ScriptedModel(), stubs=StubBook.from_data(STUBS), **kwargs)


def refused(agent: AgentBase, data: Any) -> SessionRestoreError:
    with pytest.raises(SessionRestoreError) as caught:
        restore(agent, data)
    return caught.value


def held(agent: AgentBase | None = None, args: dict[str, Any] | None = None) -> dict[str, Any]:
    """A saved session of the gate agent waiting for a yes/no on a refund."""
    agent = agent or load_agent("gate")
    model = ScriptedModel()
    session = agent.session(model=model, variables={"customer_id": "C-1"})
    model.begin_turn([parse_move({"tool": "refund_it", "args": args or {"amount": 5}})])
    assert session.send("refund please").confirmation is not None
    return session.to_json()


def talked(turns: int = 1, text: str = "hello") -> dict[str, Any]:
    """A saved session of the gate agent after ``turns`` plain exchanges."""
    model = ScriptedModel()
    session = load_agent("gate").session(model=model, variables={"customer_id": "C-1"})
    for _ in range(turns):
        model.begin_turn([parse_move({"say": "ok"})])
        session.send(text)
    return session.to_json()


# --- 1. a held call's arguments are those a live call may have ------------------------------


def with_arguments(arguments: dict[str, Any]) -> dict[str, Any]:
    data = held()
    data["pending_confirmation"]["arguments"] = arguments
    return data


def test_a_live_call_without_its_required_argument_is_not_held() -> None:
    """What restore must match: the model's call without ``amount`` is refused, not held."""
    model = ScriptedModel()
    session = load_agent("gate").session(model=model, variables={"customer_id": "C-1"})
    model.begin_turn([parse_move({"tool": "refund_it", "args": {}}), parse_move({"say": "ok"})])
    reply = session.send("refund")
    assert reply.confirmation is None
    assert session.state.pending_confirmation is None


@pytest.mark.parametrize("arguments", [{}, {"amount": None}])
def test_a_held_call_without_a_required_argument_is_refused(arguments: dict[str, Any]) -> None:
    agent = load_agent("gate")
    error = refused(agent, with_arguments(arguments))
    assert error.field == "pending_confirmation.arguments.amount"
    assert "missing" in error.reason and "refund_it" in error.reason


def test_a_forged_held_call_without_arguments_does_not_run_on_yes() -> None:
    """The audit's case: before, "yes" ran the refund with no amount at all."""
    agent = load_agent("gate")
    ran: list[dict[str, Any]] = []

    def refund(**kwargs: Any) -> dict[str, Any]:
        ran.append(kwargs)
        return {"refund_id": "R9"}

    data = with_arguments({})
    with pytest.raises(SessionRestoreError):
        agent.restore(data, model=ScriptedModel(), actions={"refund": refund})
    assert ran == []


@pytest.mark.parametrize(
    ("amount", "limit"),
    [
        ("9" * 25_000, "max_argument_chars"),
        ([[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]], "max_argument_depth"),
    ],
    ids=["too-large", "too-deep"],
)
def test_a_held_calls_arguments_are_bounded_as_a_live_calls(amount: Any, limit: str) -> None:
    error = refused(load_agent("gate"), with_arguments({"amount": amount}))
    assert error.field == "pending_confirmation.arguments"
    assert f"Limits.{limit}" in error.reason


def test_a_held_calls_arguments_are_kept_as_a_live_call_coerces_them(tmp_path: Path) -> None:
    """An integer parameter takes 5.0 as 5 in a live call; a held 5.0 is restored as 5."""
    source = (Path(__file__).parent / "agents" / "gate.agent").read_text(encoding="utf-8")
    path = tmp_path / "gate_integer.agent"
    path.write_text(source.replace("amount: number", "amount: integer"), encoding="utf-8")
    agent = agentscript.load(path)
    data = held(agent, {"amount": 5.0})
    assert data["pending_confirmation"]["arguments"] == {"amount": 5}  # the live call's
    data["pending_confirmation"]["arguments"] = {"amount": 5.0}
    pending = restore(agent, json.dumps(data)).state.pending_confirmation
    assert pending is not None
    assert pending.arguments == {"amount": 5} and type(pending.arguments["amount"]) is int
    error = refused(agent, with_arguments_of(data, {"amount": 5.5}))
    assert error.field == "pending_confirmation.arguments.amount"


def with_arguments_of(data: dict[str, Any], arguments: dict[str, Any]) -> dict[str, Any]:
    data = copy.deepcopy(data)
    data["pending_confirmation"]["arguments"] = arguments
    return data


def test_an_honest_held_call_still_restores_and_runs_on_yes() -> None:
    session = restore(load_agent("gate"), json.dumps(held()))
    assert session.state.pending_confirmation is not None
    assert session.state.pending_confirmation.arguments == {"amount": 5}
    session.model.begin_turn([parse_move({"say": "done"})])  # type: ignore[attr-defined]
    assert session.send("yes").actions == ["refund_it"]


# --- 2. lone surrogates and odd signatures ---------------------------------------------------


@pytest.fixture
def signed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SESSION_KEY_ENV, "k" * 32)


def surrogate_session() -> Session:
    """A session the engine itself lets hold a lone surrogate (a model's reply may escape
    one, and so may a host's value)."""
    model = ScriptedModel()
    session = load_agent("gate").session(model=model, variables={"customer_id": "C-\ud800"})
    model.begin_turn([parse_move({"say": "odd \udc00 text"})])
    session.send("hi")
    return session


@pytest.mark.usefixtures("signed")
def test_a_signed_session_holding_a_lone_surrogate_saves_and_restores() -> None:
    """Signing encoded the session as strict UTF-8: to_json raised UnicodeEncodeError."""
    data = surrogate_session().to_json()
    assert data["signature"].startswith("hmac-sha256:")
    session = restore(load_agent("gate"), json.dumps(data))
    assert session.state.variables["customer_id"] == "C-\ud800"
    assert session.to_json() == data


@pytest.mark.usefixtures("signed")
def test_a_wrong_signature_on_a_session_with_a_lone_surrogate_is_a_restore_error() -> None:
    """The audit's case: a raw UnicodeEncodeError from the signature check."""
    data = surrogate_session().to_json()
    data["signature"] = "hmac-sha256:" + "0" * 64
    error = refused(load_agent("gate"), json.dumps(data))
    assert error.field == "signature"


@pytest.mark.usefixtures("signed")
@pytest.mark.parametrize("signature", ["hmac-sha256:é", "\ud800", "ü" * 76])
def test_a_signature_that_is_not_ascii_is_a_restore_error(signature: str) -> None:
    """hmac.compare_digest raises TypeError for text that is not ASCII."""
    data = talked()
    data["signature"] = signature
    error = refused(load_agent("gate"), data)
    assert error.field == "signature" and "does not match" in error.reason


def test_a_session_id_with_a_lone_surrogate_is_refused() -> None:
    data = talked()
    data["session_id"] = "s-\ud800"
    error = refused(load_agent("gate"), json.dumps(data))
    assert error.field == "session_id" and "surrogate" in error.reason
    assert json.dumps(str(error), ensure_ascii=False).encode("utf-8")  # the error is text


# --- 3. every tool call of the history is answered -------------------------------------------


def test_a_history_ending_with_an_unanswered_tool_call_is_refused() -> None:
    data = talked()
    data["history"].append(
        {"role": "assistant", "content": "", "tool_calls": [{"id": "zz", "name": "bump"}]}
    )
    error = refused(load_agent("gate"), data)
    assert error.field == f"history[{len(data['history']) - 1}].tool_calls[0]"
    assert "'zz' has no result" in error.reason


def test_a_history_whose_last_call_is_answered_still_restores() -> None:
    data = talked()
    data["history"] += [
        {"role": "assistant", "content": "", "tool_calls": [{"id": "zz", "name": "bump"}]},
        {"role": "tool", "content": "{}", "tool_call_id": "zz", "name": "bump"},
    ]
    assert len(restore(load_agent("gate"), data).state.history) == len(data["history"])


# --- 4. sizes: what no runtime makes, and no stranding ----------------------------------------


def test_a_large_variable_given_at_creation_saves_and_restores() -> None:
    """Limits.max_variable_chars bounds what a turn writes, not what a host gives at
    creation: the session's own save must restore (serve would call it damaged)."""
    data = talked()
    data["variables"]["customer_id"] = "x" * (Limits().max_variable_chars + 10)
    restored = restore(load_agent("gate"), json.dumps(data))
    assert len(restored.to_json()["variables"]["customer_id"]) == Limits().max_variable_chars + 10


def test_a_history_saved_under_a_larger_limit_restores_and_the_next_turn_trims_it() -> None:
    """Limits lowered since the save strand no session: the next turn trims the history as it
    trims any (EVENT_STEP history_trimmed)."""
    big = Limits(max_history_chars=50_000)
    model = ScriptedModel()
    session = load_agent("gate").session(model=model, variables={"customer_id": "C-1"}, limits=big)
    for _ in range(6):
        model.begin_turn([parse_move({"say": "ok " * 1_000})])
        session.send("hello " * 500)
    data = session.to_json()
    small = Limits(max_history_chars=5_000)
    again = ScriptedModel([parse_move({"say": "ok"})])
    restored = load_agent("gate").restore(data, model=again, limits=small)
    assert len(restored.state.history) == len(data["history"])
    reply = restored.send("again")
    assert reply.error is None
    events = [s.get("event") for s in reply.trace["planTrace"]["steps"]]
    assert "history_trimmed" in events


def test_a_session_id_longer_than_any_runtime_makes_is_refused() -> None:
    data = talked()
    data["session_id"] = "s" * (MAX_SESSION_ID_CHARS + 1)
    error = refused(load_agent("gate"), json.dumps(data))
    assert error.field == "session_id" and f"longer than {MAX_SESSION_ID_CHARS}" in error.reason
    data["session_id"] = "s" * MAX_SESSION_ID_CHARS
    assert restore(load_agent("gate"), json.dumps(data)).id == data["session_id"]


def test_a_history_a_turn_left_restores_however_long_its_last_exchange() -> None:
    """What an honest session holds, checked with the limits it ran with: trimmed before each
    turn, so over the limit only by its last exchange (which trimming always keeps)."""
    limits = Limits(max_history_chars=2_000)
    model = ScriptedModel()
    session = load_agent("gate").session(
        model=model, variables={"customer_id": "C-1"}, limits=limits
    )
    for turn in range(12):
        model.begin_turn([parse_move({"say": "ok " * (30 if turn < 11 else 2_000)})])
        session.send("hello " * 40)
    history = session.to_json()["history"]
    assert sum(len(m["content"]) for m in history) > limits.max_history_chars
    assert len(Checker(limits).history(history)) == len(history)
    one = [history[-2], history[-1]]  # one exchange, far over the limit
    assert len(Checker(limits).history(one)) == 2
