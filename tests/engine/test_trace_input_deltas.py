"""``LLM_STEP`` deltas across a save and a restore, and across a trimmed history.

The saved state says which of its history's messages the previous LLM call was given
(``llm_input``, ``trace_inputs.MessageLog.mark``), so a restored (or resumed) session's first
step records only the new messages, as a live session's does, and the trace of a turn does not
depend on whether the session was kept, resumed or restored. Steps after the history's oldest
messages were trimmed are deltas too (``input.messagesDropped``). Whatever a saved state says,
the full inputs rebuilt from the traces are what the model was sent.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from tests.fakes.tour import AGENT, TURNS

import agentscript
from agentscript.engine.history import message_chars
from agentscript.engine.restore import SessionRestoreError
from agentscript.engine.session import Session
from agentscript.limits import Limits
from agentscript.models.base import (
    Message,
    ModelError,
    ModelRequest,
    ModelResponse,
    TextSink,
)
from agentscript.models.scripted import Move, ScriptedModel
from agentscript.trace_inputs import MessageLog, rebuild_messages

ACTIONS = {"lookup": lambda ref: {"status": f"{ref} late"}}


class Witness:
    """Delegates to a scripted model and keeps, per call, the messages it was given."""

    name = "witness"

    def __init__(self) -> None:
        self.inner = ScriptedModel()
        self.received: list[list[dict[str, Any]]] = []

    async def complete(
        self, request: ModelRequest, stream: TextSink | None = None
    ) -> ModelResponse:
        self.received.append([m.to_json() for m in request.messages])
        return await self.inner.complete(request, stream=stream)


def load(tmp_path: Path) -> agentscript.AgentBase:
    path = tmp_path / "a.agent"
    path.write_text(AGENT, encoding="utf-8")
    return agentscript.load(path)


def comparable(trace: dict[str, Any]) -> Any:
    """A trace without what differs between two runs of one conversation: timings, ids."""

    def strip(data: Any) -> Any:
        if isinstance(data, dict):
            return {
                k: strip(v)
                for k, v in data.items()
                if not k.endswith(("Ms", "_ms")) and k not in ("sessionId", "planId")
            }
        if isinstance(data, list):
            return [strip(item) for item in data]
        return data

    return strip(trace)


def converse(
    tmp_path: Path, how: str, turns: int = 15, text: str = "next", limits: Limits | None = None
) -> tuple[Witness, list[dict[str, Any]], list[dict[str, Any]]]:
    """Play the tour ``turns`` times over, the session ``how``: ``live`` (one object),
    ``resumed`` (``resume()`` before each turn, as a server's kept session), ``restored`` (saved
    to JSON text and restored before each turn). The witness, the traces, the saved states."""
    agent = load(tmp_path)
    witness = Witness()
    session = agent.session(model=witness, actions=ACTIONS, limits=limits, session_id="s1")
    traces, states = [], []
    for number in range(turns):
        if how == "resumed":
            session.resume()
        elif how == "restored" and number:
            session = agent.restore(
                json.dumps(session.to_json()), model=witness, actions=ACTIONS, limits=limits
            )
        witness.inner.begin_turn(TURNS[number % len(TURNS)])
        reply = session.send(f"{text} {number}")
        assert reply.error is None, reply.error
        traces.append(reply.trace)
        states.append(session.to_json())
    return witness, traces, states


def llm_steps(trace: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for s in trace["planTrace"]["steps"] if s["type"] == "LLM_STEP"]


@pytest.mark.parametrize("how", ["live", "resumed", "restored"])
def test_every_turn_after_the_first_records_only_new_messages_however_the_session_is_kept(
    tmp_path: Path, how: str
) -> None:
    witness, traces, states = converse(tmp_path, how)
    assert rebuild_messages(traces) == witness.received
    for trace in traces[1:]:
        first = llm_steps(trace)[0]["input"]
        assert first["messagesFrom"] > 0 and len(first["messages"]) <= 4, first
    # The saved state names the previous call's messages by count and digest.
    assert set(states[-1]["llm_input"]) == {"messages", "digest"}


def test_kept_resumed_and_restored_sessions_write_the_same_traces_and_states(
    tmp_path: Path,
) -> None:
    for how in ("live", "resumed", "restored"):
        (tmp_path / how).mkdir()
    runs = {how: converse(tmp_path / how, how) for how in ("live", "resumed", "restored")}
    traces = {how: [comparable(t) for t in run[1]] for how, run in runs.items()}
    states = {how: run[2] for how, run in runs.items()}
    assert traces["resumed"] == traces["restored"] == traces["live"]
    assert states["resumed"] == states["restored"] == states["live"]


@pytest.mark.parametrize("how", ["live", "resumed", "restored"])
def test_steps_after_the_history_was_trimmed_are_deltas_and_rebuild_what_was_sent(
    tmp_path: Path, how: str
) -> None:
    limits = Limits(max_history_chars=3000)
    witness, traces, _ = converse(tmp_path, how, turns=30, text="x" * 300, limits=limits)
    assert rebuild_messages(traces) == witness.received
    trimmed = [
        t
        for t in traces
        if any(s.get("event") == "history_trimmed" for s in t["planTrace"]["steps"])
    ]
    assert len(trimmed) >= 10
    for trace in trimmed:
        first = llm_steps(trace)[0]["input"]
        assert first["messagesDropped"] > 0 and first["messagesFrom"] > 0, first
        assert len(first["messages"]) <= 4
    # A trace never holds much more than the turn's own messages, however long the session.
    sizes = [len(json.dumps(t)) for t in traces]
    assert max(sizes[10:]) < 2 * max(sizes[:5])


def test_trimmed_traces_are_the_same_kept_resumed_or_restored(tmp_path: Path) -> None:
    limits = Limits(max_history_chars=3000)
    for how in ("live", "resumed", "restored"):
        (tmp_path / how).mkdir()
    runs = {
        how: converse(tmp_path / how, how, turns=20, text="x" * 300, limits=limits)
        for how in ("live", "resumed", "restored")
    }
    traces = {how: [comparable(t) for t in run[1]] for how, run in runs.items()}
    assert traces["resumed"] == traces["restored"] == traces["live"]


def saved_after_two_turns(tmp_path: Path) -> tuple[agentscript.AgentBase, dict[str, Any]]:
    agent = load(tmp_path)
    session = agent.session(model=ScriptedModel([Move(text="one"), Move(text="two")]))
    session.send("hello")
    session.send("again")
    return agent, session.to_json()


def first_step_after_restore(agent: agentscript.AgentBase, saved: Any) -> dict[str, Any]:
    session = agent.restore(saved, model=ScriptedModel([Move(text="three")]))
    reply = session.send("more")
    assert reply.error is None, reply.error
    step: dict[str, Any] = llm_steps(reply.trace)[0]["input"]
    return step


@pytest.mark.parametrize(
    "forged",
    [
        {"digest": "sha256:" + "0" * 64},  # another history's
        {"digest": "md5:abc"},  # a digest kind this version does not make
        {"digest": ""},
        {"messages": 99},  # more than the history holds
        {"messages": 0},
        {"dropped": 2**40},
        {"dropped": 3},  # the same messages, said to start later in the previous call
    ],
)
def test_a_forged_or_mismatched_llm_input_gives_a_complete_step_never_an_error(
    tmp_path: Path, forged: dict[str, Any]
) -> None:
    agent, saved = saved_after_two_turns(tmp_path)
    honest = first_step_after_restore(agent, saved)
    assert honest["messagesFrom"] == 3  # hello, one, again (two is the answer to it)
    saved["llm_input"] = {**saved["llm_input"], **forged}
    step = first_step_after_restore(agent, saved)
    assert step["messagesFrom"] == 0 and "messagesDropped" not in step
    assert [m["content"] for m in step["messages"]] == ["hello", "one", "again", "two", "more"]


def test_a_state_without_llm_input_as_older_versions_wrote_gives_a_complete_step(
    tmp_path: Path,
) -> None:
    agent, saved = saved_after_two_turns(tmp_path)
    del saved["llm_input"]
    step = first_step_after_restore(agent, saved)
    assert step["messagesFrom"] == 0 and len(step["messages"]) == 5


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ("sha256:x", "llm_input"),
        ({"messages": 1}, "llm_input.digest"),
        ({"digest": "sha256:"}, "llm_input.messages"),
        ({"messages": -1, "digest": "sha256:"}, "llm_input.messages"),
        ({"messages": True, "digest": "sha256:"}, "llm_input.messages"),
        ({"messages": 1.5, "digest": "sha256:"}, "llm_input.messages"),
        ({"messages": 1, "digest": 7}, "llm_input.digest"),
        ({"messages": 1, "digest": "x" * 201}, "llm_input.digest"),
        ({"messages": 1, "digest": "sha256:", "dropped": "2"}, "llm_input.dropped"),
        ({"messages": 1, "digest": "sha256:", "extra": 1}, "llm_input.extra"),
    ],
)
def test_a_malformed_llm_input_is_refused_by_the_restore_checks(
    tmp_path: Path, value: Any, field: str
) -> None:
    agent, saved = saved_after_two_turns(tmp_path)
    saved["llm_input"] = value
    with pytest.raises(SessionRestoreError) as caught:
        agent.restore(saved, model=ScriptedModel())
    assert caught.value.field == field


def test_a_turn_that_raised_leaves_no_delta_of_its_unrecorded_calls(tmp_path: Path) -> None:
    """A cancelled turn writes no trace: the next step goes on from the last recorded one."""
    agent = load(tmp_path)
    cancel = [False]

    class Cancelling(Witness):
        async def complete(
            self, request: ModelRequest, stream: TextSink | None = None
        ) -> ModelResponse:
            if cancel[0]:
                self.received.append([m.to_json() for m in request.messages])
                raise asyncio.CancelledError
            return await super().complete(request, stream)

    witness = Cancelling()
    session = agent.session(model=witness, actions=ACTIONS)
    witness.inner.begin_turn([Move(text="one")])
    traces = [session.send("hello").trace]
    cancel[0] = True
    with pytest.raises(asyncio.CancelledError):
        session.send("lost")
    cancel[0] = False
    lost = witness.received.pop()
    for saved in (None, session.to_json()):
        again = session if saved is None else agent.restore(saved, model=witness, actions=ACTIONS)
        witness.inner.begin_turn([Move(text="two")])
        reply = again.send("after")
        got = rebuild_messages([*traces, reply.trace])[-1]
        assert got == witness.received[-1], (got, lost)
        assert [m["content"] for m in got] == ["hello", "one", "lost", "after"]


def test_a_failed_call_is_the_previous_call_in_the_trace_and_in_the_saved_state(
    tmp_path: Path,
) -> None:
    agent = load(tmp_path)
    failing = [False]

    class Failing(Witness):
        async def complete(
            self, request: ModelRequest, stream: TextSink | None = None
        ) -> ModelResponse:
            if failing[0]:
                self.received.append([m.to_json() for m in request.messages])
                raise ModelError("the model is down")
            return await super().complete(request, stream)

    witness = Failing()
    session = agent.session(model=witness, actions=ACTIONS)
    traces = []
    for number in range(3):
        failing[0] = number == 1
        witness.inner.begin_turn([Move(text=f"answer {number}")])
        reply = session.send(f"say {number}")
        assert (reply.error is not None) == failing[0]
        traces.append(reply.trace)
        session = agent.restore(json.dumps(session.to_json()), model=witness, actions=ACTIONS)
    assert llm_steps(traces[1])[0].get("error")
    assert llm_steps(traces[2])[0]["input"]["messagesFrom"] > 0
    assert rebuild_messages(traces) == witness.received


def test_mark_and_seed_after_a_front_trim_without_a_call_keep_the_offset() -> None:
    """A turn that trims the history and then makes no call (a budget stop, a Mantle turn
    without the model) saves where the history now starts in the previous call."""
    previous = [Message("user", f"m{i}") for i in range(6)]
    log = MessageLog()
    log.delta(previous)
    history = previous[2:]  # the two oldest trimmed
    mark = log.mark(history)
    assert mark is not None and (mark.dropped, mark.length) == (2, 4)
    restored = [Message.from_json(m.to_json()) for m in history]
    seeded = MessageLog()
    seeded.expect(restored, mark.to_json())
    kept = MessageLog()
    kept.delta(previous)
    kept.resume(history)
    for one, messages in ((seeded, restored), (kept, history)):
        dropped, start, new = one.delta([*messages[1:], Message("user", "new")])
        assert (dropped, start, [m.content for m in new]) == (3, 3, ["new"])


def test_a_kept_session_counts_only_new_messages_and_the_same_numbers_as_a_restored_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``resume()`` keeps the history's ledger: a kept turn reads only its new messages (it
    counted the whole history again every turn), and the counts are a restored session's."""
    from agentscript.engine import history

    read = [0]

    def counting(message: Message) -> int:
        read[0] += 1
        return message_chars(message)

    monkeypatch.setattr(history, "message_chars", counting)
    agent = load(tmp_path)
    model = ScriptedModel()
    session: Session = agent.session(model=model, actions=ACTIONS)
    per_turn = []
    for number in range(30):
        session.resume()
        model.begin_turn([Move(calls=[("look", {"ref": "A"})]), Move(text="A is late.")])
        read[0] = 0
        assert session.send(f"turn {number}").error is None
        per_turn.append(read[0])
    assert per_turn[2] == per_turn[29] <= 8, per_turn
    restored = agent.restore(session.to_json(), model=model, actions=ACTIONS)
    assert restored.history_chars() == session.history_chars()
    assert session.ledger is not None and restored.ledger is not None
    assert restored.ledger.call_ids == session.ledger.call_ids
    assert restored.ledger.unanswered() == session.ledger.unanswered() == []
