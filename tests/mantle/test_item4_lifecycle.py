"""Issue 13 item 4: lifecycle skills run by the engine (session start, completion follow-up,
resume offer, unsupported requests, before_end), each overridable and traced as SKILL_STEP
events."""

from __future__ import annotations

from pathlib import Path

from mantle_helpers import (
    EXAMPLE,
    LOST_CARD,
    SIGNED_IN,
    clean,
    copy_bank,
    edit,
    load,
    run_text,
    said,
    skill_events,
    steps,
)

INTERRUPT = (
    LOST_CARD
    + """
  - user: "Wait, first tell me my balance."
    model:
      - tool: activate_skill
        args: {skill: check_balance}
      - tool: get_balance
      - tool: complete_skill
      - say: "Your balance is 1250.75 EUR."
"""
)


def test_builtin_session_start_runs_on_the_first_turn_and_says_nothing() -> None:
    playback = clean(
        run_text(
            load(EXAMPLE), SIGNED_IN + 'turns:\n  - user: "hi"\n    model:\n      - say: "Hello"\n'
        )
    )
    assert skill_events(playback, 1)[:2] == [
        ("activated", "default_session_start"),
        ("completed", "default_session_start"),
    ]
    assert said(playback, 1) == ["Hello"]


def test_session_start_message_runs_the_override_without_the_model(tmp_path: Path) -> None:
    project = copy_bank(tmp_path)
    start = project / "skills" / "default_session_start"
    start.mkdir()
    (start / "skill.md").write_text(
        "---\nname: Start\ndescription: Greets.\n---\n"
        ":::ordered_block id=main\nsteps:\n  - id: greet\n    action: utter_welcome_back\n:::\n"
    )
    playback = clean(
        run_text(
            load(project),
            SIGNED_IN
            + 'turns:\n  - user: "/session_start"\n    model: []\n'
            + '  - user: "hi"\n    model:\n      - say: "How can I help?"\n',
        )
    )
    assert steps(playback, 1, "LLM_STEP") == []
    assert said(playback, 1) == ["Welcome back, Ada."]
    assert skill_events(playback, 1) == [
        ("activated", "default_session_start"),
        ("completed", "default_session_start"),
    ]
    # An override without a routing: key stays engine-managed: never offered for routing.
    offered = steps(playback, 2, "LLM_STEP")[0]["input"]["tools"]
    activate = next(t for t in offered if t["name"] == "activate_skill")
    assert "default_session_start" not in activate["parameters"]["properties"]["skill"]["enum"]
    assert skill_events(playback, 2) == []  # it does not run again


def test_completion_follow_up_when_the_stack_is_empty_and_its_wording_is_overridable(
    tmp_path: Path,
) -> None:
    conversation = (
        SIGNED_IN
        + """
turns:
  - user: "balance?"
    model:
      - tool: activate_skill
        args: {skill: check_balance}
      - tool: get_balance
      - tool: complete_skill
      - say: "It is 1250.75 EUR."
"""
    )
    playback = clean(run_text(load(EXAMPLE), conversation))
    assert skill_events(playback, 1)[-2:] == [
        ("activated", "default_completed"),
        ("completed", "default_completed"),
    ]
    assert said(playback, 1) == [
        "It is 1250.75 EUR.",
        "Is there anything else I can help you with?",
    ]
    project = copy_bank(tmp_path)
    edit(
        project / "responses.yml",
        "responses:\n",
        "responses:\n  utter_can_do_something_else:\n    - text: Anything else, {customer_name}?\n",
    )
    assert said(clean(run_text(load(project), conversation)), 1, "lifecycle") == [
        "Anything else, Ada?"
    ]


def test_resume_offer_yes_resumes_at_the_same_step_and_re_asks() -> None:
    playback = clean(run_text(load(EXAMPLE), INTERRUPT + '  - user: "yes"\n    model: []\n'))
    assert said(playback, 2) == [
        "Your balance is 1250.75 EUR.",
        "Would you like to continue with Card Replace?",
    ]
    assert ("activated", "default_resume_offer") in skill_events(playback, 2)
    assert ("activated", "default_completed") not in skill_events(playback, 2)
    assert steps(playback, 3, "LLM_STEP") == []
    resumed = [s for s in steps(playback, 3, "SKILL_STEP") if s["event"] == "resumed"]
    assert [(s["skill"], s["step"]) for s in resumed] == [("card_replace", "pick_card")]
    assert said(playback, 3, "collect") == ["Which card should we replace?"]


def test_resume_offer_no_drops_the_paused_skill() -> None:
    playback = clean(run_text(load(EXAMPLE), INTERRUPT + '  - user: "no"\n    model: []\n'))
    assert skill_events(playback, 3) == [
        ("completed", "default_resume_offer"),
        ("cancelled", "card_replace"),
        ("activated", "default_completed"),
        ("completed", "default_completed"),
    ]
    assert playback.turns[2].reply.node is None
    assert steps(playback, 3, "LLM_STEP") == []


def test_resume_offer_other_answer_goes_to_the_model_with_the_paused_skill_offered() -> None:
    playback = clean(
        run_text(
            load(EXAMPLE),
            INTERRUPT
            + """  - user: "hmm, maybe later"
    model:
      - say: "Sure, just say when."
""",
        )
    )
    instructions = steps(playback, 3, "LLM_STEP")[0]["input"]["instructions"]
    assert "Paused skills" in instructions and "card_replace" in instructions


def test_cannot_help_runs_the_unsupported_request_handler_and_ends_the_turn() -> None:
    playback = clean(
        run_text(
            load(EXAMPLE),
            SIGNED_IN
            + """
turns:
  - user: "book me a flight"
    model:
      - tool: cannot_help
""",
        )
    )
    assert ("activated", "default_unsupported_request_handler") in skill_events(playback, 1)
    assert said(playback, 1) == ["I'm sorry, I can't help with that."]
    assert playback.turns[0].reply.actions == ["cannot_help"]


def test_before_end_skills_run_then_the_session_ends(tmp_path: Path) -> None:
    project = copy_bank(tmp_path)
    (project / "agent.yml").write_text(
        (project / "agent.yml").read_text() + "conversation:\n  before_end: [goodbye]\n"
    )
    bye = project / "skills" / "goodbye"
    bye.mkdir()
    (bye / "skill.md").write_text(
        "---\nname: Goodbye\ndescription: Says goodbye.\nrouting:\n  engine_managed: true\n---\n"
        ":::ordered_block id=main\nsteps:\n  - id: bye\n    action: utter_bye\n:::\n"
    )
    (bye / "responses.yml").write_text(
        "responses:\n  utter_bye:\n    - text: Goodbye, {customer_name}!\n"
    )
    playback = run_text(
        load(project),
        SIGNED_IN + 'turns:\n  - user: "/session_end"\n    model: []\n  - user: "hello?"\n',
    )
    assert playback.turns[0].reply.error is None
    assert skill_events(playback, 1)[-2:] == [("activated", "goodbye"), ("completed", "goodbye")]
    assert said(playback, 1) == ["Goodbye, Ada!"]
    assert playback.turns[0].reply.ended
    assert playback.turns[1].reply.refused


def test_lifecycle_configuration_errors_are_validate_diagnostics(tmp_path: Path) -> None:
    from agentscript.mantle import load_project

    project = copy_bank(tmp_path)
    handler = project / "skills" / "default_unsupported_request_handler"
    handler.mkdir()
    (handler / "skill.md").write_text(
        "---\nname: Decline\ndescription: Declines.\nrouting:\n  engine_managed: false\n---\n"
        "Say politely that this is out of scope.\n"
    )
    (project / "agent.yml").write_text(
        (project / "agent.yml").read_text() + "conversation:\n  before_end: [survey]\n"
    )
    _, diagnostics = load_project(project)
    found = [(d.severity.value, d.message) for d in diagnostics if d.code == "mantle-lifecycle"]
    assert any(sev == "error" and "must stay engine-managed" in m for sev, m in found)
    assert any(sev == "warning" and "'survey'" in m for sev, m in found)
