"""Issue 13 item 5: responses completely: conditioned variants, buttons (listed and
tool-supplied), ``set:`` payloads that write memory without the model, metadata, buttons in
the turn JSON and ``Reply.buttons``, and load-time checks."""

from __future__ import annotations

from pathlib import Path

from mantle_helpers import EXAMPLE, SIGNED_IN, clean, copy_bank, edit, load, run_text, said, steps

from agentscript.conversation import load_conversation
from agentscript.diagnostics import Severity
from agentscript.mantle import load_project
from agentscript.playback import play

TO_SHIPPING = (
    SIGNED_IN
    + """
turns:
  - user: "I lost my card C-11"
    model:
      - tool: activate_skill
        args: {skill: card_replace}
      - tool: set_fields
        args: {reason: lost, card_id: C-11}
      - tool: activate_skill
        args: {skill: card_replace, block: order_card}
"""
)
BUTTONS = [
    {"title": "Standard (free, 5 days)", "payload": "set:session.card_replace.shipping=standard"},
    {"title": "Express (5.00, 1 day)", "payload": "set:session.card_replace.shipping=express"},
]


def test_buttons_are_in_the_trace_the_reply_and_the_turn_json() -> None:
    playback = clean(
        play(load(EXAMPLE), load_conversation(EXAMPLE / "conversations" / "buttons_set_memory.yml"))
    )
    asked = next(s for s in steps(playback, 1, "RESPONSE_STEP") if s["kind"] == "collect")
    assert asked["buttons"] == BUTTONS
    assert playback.turns[0].reply.buttons == BUTTONS
    assert playback.to_json()["turns"][0]["buttons"] == BUTTONS


def test_set_payload_writes_memory_without_the_model() -> None:
    playback = clean(
        play(load(EXAMPLE), load_conversation(EXAMPLE / "conversations" / "buttons_set_memory.yml"))
    )
    assert steps(playback, 2, "LLM_STEP") == []
    write = next(s for s in steps(playback, 2, "ACTION_STEP") if s["source"] == "button")
    assert write["input"] == {"entry": "card_replace.shipping", "value": "express"}
    assert write["error"] is None and write["postVars"]["card_replace.shipping"] == "express"
    assert said(playback, 2) == ["Order an express replacement for card C-11 for 5.00?"]


def test_an_invalid_tap_is_skipped_with_the_notice_and_changes_nothing() -> None:
    playback = clean(
        run_text(
            load(EXAMPLE),
            TO_SHIPPING
            + '  - user: "set:session.card_replace.shipping=overnight"\n    model: []\n',
        )
    )
    write = next(s for s in steps(playback, 2, "ACTION_STEP") if s["source"] == "button")
    assert "overnight" in write["error"]
    assert playback.variables["card_replace.shipping"] is None
    assert said(playback, 2, "button") == ["That option is no longer available."]
    assert steps(playback, 2, "LLM_STEP") == []


def test_a_tap_for_a_skill_not_on_the_stack_is_skipped() -> None:
    playback = clean(
        run_text(
            load(EXAMPLE),
            SIGNED_IN
            + 'turns:\n  - user: "set:session.card_replace.shipping=express"\n    model: []\n',
        )
    )
    write = next(s for s in steps(playback, 1, "ACTION_STEP") if s["source"] == "button")
    assert "not running" in write["error"]


def test_conditioned_variant_with_metadata_and_tool_supplied_buttons(tmp_path: Path) -> None:
    project = copy_bank(tmp_path)
    skill = project / "skills" / "card_replace"
    edit(
        skill / "responses.yml",
        "    - text: Which card should we replace?\n",
        "    - text: Which of your cards was lost?\n"
        '      condition: session.card_replace.reason == "lost"\n'
        "      metadata: {rephrase: false, channel_hint: cards}\n"
        "      buttons: {source: card_buttons}\n"
        "    - text: Which card should we replace?\n",
    )
    (skill / "tools.py").write_text(
        (skill / "tools.py").read_text()
        + '\n\ndef card_buttons() -> list:\n    """Buttons for the customer\'s cards."""\n'
        '    return [{"title": "Debit 1111", "payload": "set:session.card_replace.card_id=C-11"}]\n'
    )
    conversation = TO_SHIPPING.replace("{reason: lost, card_id: C-11}", "{reason: lost}")
    playback = clean(run_text(load(project), conversation))
    asked = next(s for s in steps(playback, 1, "RESPONSE_STEP") if s["kind"] == "collect")
    assert asked["text"] == "Which of your cards was lost?"
    assert asked["metadata"] == {"rephrase": False, "channel_hint": "cards"}
    expected = [{"title": "Debit 1111", "payload": "set:session.card_replace.card_id=C-11"}]
    assert asked["buttons"] == expected and playback.turns[0].reply.buttons == expected
    source = next(s for s in steps(playback, 1, "ACTION_STEP") if s["source"] == "buttons")
    assert source["name"] == "card_buttons"


def test_bad_buttons_are_validate_errors(tmp_path: Path) -> None:
    project = copy_bank(tmp_path)
    edit(
        project / "responses.yml",
        "responses:\n",
        "responses:\n  utter_bad:\n    - text: Pick one\n      buttons:\n"
        "        - {title: A, payload: 'set:card_replace.shipping=express'}\n"
        "        - {title: B, payload: 'set:session.card_replace.nothing=1'}\n"
        "        - {title: C, payload: 'set:session.card_replace.shipping=overnight'}\n"
        "        - {title: D, payload: '/restart'}\n"
        "        - {title: E, payload: '  set:session.card_replace.gone=1'}\n"
        "  utter_bad_source:\n    - text: Pick\n      buttons: {source: no_such_tool}\n",
    )
    _, diagnostics = load_project(project)
    problems = sorted(d.message for d in diagnostics if d.code == "mantle-button")
    assert len(problems) == 5
    assert any("must be 'set:session." in m for m in problems)
    assert any("card_replace.nothing' is not a declared" in m for m in problems)
    # Spaces before it do not make it an ordinary payload: a tap on it is read as set: too.
    assert any("button 'E': 'card_replace.gone' is not a declared" in m for m in problems)
    assert any("overnight" in m for m in problems)
    assert any("no_such_tool" in m for m in problems)


def test_a_listed_button_on_a_private_entry_is_a_validate_error(tmp_path: Path) -> None:
    project = copy_bank(tmp_path)
    edit(
        project / "responses.yml",
        "responses:\n",
        "responses:\n  utter_pick:\n    - text: Pick one\n      buttons:\n"
        "        - {title: Skip, payload: 'set:session.card_replace.card_blocked=true'}\n"
        "        - {title: Odd, payload: 'set:session.card_replace.card_blocked=maybe'}\n"
        "        - {title: Express, payload: 'set:session.card_replace.shipping=express'}\n",
    )
    _, diagnostics = load_project(project)
    private = [d for d in diagnostics if d.code == "mantle-button-private-entry"]
    assert [d.message.split("'")[1] for d in private] == ["Skip", "Odd"]
    assert all(d.severity is Severity.ERROR for d in private)
    assert all(
        "'card_replace.card_blocked' is a private memory entry" in d.message for d in private
    )
    assert all(d.file is not None and d.file.endswith("responses.yml") for d in private)
    # the public entry (shipping) is fine; the private one is not also a mantle-button
    assert not [d for d in diagnostics if d.code == "mantle-button"]


def test_the_example_and_the_conformance_projects_have_no_private_button() -> None:
    corpus = Path("/work/shared/conformance/mantle")
    roots = [
        EXAMPLE,
        *(sorted(p for p in corpus.iterdir() if p.is_dir()) if corpus.is_dir() else []),
    ]
    for root in roots:
        _, diagnostics = load_project(root, stub_missing_tools=True)
        assert not [d for d in diagnostics if d.code.startswith("mantle-button")], root
