"""A Mantle turn fails by the one history rule of both formats, whatever raised in it (S12)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mantle_helpers import Driver, make, start

SKILLS = {"skills/a/skill.md": "---\nname: A\ndescription: Talk about a.\n---\nTalk about a.\n"}


def test_S12_a_failing_step_observer_fails_a_mantle_turn(tmp_path: Path) -> None:
    run = Driver(make(tmp_path, SKILLS))
    seen: list[str] = []

    def observe(step: dict[str, Any]) -> None:
        seen.append(step["type"])
        if step["type"] == "SKILL_STEP":
            raise ValueError("observer broke")

    run.session.on_step = observe
    reply = run.send("about a", start("a"), {"say": "Sure."})
    assert reply.error == "internal error: ValueError: observer broke"
    assert reply.text == "Sorry, something went wrong."
    # The history is closed as after any failed turn: the next turn starts from a clean state.
    assert run.session.state.history[-1].role == "assistant"
    assert seen.count("SKILL_STEP") == 1  # not called again in the turn once it raised
    run.session.on_step = None
    again = run.send("still there?", {"say": "Yes."})
    assert again.error is None
    assert again.text == "Yes."
