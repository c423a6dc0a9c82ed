"""``Limits.max_turn_output_chars``: what a turn's action calls return, all together, is
bounded. ``max_output_chars`` bounds one call, and a turn may make 16 x 8 of them, so a turn
could put 128M characters into its history, trace and memory. The call whose outputs would
take the turn past the budget gets an error result naming the field, in both formats; the
budget is the turn's, so the next turn starts afresh."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hostile_helpers import Driven, load_agent, steps

import agentscript
from agentscript.engine.session import Reply, Session
from agentscript.limits import Limits
from agentscript.models.base import ModelRequest
from agentscript.models.scripted import ScriptedModel, parse_move

PAD = "x" * 3_000
# Each call's outputs take about 3,010 characters, well within one call's cap: two fit in
# the turn's budget, the third takes the turn past it.
LIMITS = Limits(max_output_chars=5_000, max_turn_output_chars=7_000)
PAST = "Limits.max_turn_output_chars (7000 characters)"

TOOLS = '''
def fetch() -> dict:
    """Fetches a page."""
    return {"text": "x" * 3000}
'''
SKILL = "---\nname: Pages\ndescription: Fetch pages.\n---\nCall fetch.\n"


def mantle_project(root: Path) -> Path:
    project = root / "project"
    (project / "skills" / "pages").mkdir(parents=True)
    (project / "agent.yml").write_text("agent:\n  id: pages\n  persona: You fetch.\n")
    (project / "skills" / "pages" / "skill.md").write_text(SKILL)
    (project / "skills" / "pages" / "tools.py").write_text(TOOLS)
    return project


def send(session: Session, model: ScriptedModel, text: str, *moves: dict[str, Any]) -> Reply:
    model.begin_turn([parse_move(m) for m in moves])
    return session.send(text)


def tool_results(request: ModelRequest) -> list[str]:
    return [m.content for m in request.messages if m.role == "tool" and m.name == "fetch"]


def check_turn_budget(
    session: Session, model: ScriptedModel, opening: list[dict[str, Any]]
) -> None:
    """One turn of three fetches (the third crosses the budget), then a turn of one."""
    fetch = {"tool": "fetch"}
    reply = send(session, model, "go", *opening, fetch, fetch, fetch, {"say": "done"})
    assert reply.error is None and reply.text == "done"  # S12: an error result, not a failure
    first, second, third = steps(reply, "ACTION_STEP")
    for kept in (first, second):
        assert kept["error"] is None
        assert PAD in json.dumps(kept["output"])
    assert PAST in third["error"] and "'fetch'" in third["error"]
    assert PAD not in json.dumps(third["output"])
    # The model is told: the request after the third call holds its error result, and the
    # first two calls' outputs.
    told = tool_results(model.requests[len(opening) + 3])
    assert len(told) == 3
    assert all(PAD in result for result in told[:2])
    assert PAST in json.loads(told[2])["error"]
    # The budget is the turn's: the next turn's first call of the same size is kept.
    reply = send(session, model, "again", fetch, {"say": "again"})
    assert reply.error is None and reply.text == "again"
    (call,) = steps(reply, "ACTION_STEP")
    assert call["error"] is None and PAD in json.dumps(call["output"])
    assert PAD in tool_results(model.requests[-1])[-1]


def test_agent_script_call_past_the_turn_output_budget_is_an_error_result() -> None:
    driven = Driven(load_agent("outputs"), actions={"fetch": lambda: {"label": PAD}}, limits=LIMITS)
    check_turn_budget(driven.session, driven.model, [])
    # The kept calls' callbacks stored the outputs; the refused call's stored nothing new.
    assert driven.session.state.variables["label"] == PAD


def test_mantle_call_past_the_turn_output_budget_is_an_error_result(tmp_path: Path) -> None:
    model = ScriptedModel()
    session = agentscript.load(mantle_project(tmp_path)).session(model=model, limits=LIMITS)
    check_turn_budget(session, model, [{"tool": "activate_skill", "args": {"skill": "pages"}}])


def test_one_call_over_its_own_cap_still_names_max_output_chars() -> None:
    # The turn's budget (7,000) is larger than one call's cap: the call's own cap is what bit.
    fetch = {"fetch": lambda: {"label": "y" * 6_000}}
    driven = Driven(load_agent("outputs"), actions=fetch, limits=LIMITS)
    reply = driven.send("go", {"tool": "fetch"}, {"say": "done"})
    (call,) = steps(reply, "ACTION_STEP")
    assert "Limits.max_output_chars (5000 characters)" in call["error"]


def test_max_turn_output_chars_is_read_from_the_limits_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "agentscript.toml"
    config.write_text("[limits]\nmax_output_chars = 5000\nmax_turn_output_chars = 7000\n")
    monkeypatch.setenv("AGENTSCRIPT_CONFIG", str(config))
    agent = load_agent("outputs")
    assert agent.limits == LIMITS
    driven = Driven(agent, actions={"fetch": lambda: {"label": PAD}})
    assert driven.session.limits.max_turn_output_chars == 7_000
    fetch = {"tool": "fetch"}
    reply = driven.send("go", fetch, fetch, fetch, {"say": "done"})
    assert PAST in steps(reply, "ACTION_STEP")[2]["error"]
