"""Issue 13 item 8: validate accepts exactly the documented condition grammar (no form
validates and then silently never holds), and the system prompt carries the documented
sections (persona, rules, skill glossary, current date and time, project memory)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from mantle_helpers import EXAMPLE, SIGNED_IN, clean, copy_bank, edit, load, run_text, steps

from agentscript.diagnostics import UNKNOWN_SPAN
from agentscript.mantle import load_project
from agentscript.mantle.conditions import make_condition
from agentscript.mantle.queries import holds


def problems(text: str) -> list[str]:
    _, diagnostics = make_condition(text, "f", UNKNOWN_SPAN)
    return [d.message for d in diagnostics if d.code == "mantle-condition-form"]


@pytest.mark.parametrize(
    "text",
    [
        "session.a.done",
        "not session.a.done",
        "session.a.done == True and session.a.x != None",
        "(session.a.x == \"a\" or session.a.x == 'b') and session.a.n >= 3",
        "1 < session.a.n < 10",
        "session.a.n > -1",
    ],
)
def test_documented_forms_validate(text: str) -> None:
    assert problems(text) == []


@pytest.mark.parametrize(
    ("text", "fix"),
    [
        ("session.a.done == true", "write True"),
        ("session.a.done == false", "write False"),
        ('session.a.x in ["a", "b"]', "write a disjunction"),
        ("session.a.x is None", "write =="),
        ("session.a.x is not None", "write !="),
        ("session.a.n + 1 > 2", "arithmetic"),
        ("len(session.a.x) > 2", "function call"),
        ('session.a.x == "a" if session.a.y else False', "conditional expression"),
    ],
)
def test_undocumented_forms_are_rejected_with_the_fix(text: str, fix: str) -> None:
    found = problems(text)
    assert found and any(fix in message for message in found), found


def test_strings_are_not_mistaken_for_lowercase_literals() -> None:
    assert problems('session.a.x == "true"') == []


def test_a_rejected_form_is_a_validate_error_in_a_project(tmp_path: Path) -> None:
    project = copy_bank(tmp_path)
    edit(
        project / "skills" / "card_replace" / "skill.md",
        "requires: session.project.authenticated",
        "requires: session.project.authenticated == true",
    )
    _, diagnostics = load_project(project)
    errors = [d for d in diagnostics if d.is_error]
    assert [d.code for d in errors] == ["mantle-condition-form"]
    assert errors[0].file.endswith("skill.md") and "write True" in errors[0].message


def test_every_accepted_form_evaluates_as_documented() -> None:
    # The documented forms that validate hold at run time when they should.
    memory = {"a.done": True, "a.x": "b", "a.n": 3}
    for text, expected in [
        ("session.a.done == True", True),
        ('session.a.x == "a" or session.a.x == "b"', True),
        ("1 < session.a.n < 10", True),
        ("session.a.missing == None", True),
        ("not session.a.done", False),
    ]:
        condition, diagnostics = make_condition(text, "f", UNKNOWN_SPAN)
        assert not [d for d in diagnostics if d.is_error]
        assert holds(condition, memory) is expected, text


def test_system_prompt_has_the_documented_sections() -> None:
    playback = clean(
        run_text(
            load(EXAMPLE), SIGNED_IN + 'turns:\n  - user: "hi"\n    model:\n      - say: "Hello"\n'
        )
    )
    system = steps(playback, 1, "LLM_STEP")[0]["input"]["system"]
    assert system.startswith("You are the assistant of Card Bank.")
    assert "Rules:\n- Verify the customer before discussing any account." in system
    assert "Skills of this agent:\n- authenticate (" in system
    assert "- card_replace (Card Replace): Replace a bank card" in system
    assert re.search(r"Current date and time: \w+day, \d{4}-\d{2}-\d{2} \d{2}:\d{2}", system)
    assert "project memory" in system and "- customer_name: Ada" in system
    # Order: deploy-stable first, then the date, then memory.
    assert system.index("Rules:") < system.index("Skills of") < system.index("Current date")
    assert system.index("Current date") < system.index("- customer_name: Ada")
