"""ACTION_STEP ``stubbed``: the trace says whether a stub (a conversation file's or a test's)
answered a call, so a trace read later tells a stubbed run from a real one (``agentscript
test`` and the playground read it). False for every call code answered: the agent's own target,
an ``[actions.targets]`` mapping, a ``session(actions=...)`` callable."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import agentscript
from agentscript.actions import StubBook
from agentscript.chat import describe_turn
from agentscript.conversation import parse_conversation
from agentscript.engine.session import Reply
from agentscript.models.scripted import Move, ScriptedModel
from agentscript.playback import play
from fakes.agent_texts import orders_agent
from fakes.card_bank import card_bank_balance_conversation

REPO = Path(__file__).resolve().parents[1]


def _agent(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "backend.py").write_text(
        "def lookup(order_ID):\n    return {'status': 'shipped'}\n", encoding="utf-8"
    )
    path = folder / "orders.agent"
    path.write_text(orders_agent("python://backend:lookup", outputs=["status"]), encoding="utf-8")
    return path


def _step(reply: Reply) -> dict[str, Any]:
    steps: list[dict[str, Any]] = reply.trace["planTrace"]["steps"]
    return next(s for s in steps if s["type"] == "ACTION_STEP")


def _one_call(path: Path, **session: Any) -> dict[str, Any]:
    model = ScriptedModel([Move(calls=[("lookup", {})]), Move(text="Done.")])
    return _step(agentscript.load(path).session(model=model, **session).send("order 7?"))


def test_a_stubbed_call_says_so_and_one_code_answered_does_not(tmp_path: Path) -> None:
    path = _agent(tmp_path / "a")
    stubs = StubBook.from_data({"lookup": {"outputs": {"status": "stubbed"}}})
    stubbed = _one_call(path, stubs=stubs)
    assert stubbed["stubbed"] is True and stubbed["output"] == {"status": "stubbed"}
    ran = _one_call(path)
    assert ran["stubbed"] is False and ran["output"] == {"status": "shipped"}
    called = _one_call(path, actions={"lookup": lambda order_ID: {"status": "callable"}})
    assert called["stubbed"] is False and called["output"] == {"status": "callable"}


def test_a_stub_that_fails_is_still_a_stub(tmp_path: Path) -> None:
    stubs = StubBook.from_data({"lookup": {"error": "backend down"}})
    step = _one_call(_agent(tmp_path / "a"), stubs=stubs)
    assert step["stubbed"] is True and step["error"] == "backend down"


def test_a_mantle_tool_stub_says_so(tmp_path: Path) -> None:
    project = tmp_path / "card_bank"
    shutil.copytree(REPO / "examples" / "card_bank", project)
    conversation = parse_conversation(card_bank_balance_conversation())
    playback = play(agentscript.load(project), conversation)
    calls = {
        s["name"]: s["stubbed"]
        for turn in playback.turns
        for s in turn.reply.trace["planTrace"]["steps"]
        if s["type"] == "ACTION_STEP" and s["name"] in {"get_balance", "list_cards"}
    }
    assert calls == {"get_balance": True, "list_cards": False}


def test_chat_show_trace_says_which_code_answered_a_call(tmp_path: Path) -> None:
    path = _agent(tmp_path / "a")
    mapped = tmp_path / "b" / "orders.agent"
    mapped.parent.mkdir()
    mapped.write_text(orders_agent("flow://Lookup", outputs=["status"]), encoding="utf-8")
    shutil.copy(tmp_path / "a" / "backend.py", mapped.parent)
    (mapped.parent / "agentscript.toml").write_text(
        '[actions.targets]\n"flow://Lookup" = "python://backend:lookup"\n', encoding="utf-8"
    )

    def action_line(agent: Path, **session: Any) -> str:
        model = ScriptedModel([Move(calls=[("lookup", {})]), Move(text="Done.")])
        reply = agentscript.load(agent).session(model=model, **session).send("order 7?")
        (line,) = [x for x in describe_turn(reply, {}, frozenset({"trace"})) if "action " in x]
        return line

    stubs = StubBook.from_data({"lookup": {"outputs": {"status": "stubbed"}}})
    assert (
        action_line(path, stubs=stubs)
        == 'action lookup({"order_ID": "7"}) [stub] -> {"status": "stubbed"}'
    )
    assert action_line(path) == 'action lookup({"order_ID": "7"}) -> {"status": "shipped"}'
    assert action_line(mapped) == (
        'action lookup({"order_ID": "7"}) [ran python://backend:lookup] -> {"status": "shipped"}'
    )
