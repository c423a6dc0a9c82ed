"""RESOLUTION_STEP.instructionLines in Mantle: the active skill's kept ``if:`` paragraphs are
pieces of their own with their condition (docs/trace.md), the rest pieces without a branch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mantle_helpers import EXAMPLE, SIGNED_IN, clean, copy_bank, edit, load, run_text, steps

LOST = 'session.card_replace.reason == "stolen" or session.card_replace.reason == "lost"'
CONVERSATION = (
    SIGNED_IN
    + """
turns:
  - user: I need a new card
    model:
      - tool: activate_skill
        args: {skill: card_replace}
      - say: Why?
  - user: I lost it
    model:
      - tool: set_fields
        args: {reason: lost}
      - say: Noted.
"""
)


def resolutions(project: Path, turn: int) -> list[dict[str, Any]]:
    return steps(clean(run_text(load(project), CONVERSATION)), turn, "RESOLUTION_STEP")


def test_the_kept_if_paragraph_is_a_piece_with_its_condition() -> None:
    before, after = resolutions(EXAMPLE, 2)
    # Before set_fields the reason is unknown: no `if:` paragraph holds, one plain piece.
    assert before["instructionLines"] == [
        {"text": before["instructions"], "line": None, "branches": []}
    ]
    lines = after["instructionLines"]
    assert "\n".join(line["text"] for line in lines) == after["instructions"]
    (kept,) = [line for line in lines if line["branches"]]
    assert kept["text"].startswith("The old card must be blocked first")
    assert kept["branches"] == [{"line": 30, "taken": "if", "condition": LOST, "index": None}]
    assert kept["line"] == 31
    assert not any("do not block it" in line["text"] for line in lines)  # the damaged case


def test_the_routing_prompt_has_no_lines() -> None:
    (routing, *_) = resolutions(EXAMPLE, 1)
    assert routing["node"] == "router" and routing["instructionLines"] is None


def test_adjacent_if_paragraphs_and_memory_values_join_back(tmp_path: Path) -> None:
    project = copy_bank(tmp_path)
    edit(
        project / "skills" / "card_replace" / "skill.md",
        "Once the reason is known,",
        'if: session.card_replace.reason == "lost"\nLost cards: ask @memory.project.customer_name'
        " where it was last seen.\n\nOnce the reason is known,",
    )
    lines = resolutions(project, 2)[1]["instructionLines"]
    kept = [line for line in lines if line["branches"]]
    assert [line["text"].split(":")[0] for line in kept] == [
        "The old card must be blocked first",
        "Lost cards",
    ]
    assert kept[1]["text"] == "Lost cards: ask Ada where it was last seen."
    assert kept[1]["branches"][0]["condition"] == 'session.card_replace.reason == "lost"'
    assert "\n".join(line["text"] for line in lines) == resolutions(project, 2)[1]["instructions"]
