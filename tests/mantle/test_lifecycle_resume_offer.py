"""The resume offer (``default_resume_offer``) keeps the gates of any resume. It names the
most recent paused skill that can resume now; when none can, ``default_completed`` follows as
if none waited, and the ones that cannot stay paused. A "yes" to an offered skill that can no
longer resume (its ``requires`` stopped holding, or it was disabled since the offer) is a
``REFUSED_STEP`` naming it, the skill stays paused (only the user's "no" drops it) and the turn
goes on to the model. The offer itself is no skill a project can override: ``validate`` says
so and points at its wording."""

from __future__ import annotations

from pathlib import Path

from mantle_helpers import Driver, make, reply_said, reply_skill_events, reply_steps, start

from agentscript.mantle import load_project

COMPLETE = {"tool": "complete_skill", "args": {}}
OFFER = "Would you like to continue with A?"
# `a` runs only while d's `open` holds; d closes it (d could be a sign-out).
GATED = {
    "skills/a/skill.md": "---\nname: A\ndescription: Talk about a.\n"
    "requires: session.d.open\n---\nTalk about a.\n",
    "skills/d/skill.md": "---\nname: D\ndescription: Talk about d.\n---\nTalk about d.\n",
    "skills/d/memory.yml": "schema:\n  public:\n    open:\n      type: bool\n"
    "      description: Whether a is open.\n      initial_value: true\n"
    "      llm_settable: true\n",
}
CLOSE_A = {"tool": "set_fields", "args": {"open": False}}


ANYTHING_ELSE = "Is there anything else I can help you with?"
# `b` runs only while d's `open` holds, like `a` in GATED; `a` has no gate.
TWO_PAUSED = {
    **GATED,
    "skills/a/skill.md": "---\nname: A\ndescription: Talk about a.\n---\nTalk about a.\n",
    "skills/b/skill.md": GATED["skills/a/skill.md"].replace("A", "B").replace(" a.", " b."),
}


def test_M1_no_resume_offer_names_a_paused_skill_whose_requires_no_longer_holds(
    tmp_path: Path,
) -> None:
    run = Driver(make(tmp_path, GATED))
    reply = run.send("a, then d", start("a"), start("d"), CLOSE_A, COMPLETE, {"say": "Done."})
    assert reply.error is None
    # As when no paused skill waits: the user is not asked about a skill a yes cannot resume.
    assert reply_said(reply) == ["Done.", ANYTHING_ELSE]
    assert ("activated", "default_resume_offer") not in reply_skill_events(reply)
    assert ("activated", "default_completed") in reply_skill_events(reply)
    assert run.stack() == [("a", "paused")]  # kept: it resumes once its gate holds again


def offered_a_over_a_closed_b(run: Driver) -> None:
    """Turn 1: a, then b, then d start; d closes b's gate and completes. b paused last but
    cannot resume, so a is offered."""
    reply = run.send(
        "a, b, d", start("a"), start("b"), start("d"), CLOSE_A, COMPLETE, {"say": "Done."}
    )
    assert reply.error is None
    assert reply_said(reply) == ["Done.", OFFER]
    assert run.stack() == [("a", "paused"), ("b", "paused")]


def test_M1_the_resume_offer_names_the_most_recent_paused_skill_that_can_resume(
    tmp_path: Path,
) -> None:
    run = Driver(make(tmp_path, TWO_PAUSED))
    offered_a_over_a_closed_b(run)
    reply = run.send("yes", {"say": "Back to a."})
    assert reply.error is None
    assert reply_steps(reply, "REFUSED_STEP") == []
    assert ("resumed", "a") in reply_skill_events(reply)
    assert run.stack() == [("b", "paused"), ("a", "active")]


def test_M1_the_resume_offer_answered_no_drops_the_offered_skill_not_a_more_recent_one(
    tmp_path: Path,
) -> None:
    run = Driver(make(tmp_path, TWO_PAUSED))
    offered_a_over_a_closed_b(run)
    reply = run.send("no")
    assert reply.error is None
    (dropped,) = [s for s in reply_steps(reply, "SKILL_STEP") if s["event"] == "cancelled"]
    assert (dropped["skill"], dropped["reason"]) == ("a", "dropped")
    # b cannot resume, so nothing more is offered and default_completed follows.
    assert run.stack() == [("b", "paused")]
    assert reply_said(reply) == [ANYTHING_ELSE]


def test_M1_a_yes_to_the_resume_offer_whose_skill_requires_stopped_holding_is_refused(
    tmp_path: Path,
) -> None:
    run = Driver(make(tmp_path, GATED))
    offered = run.send("a, then d", start("a"), start("d"), COMPLETE, {"say": "Done."})
    assert reply_said(offered)[-1] == OFFER
    # Between the offer and the answer the host closes a's gate (a sign-out, say).
    saved = run.session.to_json()
    run.session = run.session.agent.restore(saved, model=run.model, variables={"d.open": False})
    reply = run.send("yes", {"say": "A is not available now."})
    assert reply.error is None
    (refusal,) = reply_steps(reply, "REFUSED_STEP")
    assert (refusal["name"], refusal["source"], refusal["skill"]) == (
        "a",
        "deterministic",
        "a",
    )
    assert refusal["reason"] == "cannot resume 'a' now: the requires of 'a' does not hold"
    # Kept for the user to resume once its gate holds again; the model answers meanwhile.
    assert run.stack() == [("a", "paused")]
    assert reply.text == "A is not available now."
    assert ("completed", "default_resume_offer") in reply_skill_events(reply)
    assert ("resumed", "a") not in reply_skill_events(reply)


def test_M1_a_skill_disabled_since_it_paused_is_not_resumed_by_the_offer_or_the_model(
    tmp_path: Path,
) -> None:
    files = {**GATED, "skills/a/skill.md": GATED["skills/a/skill.md"].replace("requires", "#")}
    run = Driver(make(tmp_path, files))
    run.send("a, then d", start("a"), start("d"), COMPLETE, {"say": "Done."})
    assert run.stack() == [("a", "paused")]
    # A project redeployed between two turns: the saved session goes on with a disabled.
    run.session.agent.project.skills["a"].disabled = True
    reply = run.send("yes", start("a"), {"say": "A is gone."})
    assert reply.error is None
    reasons = [(s["name"], s["reason"]) for s in reply_steps(reply, "REFUSED_STEP")]
    assert reasons == [
        ("a", "cannot resume 'a' now: skill 'a' is disabled"),
        ("activate_skill", "cannot resume 'a' now: skill 'a' is disabled"),
    ]
    assert run.stack() == [("a", "paused")]
    assert reply.text == "A is gone."
    # Nor is it offered in the prompt, which said "Paused skills (...): a" before.
    prompts = [s["instructions"] for s in reply_steps(reply, "RESOLUTION_STEP")]
    assert prompts and not any("Paused skills" in text for text in prompts)


def test_M2_a_yes_to_the_resume_offer_still_resumes_a_skill_whose_gate_holds(
    tmp_path: Path,
) -> None:
    run = Driver(make(tmp_path, GATED))
    run.send("a, then d", start("a"), start("d"), COMPLETE, {"say": "Done."})
    reply = run.send("yes", {"say": "Back to a."})
    assert reply_steps(reply, "REFUSED_STEP") == []
    assert run.stack() == [("a", "active")]
    assert reply.text == "Back to a."


def test_validate_warns_that_default_resume_offer_cannot_be_overridden_by_a_skill(
    tmp_path: Path,
) -> None:
    override = "---\nname: Resume\ndescription: Offers to resume.\n---\nAsk to resume.\n"
    _, diagnostics = load_project(
        make(tmp_path, {"skills/default_resume_offer/skill.md": override})
    )
    (warning,) = [d for d in diagnostics if d.code == "mantle-lifecycle"]
    assert warning.severity.value == "warning"
    assert warning.message == (
        "default_resume_offer cannot be overridden by a skill; redeclare "
        "utter_ask_wants_to_continue in responses.yml to change its wording"
    )
    assert warning.file is not None and warning.file.endswith("skill.md")


def test_M1_cancel_skill_with_no_active_skill_drops_the_paused_skill_the_prompt_lists(
    tmp_path: Path,
) -> None:
    # b paused last but cannot resume (d closed its gate), so the prompt lists only a:
    # cancel_skill drops a, never b, which the model cannot see.
    run = Driver(make(tmp_path, TWO_PAUSED))
    offered_a_over_a_closed_b(run)
    reply = run.send("drop the last thing", {"tool": "cancel_skill", "args": {}}, {"say": "Ok."})
    assert reply.error is None
    assert ("cancelled", "a") in reply_skill_events(reply)
    assert run.stack() == [("b", "paused")]
