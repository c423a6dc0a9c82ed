"""The resume offer (``default_resume_offer``) keeps the gates of any resume: a "yes" to a
paused skill that can no longer resume (its ``requires`` stopped holding, or it was disabled
since) is a ``REFUSED_STEP`` naming it, the skill stays paused (only the user's "no" drops
it) and the turn goes on to the model. The offer itself is no skill a project can override:
``validate`` says so and points at its wording."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mantle_helpers import Driver, make, start

from agentscript.engine.session import Reply
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


def trace(reply: Reply, kind: str) -> list[dict[str, Any]]:
    return [s for s in reply.trace["planTrace"]["steps"] if s["type"] == kind]


def said(reply: Reply) -> list[str]:
    return [s["text"] for s in trace(reply, "RESPONSE_STEP")]


def offered_a_then_closed_it(run: Driver) -> None:
    """Turn 1: a starts, d interrupts it, closes a's gate and completes: a is offered."""
    reply = run.send("a, then d", start("a"), start("d"), CLOSE_A, COMPLETE, {"say": "Done."})
    assert reply.error is None
    assert said(reply)[-1] == OFFER
    assert run.stack() == [("a", "paused")]


def test_M1_a_yes_to_the_resume_offer_whose_skill_requires_no_longer_holds_is_refused(
    tmp_path: Path,
) -> None:
    run = Driver(make(tmp_path, GATED))
    offered_a_then_closed_it(run)
    reply = run.send("yes", {"say": "A is not available now."})
    assert reply.error is None
    (refusal,) = trace(reply, "REFUSED_STEP")
    assert (refusal["name"], refusal["source"], refusal["skill"]) == (
        "a",
        "deterministic",
        "a",
    )
    assert refusal["reason"] == "cannot resume 'a' now: the requires of 'a' does not hold"
    # Kept for the user to resume once its gate holds again; the model answers meanwhile.
    assert run.stack() == [("a", "paused")]
    assert reply.text == "A is not available now."
    events = [(s["event"], s["skill"]) for s in trace(reply, "SKILL_STEP")]
    assert ("completed", "default_resume_offer") in events
    assert ("resumed", "a") not in events


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
    reasons = [(s["name"], s["reason"]) for s in trace(reply, "REFUSED_STEP")]
    assert reasons == [
        ("a", "cannot resume 'a' now: skill 'a' is disabled"),
        ("activate_skill", "cannot resume 'a' now: skill 'a' is disabled"),
    ]
    assert run.stack() == [("a", "paused")]
    assert reply.text == "A is gone."
    # Nor is it offered in the prompt, which said "Paused skills (...): a" before.
    prompts = [s["instructions"] for s in trace(reply, "RESOLUTION_STEP")]
    assert prompts and not any("Paused skills" in text for text in prompts)


def test_M2_a_yes_to_the_resume_offer_still_resumes_a_skill_whose_gate_holds(
    tmp_path: Path,
) -> None:
    run = Driver(make(tmp_path, GATED))
    run.send("a, then d", start("a"), start("d"), COMPLETE, {"say": "Done."})
    reply = run.send("yes", {"say": "Back to a."})
    assert trace(reply, "REFUSED_STEP") == []
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
