"""``activate_skill`` on a skill that is not on the stack and not offered is refused with the
reason it is not offered (M1): disabled, run by the engine, or its ``requires`` does not hold.
The model reads that reason as the tool's error; nothing starts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mantle_helpers import Driver, make, reply_steps, start


def prose_skill(name: str, extra: str = "") -> str:
    return (
        f"---\nname: {name.upper()}\ndescription: Talk about {name}.\n{extra}---\n"
        f"Talk about {name}.\n"
    )


SKILLS = {
    "skills/a/skill.md": prose_skill("a"),
    "skills/off/skill.md": prose_skill("off", "disabled: true\n"),
    # A project entry nobody writes: a `requires` on it never holds (M6: unset fails closed).
    "memory.yml": "vip:\n  type: bool\n  description: Whether the customer is a VIP.\n",
    "skills/vip/skill.md": prose_skill("vip", "requires: session.project.vip\n"),
    "skills/default_completed/skill.md": prose_skill("default_completed"),
}


def refused_activation(run: Driver, skill: str) -> str:
    """Ask the model to start ``skill``; the reason it was refused (checked the same in the
    trace and in the result the model reads)."""
    reply = run.send(f"start {skill}", start(skill), {"say": "I cannot do that."})
    assert reply.error is None
    (refusal,) = reply_steps(reply, "REFUSED_STEP")
    assert (refusal["name"], refusal["source"]) == ("activate_skill", "llm")
    history = run.session.state.history
    results: list[Any] = [
        json.loads(m.content) for m in history if m.role == "tool" and m.name == "activate_skill"
    ]
    assert results == [{"error": refusal["reason"]}]
    assert run.stack() == []
    return str(refusal["reason"])


def test_M1_activating_a_disabled_skill_is_refused_as_disabled(tmp_path: Path) -> None:
    reason = refused_activation(Driver(make(tmp_path, SKILLS)), "off")
    assert reason == "skill 'off' is disabled"


def test_M1_activating_an_engine_run_skill_is_refused_as_run_by_the_engine(
    tmp_path: Path,
) -> None:
    reason = refused_activation(Driver(make(tmp_path, SKILLS)), "default_completed")
    assert reason == (
        "skill 'default_completed' is run by the engine; activate_skill cannot start it"
    )


def test_M1_activating_a_skill_whose_requires_does_not_hold_says_so(tmp_path: Path) -> None:
    reason = refused_activation(Driver(make(tmp_path, SKILLS)), "vip")
    assert reason == "skill 'vip' is not available now (its requires does not hold)"
