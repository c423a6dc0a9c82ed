"""An ``inline`` action (a sync ``python://`` action run on the event loop's thread) cannot be
stopped at its timeout; once it ends past it, it is a timed-out call, worded as the ``thread``
mode words one, whatever it returned or raised: the isolation mode never changes what the
trace records or the model is told (``actions/registry.py``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import agentscript
from agentscript.actions.settings import ActionSettings, Isolation
from agentscript.engine.session import Session
from agentscript.models.scripted import Move, ScriptedModel
from fakes.agent_texts import act_action, agent_text

AGENT = agent_text(actions=[act_action("python://slow:act", "An action slower than its timeout")])

# Each ends well past the timeout below; none is interrupted.
ENDINGS = {
    "returns": "    return {'who': 'late'}\n",
    "raises": "    raise ValueError('late and failed')\n",
    "exits": "    raise SystemExit(3)\n",
}
TIMEOUT = 0.001
TIMED_OUT = f"action 'act' timed out after {TIMEOUT:g} s"


def session_in(folder: Path, ending: str, mode: Isolation) -> Session:
    folder.mkdir(parents=True)
    code = "import time\n\n\ndef act():\n    time.sleep(0.02)\n" + ending
    (folder / "slow.py").write_text(code, encoding="utf-8")
    (folder / "a.agent").write_text(AGENT, encoding="utf-8")
    agent = agentscript.load(folder / "a.agent")
    agent.action_settings = ActionSettings(isolation=mode)
    return agent.session(
        model=ScriptedModel([Move(calls=[("act", {})]), Move(text="It was slow.")]),
        limits=agentscript.Limits(action_timeout=TIMEOUT),
    )


def seen(session: Session) -> tuple[dict[str, Any], str]:
    """The turn's action step (what the trace records) and the tool message (what the model
    is told)."""
    reply = session.send("go")
    assert reply.error is None and reply.text == "It was slow."
    step = next(s for s in reply.trace["planTrace"]["steps"] if s["type"] == "ACTION_STEP")
    tool = next(m for m in session.state.history if m.role == "tool")
    return {key: step[key] for key in ("output", "error", "postVars")}, str(tool.content)


@pytest.mark.parametrize("ending", ENDINGS)
def test_an_inline_call_that_ends_past_its_timeout_is_timed_out_as_on_a_thread(
    tmp_path: Path, ending: str
) -> None:
    inline = seen(session_in(tmp_path / "inline", ENDINGS[ending], Isolation.INLINE))
    thread = seen(session_in(tmp_path / "thread", ENDINGS[ending], Isolation.THREAD))
    assert inline == thread
    step, told = inline
    assert step["output"] is None and step["error"] == TIMED_OUT
    assert TIMED_OUT in told and "late" not in told
