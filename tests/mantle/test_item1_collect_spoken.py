"""Issue 13 item 1: collect steps are spoken by the framework, verbatim; the model only
extracts the value. Driven by conversation text through the engine, asserting on traces."""

from __future__ import annotations

from pathlib import Path

from mantle_helpers import LOST_CARD, clean, copy_bank, edit, load, run_text, said, steps

START = LOST_CARD


def test_collect_question_is_said_verbatim_with_variant_and_interpolation(tmp_path: Path) -> None:
    project = copy_bank(tmp_path)
    edit(
        project / "skills" / "card_replace" / "responses.yml",
        "    - text: Which card should we replace?",
        "    - text: Which card was {reason}, {session.project.customer_name}?\n"
        '      condition: session.card_replace.reason == "lost"\n'
        "    - text: Which card should we replace?",
    )
    playback = clean(run_text(load(project), START))
    asked = [s for s in steps(playback, 1, "RESPONSE_STEP") if s["kind"] == "collect"]
    assert [(s["text"], s["step"], s["response"]) for s in asked] == [
        ("Which card was lost, Ada?", "pick_card", "utter_card_replace_ask_card")
    ]
    # The turn ended on the question: no model call after the block reached pick_card.
    kinds = [s["type"] for s in steps(playback, 1)]
    assert "LLM_STEP" not in kinds[kinds.index("BLOCK_STEP") :]
    assert playback.turns[0].reply.messages[-1] == "Which card was lost, Ada?"


def test_next_message_goes_to_the_model_to_extract_then_the_next_question_is_said() -> None:
    agent = load(Path(__file__).resolve().parents[2] / "examples" / "card_bank")
    playback = clean(
        run_text(
            agent,
            START
            + """
  - user: "the debit one, C-11"
    model:
      - tool: set_fields
        args: {card_id: C-11}
""",
        )
    )
    instructions = steps(playback, 2, "LLM_STEP")[0]["input"]["instructions"]
    assert 'The user has been asked: "Which card should we replace?"' in instructions
    assert said(playback, 2, "collect") == [
        "Standard delivery is free and takes 5 days; express costs 5.00 and takes 1 day. Which one?"
    ]
    assert playback.variables["card_replace.card_id"] == "C-11"


def test_a_digression_does_not_repeat_the_question() -> None:
    agent = load(Path(__file__).resolve().parents[2] / "examples" / "card_bank")
    playback = clean(
        run_text(
            agent,
            START
            + """
  - user: "how long does shipping take?"
    model:
      - say: "Standard takes 5 days, express 1 day."
""",
        )
    )
    assert said(playback, 2) == ["Standard takes 5 days, express 1 day."]


def test_without_utterance_the_utter_ask_entry_response_is_the_question(tmp_path: Path) -> None:
    project = copy_bank(tmp_path)
    skill = project / "skills" / "card_replace"
    edit(skill / "skill.md", "    utterance: utter_card_replace_ask_card\n", "")
    edit(
        skill / "responses.yml",
        "responses:\n",
        "responses:\n  utter_ask_card_id:\n    - text: Which of your cards is it?\n",
    )
    playback = clean(run_text(load(project), START))
    asked = [s for s in steps(playback, 1, "RESPONSE_STEP") if s["kind"] == "collect"]
    assert [(s["text"], s["response"]) for s in asked] == [
        ("Which of your cards is it?", "utter_ask_card_id")
    ]


def test_without_any_question_response_the_model_asks(tmp_path: Path) -> None:
    project = copy_bank(tmp_path)
    edit(
        project / "skills" / "card_replace" / "skill.md",
        "    utterance: utter_card_replace_ask_card\n",
        "",
    )
    playback = clean(run_text(load(project), START + '      - say: "Which card, C-11 or C-12?"\n'))
    assert said(playback, 1, "collect") == []
    assert said(playback, 1, "llm") == ["Which card, C-11 or C-12?"]
    instructions = steps(playback, 1, "LLM_STEP")[-1]["input"]["instructions"]
    assert "collect card_id" in instructions and "Ask the user for it." in instructions
