"""Issue 13 item 6: post-write hooks ``run_after_setting_<entry>`` run after every write of
their entry (model, button, tool, step), are never offered to the model, and a result with
a non-null ``error`` rolls the write back and tells the model why."""

from __future__ import annotations

from pathlib import Path

import pytest
from mantle_helpers import LOST_CARD, clean, copy_bank, edit, load, run_text, said, steps

from agentscript.mantle import load_project
from agentscript.mantle.runtime import MantleAgent

HOOK = '''

from rasa.mantle.tools.result import ToolResult


async def run_after_setting_card_id(value: str, context: Any = None) -> ToolResult:
    """Only cards of the verified customer may be chosen."""
    mine = [c["card_id"] for c in CARDS.get(str(context.memory.get("customer_id")), [])]
    if value not in mine:
        return ToolResult(error=f"card {value} does not belong to the customer")
    return ToolResult(llm_response={"ok": True})


def pick_card_for_me(card_id: str, context: Any = None) -> dict[str, Any]:
    """Choose the card on the customer's behalf.

    Args:
        card_id: The card.
    """
    context.memory.set("card_id", card_id)
    return {"ok": True}
'''
TO_CARD = LOST_CARD


@pytest.fixture
def agent(tmp_path: Path) -> MantleAgent:
    project = copy_bank(tmp_path)
    tools = project / "skills" / "card_replace" / "tools.py"
    tools.write_text(tools.read_text() + HOOK)
    return load(project)


def hook_runs(playback: object, turn: int) -> list[dict[str, object]]:
    return [s for s in steps(playback, turn, "ACTION_STEP") if s["source"] == "hook"]  # type: ignore[arg-type]


def test_model_write_rejected_by_the_hook_is_rolled_back_and_the_model_told(
    agent: MantleAgent,
) -> None:
    playback = clean(
        run_text(
            agent,
            TO_CARD
            + """
  - user: "C-99"
    model:
      - tool: set_fields
        args: {card_id: C-99}
      - say: "C-99 is not one of your cards. C-11 or C-12?"
""",
        )
    )
    assert [h["name"] for h in hook_runs(playback, 2)] == ["run_after_setting_card_id"]
    assert playback.variables["card_replace.card_id"] is None
    refused = steps(playback, 2, "REFUSED_STEP")
    assert refused[0]["name"] == "set_fields"
    assert "does not belong to the customer" in refused[0]["reason"]
    rolled = [s for s in steps(playback, 2, "EVENT_STEP") if s["event"] == "write_rolled_back"]
    assert rolled[0]["keys"] == ["card_replace.card_id"]
    # The model read the reason in its tool result before answering.
    messages = steps(playback, 2, "LLM_STEP")[-1]["input"]["messages"]
    assert any("does not belong" in str(m.get("content")) for m in messages)


def test_a_write_the_hook_rejected_does_not_count_as_written(agent: MantleAgent) -> None:
    # The rollback restored the value but not the turn the entry was last written in, so an
    # ask_before_filling step took the rejected write for an answer.
    from agentscript.models.scripted import ScriptedModel, parse_move

    session = agent.session(
        model=ScriptedModel(),
        variables={"project.authenticated": True, "project.customer_id": "1001"},
    )
    moves = [
        {"tool": "activate_skill", "args": {"skill": "card_replace"}},
        {"tool": "set_fields", "args": {"reason": "lost"}},
        {"tool": "set_fields", "args": {"card_id": "C-99"}},
        {"say": "C-99 is not one of your cards."},
    ]
    assert isinstance(session.model, ScriptedModel)
    session.model.begin_turn([parse_move(m) for m in moves])
    reply = session.send("I lost my card C-99")
    assert reply.error is None, reply.error
    assert session.state.variables["card_replace.card_id"] is None
    written = session.state.extra["mantle"]["written"]
    assert "card_replace.reason" in written and "card_replace.card_id" not in written


def test_accepted_write_runs_the_hook_and_keeps_the_value(agent: MantleAgent) -> None:
    playback = clean(
        run_text(
            agent,
            TO_CARD + '  - user: "C-11"\n    model:\n      - tool: set_fields\n'
            "        args: {card_id: C-11}\n",
        )
    )
    assert hook_runs(playback, 2)[0]["output"] == {"ok": True}
    assert playback.variables["card_replace.card_id"] == "C-11"
    assert said(playback, 2, "collect")  # the block moved on to pick_shipping


def test_hooks_are_never_offered_to_the_model(agent: MantleAgent) -> None:
    playback = clean(run_text(agent, TO_CARD))
    for call in steps(playback, 1, "LLM_STEP"):
        assert "run_after_setting_card_id" not in [t["name"] for t in call["input"]["tools"]]


def test_button_write_runs_the_hook_and_a_rejection_skips_the_tap(tmp_path: Path) -> None:
    project = copy_bank(tmp_path)
    skill = project / "skills" / "card_replace"
    (skill / "tools.py").write_text((skill / "tools.py").read_text() + HOOK)
    # Only an offered button is applied: the card question offers the foreign card.
    edit(
        skill / "responses.yml",
        "    - text: Which card should we replace?\n",
        "    - text: Which card should we replace?\n"
        "      buttons:\n"
        "        - {title: C-21, payload: 'set:session.card_replace.card_id=C-21'}\n",
    )
    playback = clean(
        run_text(
            load(project),
            TO_CARD + '  - user: "set:session.card_replace.card_id=C-21"\n    model: []\n',
        )
    )
    assert [h["name"] for h in hook_runs(playback, 2)] == ["run_after_setting_card_id"]
    assert playback.variables["card_replace.card_id"] is None
    assert said(playback, 2, "button") == ["That option is no longer available."]


def test_tool_write_runs_the_hook(agent: MantleAgent) -> None:
    playback = clean(
        run_text(
            agent,
            TO_CARD
            + """
  - user: "just pick C-21 for me"
    model:
      - tool: pick_card_for_me
        args: {card_id: C-21}
      - say: "That card is not yours."
""",
        )
    )
    tool = next(s for s in steps(playback, 2, "ACTION_STEP") if s["name"] == "pick_card_for_me")
    assert tool["postVars"]["card_replace.card_id"] == "C-21"  # written, then the hook ran
    assert hook_runs(playback, 2)[0]["error"] is None
    assert "does not belong" in hook_runs(playback, 2)[0]["output"]["error"]
    assert playback.variables["card_replace.card_id"] is None


def test_a_hook_for_an_undeclared_entry_is_a_validate_error(tmp_path: Path) -> None:
    project = copy_bank(tmp_path)
    tools = project / "skills" / "card_replace" / "tools.py"
    tools.write_text(
        tools.read_text() + "\n\ndef run_after_setting_colour(value: str) -> dict:\n    return {}\n"
    )
    _, diagnostics = load_project(project)
    assert [d.code for d in diagnostics if d.is_error] == ["mantle-hook"]
    edit(tools, "run_after_setting_colour", "run_after_setting_shipping")
    _, diagnostics = load_project(project)
    assert not [d for d in diagnostics if d.is_error]
