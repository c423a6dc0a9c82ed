"""The engine's own skill starts (lifecycle skills) keep the stack rules the model's and the
blocks' starts keep (M2): one frame per skill, at most ``Limits.max_stack_depth`` frames. A
refused lifecycle start pushes nothing and is a ``REFUSED_STEP`` naming why."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mantle_helpers import Driver, make, reply_said, reply_steps, start

from agentscript.engine.session import Reply
from agentscript.limits import Limits

HANDLER = "default_unsupported_request_handler"
CANNOT_HELP = {"tool": "cannot_help", "args": {}}
COMPLETE = {"tool": "complete_skill", "args": {}}


def prose_skill(name: str) -> str:
    return f"---\nname: {name.upper()}\ndescription: Talk about {name}.\n---\nTalk about {name}.\n"


SKILLS = {
    # An overridden handler in prose stays active until the model completes it.
    f"skills/{HANDLER}/skill.md": "---\nname: Decline\ndescription: Declines politely.\n---\n"
    "Say that this is out of scope and offer a human agent.\n",
    "skills/a/skill.md": prose_skill("a"),
    "skills/d/skill.md": prose_skill("d"),
}


def refusals(reply: Reply) -> list[dict[str, Any]]:
    return reply_steps(reply, "REFUSED_STEP")


# --- cannot_help: the unsupported-request handler ------------------------------------------


def test_M2_cannot_help_while_the_handler_is_active_does_not_stack_it_again(
    tmp_path: Path,
) -> None:
    run = Driver(make(tmp_path, SKILLS))
    reply = run.send(
        "buy me a car",
        start("a"),
        CANNOT_HELP,
        CANNOT_HELP,  # the handler is active: cannot_help is not offered (M6)
        {"say": "I can't help with cars; shall I get you a human?"},
    )
    assert reply.error is None
    assert run.stack() == [("a", "parked"), (HANDLER, "active")]
    (refusal,) = refusals(reply)
    assert (refusal["name"], refusal["cause"]) == ("cannot_help", "hidden")
    assert f"not offered while '{HANDLER}' is the active skill" in refusal["reason"]
    # the turn went on: the model answered after the refused call
    assert reply.text == "I can't help with cars; shall I get you a human?"


def test_M2_cannot_help_while_the_handler_is_paused_does_not_stack_it_again(
    tmp_path: Path,
) -> None:
    run = Driver(make(tmp_path, SKILLS))
    run.send("buy me a car", start("a"), CANNOT_HELP, {"say": "Not here."})
    reply = run.send("then d", start("d"), CANNOT_HELP, {"say": "Still not here."})
    assert reply.error is None
    assert run.stack() == [("a", "parked"), (HANDLER, "paused"), ("d", "active")]
    assert [(r["name"], r["source"]) for r in refusals(reply)] == [("cannot_help", "llm")]
    assert "already on the stack (paused)" in refusals(reply)[0]["reason"]


def test_M2_cannot_help_on_a_full_stack_is_refused_and_parks_nothing(tmp_path: Path) -> None:
    run = Driver(make(tmp_path, SKILLS), Limits(max_stack_depth=2))
    reply = run.send("a then d", start("a"), start("d"), CANNOT_HELP, {"say": "Sorry."})
    assert reply.error is None
    assert run.stack() == [("a", "paused"), ("d", "active")]  # d was not parked
    (refusal,) = refusals(reply)
    assert refusal["name"] == "cannot_help"
    assert "Limits.max_stack_depth = 2" in refusal["reason"]


# --- conversation.before_end ------------------------------------------------------------

ENDING = {
    "agent.yml": "agent:\n  id: t\n  persona: You are a bot.\n"
    "conversation:\n  before_end: [feedback, survey]\n",
    "skills/feedback/skill.md": prose_skill("feedback"),
    "skills/survey/skill.md": "---\nname: Survey\ndescription: Says goodbye.\n"
    "routing:\n  engine_managed: true\n---\n"
    ":::ordered_block id=main\nsteps:\n  - id: bye\n    action: utter_bye\n:::\n",
    "skills/d/skill.md": prose_skill("d"),
    "responses.yml": "responses:\n  utter_bye:\n    - text: Goodbye!\n",
}


def paused_feedback(run: Driver) -> None:
    """feedback paused under nothing: it was interrupted by d, which completed."""
    run.send("feedback", start("feedback"), start("d"), COMPLETE, {"say": "Done with d."})
    assert run.stack() == [("feedback", "paused")]


def test_M2_a_before_end_skill_already_on_the_stack_is_not_pushed_and_the_session_ends(
    tmp_path: Path,
) -> None:
    run = Driver(make(tmp_path, ENDING))
    paused_feedback(run)
    reply = run.send("/session_end")
    assert reply.error is None
    assert run.stack() == [("feedback", "paused")]  # not a second frame on top
    (refusal,) = refusals(reply)
    assert refusal["name"] == "feedback" and refusal["source"] == "deterministic"
    assert "cannot start 'feedback' now" in refusal["reason"]
    assert "already on the stack (paused)" in refusal["reason"]
    assert reply_said(reply) == ["Goodbye!"]  # the next before_end skill still ran
    assert reply.ended


def test_M2_a_full_stack_skips_the_before_end_skills_and_the_session_still_ends(
    tmp_path: Path,
) -> None:
    only_survey = ENDING["agent.yml"].replace("[feedback, survey]", "[survey]")
    run = Driver(make(tmp_path, {**ENDING, "agent.yml": only_survey}))
    paused_feedback(run)
    run.restore(Limits(max_stack_depth=1))  # the operator lowered the bound meanwhile
    reply = run.send("/session_end")
    assert reply.error is None
    assert run.stack() == [("feedback", "paused")]
    (refusal,) = refusals(reply)
    assert refusal["name"] == "survey"
    assert "Limits.max_stack_depth = 1" in refusal["reason"]
    assert reply_said(reply) == []
    assert reply.ended


# --- /session_start ---------------------------------------------------------------------

GREETING = {
    "skills/default_session_start/skill.md": "---\nname: Start\ndescription: Greets.\n---\n"
    ":::ordered_block id=main\nsteps:\n  - id: ask\n    collect: name\n:::\n",
    "skills/default_session_start/memory.yml": "schema:\n  public:\n"
    "    name: {type: text, description: The user's name.}\n",
    "responses.yml": "responses:\n  utter_ask_name:\n    - text: Hello! What is your name?\n",
}


def test_M2_a_second_session_start_signal_does_not_stack_the_session_start_skill(
    tmp_path: Path,
) -> None:
    run = Driver(make(tmp_path, GREETING))
    first = run.send("/session_start")
    assert first.text == "Hello! What is your name?"
    again = run.send("/session_start")  # a channel may send it again; the model is not asked
    assert again.error is None
    assert run.stack() == [("default_session_start", "active")]
    assert refusals(again) == [] and reply_said(again) == []
    (ignored,) = [s for s in again.trace["planTrace"]["steps"] if s["type"] == "EVENT_STEP"]
    assert (ignored["event"], ignored["signal"]) == ("signal_ignored", "/session_start")
    answer = run.send("Ada", {"tool": "set_fields", "args": {"name": "Ada"}}, {"say": "Hi Ada."})
    assert answer.error is None
    assert run.stack() == []  # the one frame completed with the answer
