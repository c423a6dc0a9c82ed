"""Issue 9 item 5: Mantle `call:`/`link:` cycles are validation errors, and a session that
loops anyway (a limit hit at run time) ends the turn with a clear error and stays usable."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from agentscript.cli import main
from agentscript.mantle import load_project
from agentscript.mantle.runtime import MantleAgent
from agentscript.models.scripted import ScriptedModel, parse_move

AGENT = "agent:\n  persona: You help.\n"


def block_skill(skill_id: str, steps: str, block: str = "main") -> str:
    return (
        f"---\nname: {skill_id}\ndescription: Skill {skill_id}.\n---\n"
        f":::ordered_block id={block}\nsteps:\n{steps}:::\n"
    )


def two_block_skill(skill_id: str, first: str, second: str) -> str:
    return (
        f"---\nname: {skill_id}\ndescription: Skill {skill_id}.\n---\n"
        f"Run @block.one or @block.two.\n\n"
        f":::ordered_block id=one\nsteps:\n{first}:::\n\n"
        f":::ordered_block id=two\nsteps:\n{second}:::\n"
    )


def project(tmp_path: Path, skills: dict[str, str]) -> Path:
    (tmp_path / "agent.yml").write_text(AGENT)
    for skill_id, text in skills.items():
        folder = tmp_path / "skills" / skill_id
        folder.mkdir(parents=True)
        (folder / "skill.md").write_text(text)
    return tmp_path


CYCLES = {
    "a calls b calls a": {
        "a": block_skill("a", "  - id: go\n    call: b\n"),
        "b": block_skill("b", "  - id: back\n    call: a\n"),
    },
    "a calls itself": {"a": block_skill("a", "  - id: again\n    call: a\n")},
    "a links to itself": {"a": block_skill("a", "  - id: again\n    link: a\n")},
    "two blocks calling each other": {
        "a": two_block_skill(
            "a", "  - id: to_two\n    call: two\n", "  - id: to_one\n    call: one\n"
        ),
    },
    "two blocks linking to each other": {
        "a": two_block_skill(
            "a", "  - id: to_two\n    link: two\n", "  - id: to_one\n    link: one\n"
        ),
    },
}


@pytest.mark.parametrize("skills", list(CYCLES.values()), ids=list(CYCLES))
def test_validate_reports_call_and_link_cycles(tmp_path: Path, skills: dict[str, str]) -> None:
    root = project(tmp_path, skills)
    _, diagnostics = load_project(root)
    cycles = [d for d in diagnostics if d.code == "mantle-call-cycle"]
    assert len(cycles) == 1, [d.format() for d in diagnostics]
    assert cycles[0].is_error and cycles[0].file and cycles[0].file.endswith("skill.md")
    assert "loops without the model or the user" in cycles[0].message
    result = CliRunner().invoke(main, ["validate", str(root)])
    assert result.exit_code == 1 and "error[mantle-call-cycle]" in result.output


def test_a_chain_without_a_cycle_is_fine(tmp_path: Path) -> None:
    root = project(
        tmp_path,
        {
            "a": block_skill("a", "  - id: go\n    call: b\n"),
            "b": block_skill("b", "  - id: stop\n    noop: true\n"),
        },
    )
    _, diagnostics = load_project(root)
    assert not [d for d in diagnostics if d.code == "mantle-call-cycle"]


def test_examples_have_no_call_cycles() -> None:
    examples = Path(__file__).parents[2] / "examples"
    for folder in examples.iterdir():
        if (folder / "agent.yml").exists():
            _, diagnostics = load_project(folder)
            assert not [d for d in diagnostics if d.code == "mantle-call-cycle"], folder


def test_a_looping_session_ends_the_turn_with_an_error_and_stays_usable(tmp_path: Path) -> None:
    """A cycle reached at run time (loaded with the error ignored): the turn stops at the
    deterministic-step limit, the skills are cancelled, and the next turn runs normally. (A
    skill linking to itself starts over each time; "a calls b calls a" no longer loops: b's
    call to a, already on the stack, waits.)"""
    root = project(tmp_path, CYCLES["a links to itself"])
    loaded, _ = load_project(root)
    assert loaded is not None
    agent = MantleAgent(loaded)
    model = ScriptedModel()
    session = agent.session(model=model)
    model.begin_turn([parse_move({"tool": "activate_skill", "args": {"skill": "a"}})])
    reply = session.send("start a")
    assert reply.error is not None
    assert "Limits.max_deterministic_steps" in reply.error and "cycle" in reply.error
    cancelled = [
        s
        for s in reply.trace["planTrace"]["steps"]
        if s["type"] == "SKILL_STEP" and s["event"] == "cancelled"
    ]
    assert cancelled
    assert session.state.extra["mantle"]["stack"] == []
    model.begin_turn([parse_move({"say": "How can I help?"})])
    second = session.send("hello")
    assert second.error is None and second.text == "How can I help?"
