"""Mantle sessions on the engine API: load, memory seeding, to_json/restore, CLI, corpus."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import agentscript
from agentscript.cli import main
from agentscript.conversation import load_conversation, parse_conversation
from agentscript.mantle import offered_skills
from agentscript.mantle.runtime import MantleAgent, load_mantle_agent
from agentscript.playback import play

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "card_bank"
CORPUS = ROOT.parent / "shared" / "conformance" / "mantle"
PROJECTS = sorted(p for p in CORPUS.iterdir() if (p / "skills").is_dir()) if CORPUS.is_dir() else []


@pytest.fixture(scope="module")
def agent() -> MantleAgent:
    loaded = agentscript.load(EXAMPLE)
    assert isinstance(loaded, MantleAgent)
    return loaded


def test_load_accepts_the_folder_or_its_agent_yml(agent: MantleAgent) -> None:
    assert agent.name == "card-bank"
    assert isinstance(agentscript.load(EXAMPLE / "agent.yml"), MantleAgent)


def test_initial_variables_are_flat_qualified_names(agent: MantleAgent) -> None:
    values = agent.initial_variables(
        {"project.authenticated": "true", "card_replace.reason": "Lost"}
    )
    assert values["project.authenticated"] is True
    assert values["card_replace.reason"] == "lost"
    assert values["authenticate.attempts"] is None
    with pytest.raises(ValueError, match="unknown memory entry"):
        agent.initial_variables({"authenticated": True})
    with pytest.raises(ValueError, match="not one of"):
        agent.initial_variables({"card_replace.shipping": "drone"})
    with pytest.raises(ValueError, match="expected a float"):
        agent.initial_variables({"check_balance.balance": "lots"})


def test_welcome_is_empty_without_conversation_welcome(agent: MantleAgent) -> None:
    assert agent.welcome({}) == ""


def test_to_json_and_restore_mid_block(agent: MantleAgent) -> None:
    conversation = load_conversation(EXAMPLE / "conversations" / "rule1_interrupt_resume.yml")
    model = agentscript.ScriptedModel()
    session = agent.session(model=model, variables=conversation.variables)
    model.begin_turn(conversation.turns[0].moves)
    session.send(conversation.turns[0].user)
    saved = json.dumps(session.to_json())
    restored = agent.restore(saved, model=model)
    assert restored.state.extra["mantle"]["stack"][0]["blocks"][0]["step"] == "pick_card"
    model.begin_turn(
        parse_conversation(
            "turns:\n  - user: C-12\n    model:\n      - tool: set_fields\n        args: {card_id: C-12}\n"
            "      - say: Standard or express?\n"
        )
        .turns[0]
        .moves
    )
    reply = restored.send("C-12")
    assert reply.error is None and reply.variables["card_replace.card_id"] == "C-12"
    steps = reply.trace["planTrace"]["steps"]
    assert [(s["step"], s["next"]) for s in steps if s["type"] == "BLOCK_STEP"] == [
        ("pick_card", "pick_shipping")
    ]


def test_restore_keeps_the_spoken_question_and_the_resume_offer(agent: MantleAgent) -> None:
    """Issue 13 state in a saved session (the collect step whose question was said, a resume
    offer waiting for yes/no) passes the restore check and works after it."""
    conversation = load_conversation(EXAMPLE / "conversations" / "rule1_interrupt_resume.yml")
    model = agentscript.ScriptedModel()
    session = agent.session(model=model, variables=conversation.variables)
    for turn in conversation.turns[:2]:
        model.begin_turn(turn.moves)
        session.send(turn.user)
    saved = session.to_json()
    assert saved["extra"]["mantle"]["offer"] == {"skill": "card_replace"}
    assert saved["extra"]["mantle"]["stack"][0]["blocks"][0]["spoken"] == "pick_card"
    restored = agent.restore(json.dumps(saved), model=model)
    model.begin_turn([])
    reply = restored.send("yes")  # the engine resumes card_replace without the model
    assert reply.error is None and reply.text == "Which card should we replace?"
    entry = restored.state.extra["mantle"]["stack"][0]["blocks"][0]
    assert entry["spoken"] == "pick_card"
    again = agent.restore(json.dumps(restored.to_json()), model=model)
    assert again.state.extra["mantle"]["stack"][0]["blocks"][0]["spoken"] == "pick_card"


def test_restore_with_a_pending_confirmation(agent: MantleAgent) -> None:
    conversation = load_conversation(EXAMPLE / "conversations" / "rule7_early_values.yml")
    model = agentscript.ScriptedModel()
    session = agent.session(model=model, variables=conversation.variables)
    model.begin_turn(conversation.turns[0].moves)
    session.send(conversation.turns[0].user)
    restored = agent.restore(session.to_json(), model=model)
    model.begin_turn(conversation.turns[1].moves)
    reply = restored.send("yes")
    assert reply.actions == ["order_replacement"]
    assert reply.variables["card_replace.replacement_ordered"] is True


def test_cli_run_json_and_trace_files(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        main,
        [
            "run",
            str(EXAMPLE),
            "--conversation",
            str(EXAMPLE / "conversations" / "rule7_early_values.yml"),
            "--json",
            "--trace-dir",
            str(tmp_path),
        ],
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["variables"]["card_replace.shipping"] == "express"
    assert data["turns"][0]["node"] == "card_replace"
    trace = json.loads(Path(data["turns"][0]["trace_file"]).read_text())
    types = {s["type"] for s in trace["planTrace"]["steps"]}
    assert {"SKILL_STEP", "BLOCK_STEP", "ACTION_STEP", "LLM_STEP", "EVENT_STEP"} <= types


@pytest.mark.parametrize("project", PROJECTS, ids=lambda p: p.name.split("__")[-1])
def test_conformance_project_runs_one_turn(project: Path) -> None:
    agent = load_mantle_agent(project, stub_missing_tools=True)
    skills = offered_skills(agent.project, agent.initial_variables({}))
    assert skills
    conversation = parse_conversation(
        f"""
turns:
  - user: "Hello"
    model:
      - tool: activate_skill
        args: {{skill: {skills[0].id}}}
      - say: "How can I help?"
"""
    )
    playback = play(agent, conversation)
    reply = playback.turns[0].reply
    assert reply.error is None and not playback.failed
    steps = reply.trace["planTrace"]["steps"]
    assert ("activated", skills[0].id) in [
        (s["event"], s["skill"]) for s in steps if s["type"] == "SKILL_STEP"
    ]
