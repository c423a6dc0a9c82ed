"""Holes an audit of the Mantle runtime found in tool execution, the session end, cancel_skill,
collect steps and button source tools: a tool's ``context`` lives as long as its call (a
timed-out tool reaches nothing of the session afterwards), a call that raised or timed out
keeps none of its writes, ``/session_end`` cancels the skill being worked on, a repeated
``cancel_skill`` never acts on a skill the model did not see as active, a ``collect`` of a
project entry is a validate error, and a button source tool keeps its tool constraint."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mantle_helpers import AGENT, Driver, make, reply_said, reply_skill_events, reply_steps, start

from agentscript.engine.session import Reply
from agentscript.mantle import load_project

# --- tools that outlive or fail their call ------------------------------------------------

TOOLS = '''
import threading
from typing import Any

RELEASE = threading.Event()  # set by the test once the turn has returned
FINISHED = threading.Event()
LATE: list[Any] = []  # what each use of the context after the timeout did
HOOKED: list[Any] = []


def wait_then_write(context: Any = None) -> dict:
    """Write, wait past the timeout, then use the context again."""
    context.memory.set("note", "early")
    RELEASE.wait(60)
    for attempt in (
        lambda: context.memory.set("note", "late"),
        lambda: context.send("late message"),
        lambda: context.memory.get("note"),
    ):
        try:
            attempt()
            LATE.append("reached the session")
        except Exception as exc:
            LATE.append(type(exc).__name__)
    LATE.append(context.is_cancelled)
    FINISHED.set()
    return {"ok": True}


def write_then_raise(context: Any = None) -> dict:
    """Write, then fail."""
    context.memory.set("note", "half done")
    raise RuntimeError("failed after the write")


def write_then_report(context: Any = None) -> dict:
    """Count an attempt, then report that it failed."""
    context.memory.set("attempts", 1)
    return {"ok": False, "error": "wrong pin"}


def run_after_setting_note(value: Any = None) -> dict:
    """Post-write hook of note."""
    HOOKED.append(value)
    return {}
'''

TOOL_PROJECT = {
    # The waiting tool always times out: it waits for the test, which releases it only once
    # the turn has returned. The others return at once, well within the half second.
    "agent.yml": AGENT + "tool_timeout: 0.5\n",
    "skills/s/skill.md": "---\nname: S\ndescription: Tools.\n---\nUse the tools.\n",
    "skills/s/memory.yml": "schema:\n  public:\n    note:\n      type: text\n"
    "    attempts:\n      type: int\n",
    "skills/s/tools.py": TOOLS,
}


def call(name: str) -> dict[str, Any]:
    return {"tool": name, "args": {}}


def tool_globals(run: Driver) -> dict[str, Any]:
    """The tools module of skill ``s``, as loaded for this session."""
    function = run.session.agent.project.skills["s"].tools["wait_then_write"].function
    module: dict[str, Any] = function.__globals__
    return module


def saved(run: Driver) -> str:
    return json.dumps(run.session.to_json(), sort_keys=True)


def test_S12_a_timed_out_tool_reaches_nothing_of_the_session_after_its_turn(
    tmp_path: Path,
) -> None:
    run = Driver(make(tmp_path, TOOL_PROJECT))
    tools = tool_globals(run)
    try:
        reply = run.send("go", start("s"), call("wait_then_write"), {"say": "done"})
        assert reply.error is None
        (action,) = [s for s in reply_steps(reply, "ACTION_STEP") if s["name"] == "wait_then_write"]
        assert "timed out" in action["error"]
        # What the tool wrote before the timeout is rolled back (it did not finish), and the
        # post-write hook never saw it.
        assert run.session.state.variables["s.note"] is None
        (rolled,) = [
            s for s in reply_steps(reply, "EVENT_STEP") if s["event"] == "write_rolled_back"
        ]
        assert (rolled["tool"], rolled["hook"], rolled["keys"]) == (
            "wait_then_write",
            None,
            ["s.note"],
        )
        assert tools["HOOKED"] == []
        steps_before = len(reply.trace["planTrace"]["steps"])
        history_before = list(run.session.state.history)
        state_before = saved(run)
    finally:
        tools["RELEASE"].set()  # the tool goes on running on its worker thread
    assert tools["FINISHED"].wait(60)

    # Every use of the context was refused inside the tool, which could see it was cancelled.
    assert tools["LATE"] == ["ContextClosed", "ContextClosed", "ContextClosed", True]
    assert run.session.state.variables["s.note"] is None
    assert len(reply.trace["planTrace"]["steps"]) == steps_before
    assert reply_said(reply) == ["done"]
    assert run.session.state.history == history_before
    assert saved(run) == state_before  # the live session is the one a restore would give


def test_S12_a_tool_that_raises_keeps_none_of_its_writes_one_that_reports_failure_does(
    tmp_path: Path,
) -> None:
    run = Driver(make(tmp_path, TOOL_PROJECT))
    tools = tool_globals(run)
    reply = run.send(
        "go", start("s"), call("write_then_raise"), call("write_then_report"), {"say": "done"}
    )
    assert reply.error is None
    memory = run.session.state.variables
    assert memory["s.note"] is None  # raised: the tool did not finish its work
    assert memory["s.attempts"] == 1  # returned a failure: its writes are its own decision
    # The undone write does not count as written (an ask_before_filling step reads this).
    assert set(run.session.state.extra["mantle"]["written"]) == {"s.attempts"}
    (raised,) = [s for s in reply_steps(reply, "ACTION_STEP") if s["name"] == "write_then_raise"]
    assert "failed after the write" in raised["error"]
    assert raised["postVars"]["s.note"] is None
    (rolled,) = [s for s in reply_steps(reply, "EVENT_STEP") if s["event"] == "write_rolled_back"]
    assert rolled["tool"] == "write_then_raise" and rolled["hook"] is None
    assert rolled["keys"] == ["s.note"] and "failed after the write" in rolled["error"]
    # No hook ran on a write that was never kept.
    assert [s["name"] for s in reply_steps(reply, "ACTION_STEP") if s["source"] == "hook"] == []
    assert tools["HOOKED"] == []


# --- /session_end while a skill is being worked on ------------------------------------------


def prose(name: str, body: str = "") -> str:
    return f"---\nname: {name.upper()}\ndescription: Talk about {name}.\n---\n{body or name}\n"


STACKED = {
    "skills/a/skill.md": prose("a", "Talk about a. For details use @skill.b."),
    "skills/b/skill.md": prose("b"),
    "skills/c/skill.md": prose("c"),
}


def restored(run: Driver) -> Driver:
    """The session saved and restored (the restore checks run on the saved state)."""
    run.session = run.session.agent.restore(run.session.to_json(), model=run.model)
    return run


def test_M2_session_end_cancels_the_skill_being_worked_on_and_ends_the_session(
    tmp_path: Path,
) -> None:
    run = Driver(make(tmp_path, STACKED))
    run.send("c then a then b", start("c"), start("a"), start("b"), {"say": "About b."})
    assert run.stack() == [("c", "paused"), ("a", "parked"), ("b", "active")]
    reply = run.send("/session_end")  # no move scripted: the model is not asked
    assert reply.error is None
    cancelled = [s for s in reply_steps(reply, "SKILL_STEP") if s["event"] == "cancelled"]
    assert [(s["skill"], s["reason"]) for s in cancelled] == [
        ("b", "/session_end"),
        ("a", "/session_end"),  # the parked caller waited for b: nothing resumes it now
    ]
    assert run.stack() == [("c", "paused")]  # the user had already left c
    assert [s["event"] for s in reply_steps(reply, "EVENT_STEP")] == ["session_ended"]
    assert reply.ended and run.session.state.extra["mantle"]["ending"] is None
    assert reply_said(reply) == []  # no completion follow-up, no resume offer
    later = restored(run).send("hello?")
    assert later.error is not None and "ended" in later.error


ENDING = {
    **STACKED,
    "agent.yml": AGENT + "conversation:\n  before_end: [feedback]\n",
    "skills/feedback/skill.md": "---\nname: Feedback\ndescription: Asks for feedback.\n"
    "routing:\n  engine_managed: true\n---\nAsk how we did.\n",
}


def test_M2_session_end_cancels_the_active_skill_then_runs_before_end(tmp_path: Path) -> None:
    run = Driver(make(tmp_path, ENDING))
    run.send("about a", start("a"), {"say": "About a."})
    reply = run.send("/session_end", {"say": "How did we do today?"})
    assert reply.error is None
    assert reply_skill_events(reply) == [("cancelled", "a"), ("activated", "feedback")]
    assert reply_said(reply) == ["How did we do today?"]
    assert run.stack() == [("feedback", "active")] and not reply.ended
    assert run.session.state.extra["mantle"]["ending"] == []
    answer = restored(run).send(
        "Great, thanks", {"tool": "complete_skill", "args": {}}, {"say": "Thank you!"}
    )
    assert answer.error is None
    assert reply_skill_events(answer) == [("completed", "feedback")]
    assert reply_said(answer) == ["Thank you!"]  # no "anything else?" before the end
    assert answer.ended


# --- cancel_skill means what it meant when the model answered -------------------------------


def cancel_twice() -> dict[str, Any]:
    return {"tools": [call("cancel_skill"), call("cancel_skill")]}


def refusals(reply: Reply) -> list[tuple[str, str]]:
    return [(s["name"], s["reason"]) for s in reply_steps(reply, "REFUSED_STEP")]


def test_M2_a_second_cancel_skill_does_not_drop_the_paused_skill(tmp_path: Path) -> None:
    run = Driver(make(tmp_path, STACKED))
    run.send("c, then a", start("c"), start("a"), {"say": "About a."})
    assert run.stack() == [("c", "paused"), ("a", "active")]
    reply = run.send("never mind", cancel_twice(), {"say": "Cancelled."})
    assert reply.error is None
    cancelled = [s for s in reply_steps(reply, "SKILL_STEP") if s["event"] == "cancelled"]
    assert [(s["skill"], s["reason"]) for s in cancelled] == [("a", "cancel_skill")]
    ((name, reason),) = refusals(reply)
    assert name == "cancel_skill"
    assert "'a', the skill active when this answer was given, is no longer" in reason
    assert run.stack() == [("c", "paused")]  # offered for resume, never dropped unseen
    assert reply_said(reply) == ["Cancelled.", "Would you like to continue with C?"]


def test_M2_a_second_cancel_skill_is_refused_when_the_active_skill_is_named_router(
    tmp_path: Path,
) -> None:
    # The check read the skill back from the trace's node name, where "router" also means
    # "no skill active": a skill with that id lost the guard.
    files = {
        "skills/c/skill.md": prose("c"),
        "skills/router/skill.md": prose("router"),
    }
    run = Driver(make(tmp_path, files))
    run.send("c, then router", start("c"), start("router"), {"say": "About router."})
    assert run.stack() == [("c", "paused"), ("router", "active")]
    reply = run.send("never mind", cancel_twice(), {"say": "Cancelled."})
    ((name, reason),) = refusals(reply)
    assert name == "cancel_skill" and "'router', the skill active when" in reason
    assert run.stack() == [("c", "paused")]


def test_M2_a_second_cancel_skill_does_not_cancel_the_caller_that_resumed(
    tmp_path: Path,
) -> None:
    run = Driver(make(tmp_path, STACKED))
    run.send("a, then b", start("a"), start("b"), {"say": "About b."})
    assert run.stack() == [("a", "parked"), ("b", "active")]
    reply = run.send("stop b", cancel_twice(), {"say": "Back to a."})
    assert reply.error is None
    assert reply_skill_events(reply) == [("cancelled", "b"), ("resumed", "a")]
    ((name, reason),) = refusals(reply)
    assert name == "cancel_skill" and "'a' is active now" in reason
    assert run.stack() == [("a", "active")]


# --- collect fills the skill's own entries --------------------------------------------------

COLLECTOR = (
    "---\nname: Collector\ndescription: Collects a level.\n---\n"
    ":::ordered_block id=b\nsteps:\n  - id: ask_level\n    collect: level\n:::\n"
)


def test_M7_a_collect_of_a_project_entry_is_a_validate_error(tmp_path: Path) -> None:
    files = {"memory.yml": "level:\n  type: int\n  mutable: true\n"}
    files["skills/collector/skill.md"] = COLLECTOR
    _, diagnostics = load_project(make(tmp_path / "project_entry", files))
    (error,) = [d for d in diagnostics if d.code == "mantle-undeclared-memory"]
    assert error.severity.value == "error"
    assert error.file.endswith("skills/collector/skill.md") and error.span.line == 7
    assert "collect steps fill the skill's own entries" in error.message
    assert "'collector.level'" in error.message
    # Declared by the skill as well: the collect fills the skill's entry, as it runs.
    files["skills/collector/memory.yml"] = "schema:\n  public:\n    level:\n      type: int\n"
    _, diagnostics = load_project(make(tmp_path / "skill_entry", files))
    assert [d for d in diagnostics if d.code == "mantle-undeclared-memory"] == []


# --- button source tools keep their tool constraints ----------------------------------------

BUTTON_TOOLS = '''
from typing import Any

RAN: list[str] = []


def card_options() -> list:
    """Buttons for the cards."""
    RAN.append("card_options")
    return [{"title": "C-11", "payload": "C-11"}]


def pay_options() -> list:
    """Buttons that pay."""
    RAN.append("pay_options")
    return [{"title": "Pay", "payload": "pay"}]
'''

BUTTONS = {
    "skills/s/skill.md": "---\nname: S\ndescription: Buttons.\n"
    "tool_constraints:\n"
    "  - card_options:\n      requires: session.s.card_known\n"
    "  - pay_options:\n      requires_confirmation:\n        enabled: true\n"
    "utter:\n  - utter_cards: {on: activate}\n  - utter_pay: {on: activate}\n---\nPick.\n",
    "skills/s/memory.yml": "schema:\n  public:\n    card_known:\n      type: bool\n",
    "skills/s/tools.py": BUTTON_TOOLS,
    "skills/s/responses.yml": "responses:\n"
    "  utter_cards:\n    - text: Which card?\n      buttons:\n        source: card_options\n"
    "  utter_pay:\n    - text: Pay now?\n      buttons:\n        source: pay_options\n",
}


def test_M5_a_button_source_tool_keeps_its_tool_constraint(tmp_path: Path) -> None:
    root = make(tmp_path, BUTTONS)
    _, diagnostics = load_project(root)
    (warning,) = [d for d in diagnostics if d.code == "mantle-button"]
    assert warning.severity.value == "warning"
    assert "'pay_options' requires confirmation" in warning.message
    run = Driver(root)
    reply = run.send("hi", start("s"), {"say": "Pick one."})
    assert reply.error is None
    ran = run.session.agent.project.skills["s"].tools["card_options"].function.__globals__["RAN"]
    assert ran == []  # neither tool ran
    assert [s["name"] for s in reply_steps(reply, "ACTION_STEP")] == []
    spoken = {s["text"]: s for s in reply_steps(reply, "RESPONSE_STEP")}
    assert spoken["Which card?"]["buttons"] == []
    assert "'card_options' is not available now" in spoken["Which card?"]["buttonsError"]
    assert spoken["Pay now?"]["buttons"] == []
    assert "'pay_options' requires confirmation" in spoken["Pay now?"]["buttonsError"]
    assert reply.buttons == []
