"""Issue 13 item 2: private memory is private at run time, in the memory API itself: a tool
of skill b cannot read or write skill a's private entry through a name built at run time,
and a response delivered for b cannot show it. Each refusal fails closed and is traced."""

from __future__ import annotations

from pathlib import Path

import pytest
from mantle_helpers import clean, load, run_text, said, steps

FILES = {
    "agent.yml": "agent:\n  id: priv\n  persona: You help.\n",
    "skills/a/skill.md": "---\nname: A\ndescription: Skill a keeps a private size.\n---\n"
    "Ask for the size.\n",
    "skills/a/memory.yml": "schema:\n  private:\n    size:\n      type: int\n"
    "  public:\n    colour:\n      type: text\n",
    "skills/a/tools.py": 'def own(context) -> dict:\n    """Read the own private size."""\n'
    '    return {"size": context.memory.get("size")}\n',
    "skills/b/skill.md": "---\nname: B\ndescription: Skill b reads a's values.\n"
    "tool_constraints:\n  - peek:\n      on_success: utter_report\n---\nUse peek and poke.\n",
    "skills/b/tools.py": 'def peek(context) -> dict:\n    """Read a\'s entries by built names."""\n'
    '    ns = "a"\n'
    '    return {"size": context.memory.get(ns + "." + "size"),\n'
    '            "colour": context.memory.get(ns + "." + "colour")}\n\n\n'
    'def poke(context) -> dict:\n    """Write a\'s private size by a built name."""\n'
    '    context.memory.set("a" + "." + "size", 9)\n    return {"ok": True}\n',
    "responses.yml": 'responses:\n  utter_report:\n    - text: "Size: {session.a.size}, '
    'colour: {session.a.colour}"\n',
}
SEED = """
variables:
  a.size: 5
  a.colour: red
turns:
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    for name, text in FILES.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_private_entry_read_by_another_skills_tool_reads_as_unset_and_is_traced(
    project: Path,
) -> None:
    playback = clean(
        run_text(
            load(project),
            SEED
            + """
  - user: "peek"
    model:
      - tool: activate_skill
        args: {skill: b}
      - tool: peek
      - say: "done"
""",
        )
    )
    peek = next(s for s in steps(playback, 1, "ACTION_STEP") if s["name"] == "peek")
    assert peek["output"] == {"size": None, "colour": "red"}  # public colour is readable
    refused = [s for s in steps(playback, 1, "REFUSED_STEP") if s["source"] == "memory"]
    tool_read = [(s["name"], s["access"], s["via"], s["reader"]) for s in refused]
    assert ("a.size", "read", "tool", "b") in tool_read


def test_memory_refusals_are_not_listed_as_refused_tool_calls_in_the_turn_json(
    project: Path,
) -> None:
    playback = clean(
        run_text(
            load(project),
            SEED
            + """
  - user: "peek"
    model:
      - tool: activate_skill
        args: {skill: b}
      - tool: peek
      - say: "done"
""",
        )
    )
    assert [s for s in steps(playback, 1, "REFUSED_STEP") if s["source"] == "memory"]
    turn = playback.to_json()["turns"][0]
    assert "refused" not in turn  # peek itself ran; a.size was a refused read, not a call


def test_private_entry_in_a_response_stays_as_written_and_is_traced(project: Path) -> None:
    playback = clean(
        run_text(
            load(project),
            SEED
            + """
  - user: "peek"
    model:
      - tool: activate_skill
        args: {skill: b}
      - tool: peek
      - say: "done"
""",
        )
    )
    assert said(playback, 1, "utter") == ["Size: {session.a.size}, colour: red"]
    refused = [s for s in steps(playback, 1, "REFUSED_STEP") if s["source"] == "memory"]
    assert [(s["name"], s["via"], s["response"]) for s in refused if s["via"] == "response"] == [
        ("a.size", "response", "utter_report")
    ]


def test_private_entry_write_by_another_skills_tool_fails_and_memory_is_unchanged(
    project: Path,
) -> None:
    playback = clean(
        run_text(
            load(project),
            SEED
            + """
  - user: "poke"
    model:
      - tool: activate_skill
        args: {skill: b}
      - tool: poke
      - say: "could not"
""",
        )
    )
    poke = next(s for s in steps(playback, 1, "ACTION_STEP") if s["name"] == "poke")
    assert poke["error"] and "private to skill 'a'" in poke["error"]
    assert playback.variables["a.size"] == 5
    refused = [s for s in steps(playback, 1, "REFUSED_STEP") if s["source"] == "memory"]
    assert [(s["name"], s["access"]) for s in refused] == [("a.size", "write")]


def test_the_owning_skill_reads_its_private_entry(project: Path) -> None:
    playback = clean(
        run_text(
            load(project),
            SEED
            + """
  - user: "own"
    model:
      - tool: activate_skill
        args: {skill: a}
      - tool: own
      - say: "5"
""",
        )
    )
    own = next(s for s in steps(playback, 1, "ACTION_STEP") if s["name"] == "own")
    assert own["output"] == {"size": 5}
    assert [s for s in steps(playback, 1, "REFUSED_STEP") if s["source"] == "memory"] == []
