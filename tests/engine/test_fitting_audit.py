"""``engine/fitting.py`` as an audit found it wanting: a state written in ASCII escapes (a lone
surrogate anywhere sends all of it to the standard library) measured message by message as
UTF-8, and the state from before a turn that could not be kept, which must take what the turn
counted and the confirmation it answered and still fit."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from tests.fakes import fitting
from tests.fakes.agent_texts import Field, Tool
from tests.fakes.fitting import CAP, CONFIG, write_agent

import agentscript
from agentscript import jsontext
from agentscript.engine.fitting import fit_session, kept_before
from agentscript.engine.session import AgentBase, Session
from agentscript.models.base import Message, ToolCall
from agentscript.models.function import FunctionInfo, FunctionModel

# The fetch of ``kind`` pages, and wipe.
AGENT = fitting.fits_agent(
    variables={"a": fitting.KEPT_TEXT},
    tools=[Tool("fetch", lines=[*fitting.FETCH_TOOL.lines, "with kind=..."]), fitting.WIPE_TOOL],
    actions=[
        replace(
            fitting.FETCH,
            inputs={
                **fitting.FETCH.inputs,
                "kind": Field("string", "e: an accented letter; s: one lone surrogate"),
            },
        ),
        fitting.WIPE,
    ],
)

PAGES = """
def fetch(size: float, kind: str) -> dict[str, object]:
    return {"text": "\\ud800" if kind == "s" else "\\u00e9" * int(size)}


def wipe() -> dict[str, object]:
    return {"ok": True}
"""


def answer(messages: list[Message], info: FunctionInfo) -> Any:
    """``accents N``: N pages of 8,000 accented letters and one lone surrogate; ``wipe`` calls
    wipe (held for a yes); after the results, ``done``."""
    last = messages[-1]
    if last.role != "user":
        return "done"
    words = last.content.split()
    if words[0] == "accents":
        pages = [
            ToolCall(f"e{i}", "fetch", {"size": 8000, "kind": "e"}) for i in range(int(words[1]))
        ]
        return [*pages, ToolCall("s", "fetch", {"size": 1, "kind": "s"})]
    if words[0] == "wipe":
        return [ToolCall("w", "wipe", {})]
    return "ok"


def load(tmp_path: Path) -> AgentBase:
    return agentscript.load(write_agent(tmp_path, AGENT, PAGES, CONFIG))


def saved(session: Session) -> str:
    return jsontext.dumps(session.to_json(detached=False))


def test_a_state_in_ascii_escapes_is_fitted_as_written_not_as_utf8(tmp_path: Path) -> None:
    """30 results of 8,000 letters, 48,000 characters each as ``\\u00e9`` escapes: about 6 fit
    under the limit. Measured as UTF-8 (8,000 each), every one of them was dropped."""
    agent = load(tmp_path)
    session = agent.session(model=FunctionModel(answer))
    assert session.send("accents 30").ok
    text = saved(session)
    assert text.isascii() and len(text) > CAP  # the surrogate sent it all to the stdlib
    fitted = fit_session(session, text, CAP)
    assert fitted.text is not None and len(fitted.text) <= CAP
    results = [json.loads(m.content) for m in session.state.history if m.role == "tool"]
    kept = [r for r in results if "text" in r and r["text"].startswith("\u00e9")]
    assert fitted.results == 30 - len(kept) and len(kept) >= 5
    # Kept as many as fit: one more would not have.
    assert len(fitted.text) + 48_000 > CAP


def test_a_state_before_a_turn_that_cannot_take_its_counters_still_answers_its_confirmation(
    tmp_path: Path,
) -> None:
    """The turn answered the held call (a yes ran it), and its counters grew by more than the
    held call frees; nothing in the history can shrink: the state from before the turn, as
    stored but for the call, which must not wait for a yes again."""
    agent = load(tmp_path)
    model = FunctionModel(answer)
    session = agent.session(model=model, variables={"a": "x" * 200_000})
    assert session.send("wipe").confirmation is not None
    text = saved(session)
    state = json.loads(text)
    assert state["pending_confirmation"] is not None
    after = agent.restore(text, model=model)
    assert after.send("yes").actions == ["wipe"]
    assert after.state.pending_confirmation is None
    grown = 10**18
    after.state.extra["usage"] = {
        "llm_calls": grown,
        "input_tokens": grown,
        "output_tokens": grown,
        "cost": 1.2345678901234567e-300,
    }
    kept = kept_before(lambda: agent.restore(text, model=model), after, state, text, len(text))
    assert kept.fitted is None and len(kept.text) <= len(text)
    assert json.loads(kept.text) == {**state, "pending_confirmation": None}
    assert kept.state["pending_confirmation"] is None
    again = agent.restore(kept.text, model=model)
    assert again.send("yes").actions == []


def test_a_state_before_a_turn_that_answered_nothing_and_cannot_take_its_counters_is_as_stored(
    tmp_path: Path,
) -> None:
    agent = load(tmp_path)
    model = FunctionModel(answer)
    session = agent.session(model=model, variables={"a": "x" * 200_000})
    text = saved(session)
    state = json.loads(text)
    after = agent.restore(text, model=model)
    assert after.send("hello").ok
    kept = kept_before(lambda: agent.restore(text, model=model), after, state, text, len(text))
    assert (kept.text, kept.state, kept.fitted) == (text, state, None)
