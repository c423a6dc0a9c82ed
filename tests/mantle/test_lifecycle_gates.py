"""The lifecycle skills keep the gates every other start keeps: ``cannot_help`` is refused when
it was not offered (M6), a lifecycle override whose ``requires`` does not hold does not start
and the built-in behaviour runs instead (M1), a repeated channel signal (``/session_start``
once the session started, ``/session_end`` while it ends) is ignored, and the resume offer
answered "no" is followed by the project's ``default_completed`` like any other ending."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mantle_helpers import Driver, make, reply_said, reply_skill_events, reply_steps, start

from agentscript.engine.session import Reply
from agentscript.mantle import load_project
from agentscript.not_offered import not_offered_message

HANDLER = "default_unsupported_request_handler"
CANNOT_HELP = {"tool": "cannot_help", "args": {}}
COMPLETE = {"tool": "complete_skill", "args": {}}
BUILTIN_DECLINE = "I'm sorry, I can't help with that."
BUILTIN_ANYTHING_ELSE = "Is there anything else I can help you with?"
# A project entry nobody writes: a `requires` on it never holds (M6: unset fails closed).
VIP_MEMORY = {
    "memory.yml": "vip:\n  type: bool\n  description: Whether the customer is a VIP.\n",
}
VIP_ONLY = "requires: session.project.vip\n"


def prose_skill(name: str, extra: str = "") -> str:
    return (
        f"---\nname: {name.upper()}\ndescription: Talk about {name}.\n{extra}---\n"
        f"Talk about {name}.\n"
    )


def saying(name: str, response: str, extra: str = "") -> str:
    """A lifecycle override whose block says ``response`` and completes, without the model."""
    return (
        f"---\nname: {name}\ndescription: Lifecycle override.\n{extra}---\n"
        f":::ordered_block id=main\nsteps:\n  - id: say\n    action: {response}\n:::\n"
    )


def ignored_signals(reply: Reply) -> list[tuple[str, str]]:
    return [
        (s["signal"], s["reason"])
        for s in reply_steps(reply, "EVENT_STEP")
        if s["event"] == "signal_ignored"
    ]


def tool_results(driver: Driver, tool: str) -> list[Any]:
    history = driver.session.state.history
    return [json.loads(m.content) for m in history if m.role == "tool" and m.name == tool]


# --- 1. cannot_help is gated at call time (M6) ---------------------------------------------

KNOWLEDGE = {
    "references/faq.md": "# Opening hours\n\nWe are open from nine to five on weekdays.\n",
    "skills/a/skill.md": prose_skill("a"),
}


def test_M6_cannot_help_called_before_a_knowledge_search_is_refused_as_not_offered(
    tmp_path: Path,
) -> None:
    run = Driver(make(tmp_path, KNOWLEDGE))
    reply = run.send("buy me a car", CANNOT_HELP, {"say": "Let me look that up first."})
    assert reply.error is None
    (refusal,) = reply_steps(reply, "REFUSED_STEP")
    assert (refusal["name"], refusal["source"], refusal["cause"]) == (
        "cannot_help",
        "llm",
        "hidden",
    )
    assert "search_knowledge" in refusal["reason"]
    # The model reads what it reads for any tool it was not offered; nothing was declined.
    assert tool_results(run, "cannot_help") == [{"error": not_offered_message("cannot_help")}]
    assert BUILTIN_DECLINE not in reply_said(reply)
    assert ("activated", HANDLER) not in reply_skill_events(reply)
    assert reply.text == "Let me look that up first."
    assert reply.actions == []


def test_M6_cannot_help_after_a_knowledge_search_in_the_turn_still_runs(tmp_path: Path) -> None:
    run = Driver(make(tmp_path, KNOWLEDGE))
    search = {"tool": "search_knowledge", "args": {"query": "cars"}}
    reply = run.send("buy me a car", search, CANNOT_HELP)
    assert reply.error is None
    assert reply_steps(reply, "REFUSED_STEP") == []
    assert reply_said(reply) == [BUILTIN_DECLINE]


def test_M6_search_knowledge_without_a_knowledge_base_is_refused_as_not_offered(
    tmp_path: Path,
) -> None:
    run = Driver(make(tmp_path, {"skills/a/skill.md": prose_skill("a")}))
    search = {"tool": "search_knowledge", "args": {"query": "opening hours"}}
    reply = run.send("when are you open?", search, {"say": "I cannot look that up."})
    assert reply.error is None
    (refusal,) = reply_steps(reply, "REFUSED_STEP")
    assert (refusal["name"], refusal["source"], refusal["cause"]) == (
        "search_knowledge",
        "llm",
        "hidden",
    )
    assert "no knowledge base" in refusal["reason"]
    assert tool_results(run, "search_knowledge") == [
        {"error": not_offered_message("search_knowledge")}
    ]
    assert reply_steps(reply, "KNOWLEDGE_STEP") == []
    assert reply.text == "I cannot look that up."


# --- 2. /session_start once the session started ---------------------------------------------

GREETING = {
    "skills/default_session_start/skill.md": "---\nname: Start\ndescription: Greets.\n---\n"
    ":::ordered_block id=main\nsteps:\n  - id: ask\n    collect: name\n:::\n",
    "skills/default_session_start/memory.yml": "schema:\n  public:\n"
    "    name: {type: text, description: The user's name.}\n",
    "skills/a/skill.md": prose_skill("a"),
    "responses.yml": "responses:\n  utter_ask_name:\n    - text: Hello! What is your name?\n",
}


def test_M2_a_session_start_signal_mid_session_is_ignored_and_leaves_the_active_skill(
    tmp_path: Path,
) -> None:
    run = Driver(make(tmp_path, GREETING))
    assert run.send("/session_start").text == "Hello! What is your name?"
    run.send(
        "Ada, about a",
        {"tool": "set_fields", "args": {"name": "Ada"}},
        start("a"),
        {"say": "Sure."},
    )
    assert run.stack() == [("a", "active")]
    again = run.send("/session_start")  # the model is not asked: no moves scripted
    assert again.error is None
    assert run.stack() == [("a", "active")]  # not a second active frame on top
    assert reply_said(again) == [] and reply_skill_events(again) == []
    assert ignored_signals(again) == [("/session_start", "the session has already started")]
    assert run.session.state.variables["default_session_start.name"] == "Ada"  # not reset


def test_M2_a_second_session_start_signal_does_not_run_the_builtin_again(tmp_path: Path) -> None:
    run = Driver(make(tmp_path, {"skills/a/skill.md": prose_skill("a")}))
    first = run.send("hi", {"say": "Hello."})
    assert ("activated", "default_session_start") in reply_skill_events(first)
    again = run.send("/session_start")
    assert again.error is None
    assert reply_skill_events(again) == []
    assert ignored_signals(again) == [("/session_start", "the session has already started")]


# --- 3. the resume offer answered "no" --------------------------------------------------------

RESUMABLE = {
    "skills/a/skill.md": prose_skill("a"),
    "skills/d/skill.md": prose_skill("d"),
    "skills/default_completed/skill.md": saying("More", "utter_more"),
    "responses.yml": "responses:\n  utter_more:\n    - text: Anything else for you today?\n",
}


def test_M2_the_resume_offer_answered_no_runs_the_default_completed_override(
    tmp_path: Path,
) -> None:
    run = Driver(make(tmp_path, RESUMABLE))
    offered = run.send("a, then d", start("a"), start("d"), COMPLETE, {"say": "Done with d."})
    assert reply_said(offered)[-1] == "Would you like to continue with A?"
    assert run.stack() == [("a", "paused")]
    reply = run.send("no")
    assert reply.error is None
    assert run.stack() == []
    assert reply_said(reply) == ["Anything else for you today?"]
    assert ("activated", "default_completed") in reply_skill_events(reply)
    assert ("completed", "default_completed") in reply_skill_events(reply)


def test_M2_the_resume_offer_answered_no_offers_the_next_paused_skill_once(
    tmp_path: Path,
) -> None:
    run = Driver(make(tmp_path, {f"skills/{n}/skill.md": prose_skill(n) for n in "abd"}))
    run.send("a, b, d", start("a"), start("b"), start("d"), COMPLETE, {"say": "Done with d."})
    assert run.stack() == [("a", "paused"), ("b", "paused")]
    reply = run.send("no")
    assert reply.error is None
    assert run.stack() == [("a", "paused")]
    assert reply_said(reply) == ["Would you like to continue with A?"]
    assert run.send("yes", {"say": "Back to a."}).text == "Back to a."
    assert run.stack() == [("a", "active")]


# --- 4. requires (and disabled) on lifecycle overrides (M1) -----------------------------------


def refused_lifecycle(reply: Reply) -> list[tuple[str, str]]:
    return [(s["name"], s["reason"]) for s in reply_steps(reply, "REFUSED_STEP")]


def requires_refusal(skill_id: str, then: str = "") -> tuple[str, str]:
    return (
        skill_id,
        f"cannot start '{skill_id}' now: the requires of '{skill_id}' does not hold{then}",
    )


def test_M1_a_default_completed_override_whose_requires_fails_leaves_the_builtin(
    tmp_path: Path,
) -> None:
    override = saying("More", "utter_more", VIP_ONLY)
    run = Driver(
        make(tmp_path, {**RESUMABLE, **VIP_MEMORY, "skills/default_completed/skill.md": override})
    )
    reply = run.send("a", start("a"), COMPLETE, {"say": "Done with a."})
    assert reply.error is None
    assert reply_said(reply) == ["Done with a.", BUILTIN_ANYTHING_ELSE]
    assert refused_lifecycle(reply) == [
        requires_refusal("default_completed", "; the built-in runs instead")
    ]
    builtin = [s for s in reply_steps(reply, "SKILL_STEP") if s["skill"] == "default_completed"]
    assert builtin[0]["builtin"] is True


def test_M1_a_disabled_default_completed_override_is_no_override(tmp_path: Path) -> None:
    override = saying("More", "utter_more", "disabled: true\n")
    run = Driver(make(tmp_path, {**RESUMABLE, "skills/default_completed/skill.md": override}))
    reply = run.send("a", start("a"), COMPLETE, {"say": "Done with a."})
    assert reply_said(reply) == ["Done with a.", BUILTIN_ANYTHING_ELSE]


def test_M1_a_session_start_override_whose_requires_fails_leaves_the_silent_builtin(
    tmp_path: Path,
) -> None:
    greeting = GREETING["skills/default_session_start/skill.md"].replace(
        "---\n:::", f"{VIP_ONLY}---\n:::"
    )
    files = {**GREETING, **VIP_MEMORY, "skills/default_session_start/skill.md": greeting}
    run = Driver(make(tmp_path, files))
    reply = run.send("/session_start")
    assert reply.error is None
    assert reply_said(reply) == [] and run.stack() == []
    assert refused_lifecycle(reply) == [
        requires_refusal("default_session_start", "; the built-in runs instead")
    ]
    builtin = [s for s in reply_steps(reply, "SKILL_STEP") if s["skill"] == "default_session_start"]
    assert [s["event"] for s in builtin] == ["activated", "completed"]
    assert builtin[0]["builtin"] is True


def test_M1_a_cannot_help_handler_whose_requires_fails_leaves_the_builtin_decline(
    tmp_path: Path,
) -> None:
    handler = prose_skill("decline", VIP_ONLY)
    files = {
        **VIP_MEMORY,
        f"skills/{HANDLER}/skill.md": handler,
        "skills/a/skill.md": prose_skill("a"),
    }
    run = Driver(make(tmp_path, files))
    reply = run.send("buy a car", start("a"), CANNOT_HELP)
    assert reply.error is None
    assert run.stack() == [("a", "active")]  # not parked for a handler that did not start
    assert reply_said(reply) == [BUILTIN_DECLINE]
    assert refused_lifecycle(reply) == [requires_refusal(HANDLER, "; the built-in runs instead")]


ENDING = {
    "agent.yml": "agent:\n  id: t\n  persona: You are a bot.\n"
    "conversation:\n  before_end: [survey, feedback]\n",
    "skills/survey/skill.md": saying("Survey", "utter_bye"),
    "skills/feedback/skill.md": prose_skill("feedback"),
    "responses.yml": "responses:\n  utter_bye:\n    - text: Goodbye!\n",
}


def test_M1_a_before_end_skill_whose_requires_fails_is_skipped_and_the_session_ends(
    tmp_path: Path,
) -> None:
    survey = saying("Survey", "utter_bye", VIP_ONLY)
    only_survey = ENDING["agent.yml"].replace("[survey, feedback]", "[survey]")
    files = {**ENDING, **VIP_MEMORY, "agent.yml": only_survey, "skills/survey/skill.md": survey}
    run = Driver(make(tmp_path, files))
    reply = run.send("/session_end")
    assert reply.error is None
    assert reply_said(reply) == []
    assert refused_lifecycle(reply) == [requires_refusal("survey")]
    assert reply.ended


def test_M1_a_disabled_before_end_skill_is_skipped_as_disabled(tmp_path: Path) -> None:
    survey = saying("Survey", "utter_bye", "disabled: true\n")
    only_survey = ENDING["agent.yml"].replace("[survey, feedback]", "[survey]")
    run = Driver(
        make(tmp_path, {**ENDING, "agent.yml": only_survey, "skills/survey/skill.md": survey})
    )
    reply = run.send("/session_end")
    assert reply_said(reply) == []
    (skipped,) = [s for s in reply_steps(reply, "SKILL_STEP") if s["event"] == "skipped"]
    assert skipped["skill"] == "survey" and "disabled" in skipped["reason"]
    assert reply.ended


def test_validate_warns_about_a_disabled_before_end_skill(tmp_path: Path) -> None:
    survey = saying("Survey", "utter_bye", "disabled: true\n")
    _, diagnostics = load_project(make(tmp_path, {**ENDING, "skills/survey/skill.md": survey}))
    (warning,) = [d for d in diagnostics if d.code == "mantle-lifecycle"]
    assert warning.severity.value == "warning"
    assert "'survey', which is disabled" in warning.message


# --- 5. /session_end while the session ends ----------------------------------------------------


def test_lifecycle_a_second_session_end_does_not_run_finished_before_end_skills_again(
    tmp_path: Path,
) -> None:
    run = Driver(make(tmp_path, ENDING))
    first = run.send("/session_end", {"say": "How did we do today?"})
    assert reply_said(first) == ["Goodbye!", "How did we do today?"]
    assert run.stack() == [("feedback", "active")] and not first.ended
    again = run.send("/session_end")  # the model is not asked: no moves scripted
    assert again.error is None
    assert reply_said(again) == [] and reply_skill_events(again) == []
    assert ignored_signals(again) == [("/session_end", "the session is already ending")]
    assert run.stack() == [("feedback", "active")] and not again.ended
    answer = run.send("Great, thanks", COMPLETE, {"say": "Thank you!"})
    assert answer.error is None
    assert reply_said(answer) == ["Thank you!"]  # the survey did not say goodbye again
    assert ("activated", "survey") not in reply_skill_events(answer)
    assert answer.ended
