"""Fixes from the second Mantle-over-HTTP audit: ``/session_end`` as a session's first message,
``[actions] isolation = "process"`` refused for Mantle projects, ``async def`` tools that need
no pool thread, and memory coercion kept to the lossless forms (integral floats up to 2**53,
numbers as ASCII decimal text)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mantle_helpers import Driver, make, reply_said, reply_skill_events, reply_steps, start

import agentscript
from agentscript.actions.settings import ActionConfigError
from agentscript.diagnostics import UNKNOWN_SPAN, AgentScriptError
from agentscript.mantle import load_project
from agentscript.mantle.memory import MemoryWriteError, coerce_value
from agentscript.mantle.model import MemoryEntry
from agentscript.mantle.runtime import MantleAgent
from agentscript.models.scripted import ScriptedModel
from agentscript.validation import validate_path

# --- 1. /session_end as the first message ---------------------------------------------------

ENDING = {
    "agent.yml": "agent:\n  id: t\n  persona: You are a bot.\nconversation:\n  before_end: [bye]\n",
    "responses.yml": "responses:\n  utter_greet:\n    - text: Welcome to the shop!\n"
    "  utter_ask_rating:\n    - text: Rate me 1-5?\n",
    "skills/default_session_start/skill.md": "---\nname: Start\ndescription: Greets.\n---\n"
    ":::ordered_block id=greet\nsteps:\n  - id: hi\n    action: utter_greet\n:::\n",
    "skills/bye/skill.md": "---\nname: Bye\ndescription: Asks for a rating.\n---\n"
    ":::ordered_block id=rate\nsteps:\n  - id: ask\n    collect: rating\n"
    "    utterance: utter_ask_rating\n:::\n",
    "skills/bye/memory.yml": "schema:\n  public:\n    rating: {type: int, description: 1-5.}\n",
}


def test_a_session_ended_before_it_started_never_runs_its_start_skill(tmp_path: Path) -> None:
    run = Driver(make(tmp_path, ENDING))
    first = run.send("/session_end")
    assert reply_said(first) == ["Rate me 1-5?"]
    assert ("activated", "default_session_start") not in reply_skill_events(first)
    # The answer to the before_end skill: the session used to start now, greeting the user in
    # the last turn of the conversation.
    last = run.send("3", {"tool": "set_fields", "args": {"rating": 3}}, {"say": "Thanks."})
    assert last.error is None and last.ended
    assert "Welcome to the shop!" not in reply_said(last)
    assert reply_skill_events(last) == [("completed", "bye")]


def test_a_session_start_signal_while_the_session_ends_is_ignored(tmp_path: Path) -> None:
    run = Driver(make(tmp_path, ENDING))
    run.send("/session_end")
    again = run.send("/session_start")  # the model is not asked: no moves scripted
    assert again.error is None and not again.ended
    assert reply_said(again) == [] and reply_skill_events(again) == []
    ignored = [
        (s["signal"], s["reason"])
        for s in reply_steps(again, "EVENT_STEP")
        if s["event"] == "signal_ignored"
    ]
    assert ignored == [("/session_start", "the session is ending")]
    assert run.stack() == [("bye", "active")]


# --- 2. process isolation refused -------------------------------------------------------------

TOOLS = {
    "skills/tk/skill.md": "---\nname: Toolkit\ndescription: Tools.\n---\nUse the tools.\n",
    "skills/tk/tools.py": (
        "import threading\n\n"
        "RELEASE = threading.Event()\n\n\n"
        "def hang() -> dict:\n"
        '    """Hold a pool thread until the test releases it."""\n'
        "    RELEASE.wait(30)\n"
        '    return {"ok": True}\n\n\n'
        "async def quick(context=None) -> dict:\n"
        '    """Answer at once."""\n'
        '    return {"ok": True, "memory": context is not None}\n'
    ),
}


def with_actions(tmp_path: Path, table: str) -> Path:
    root = make(tmp_path, TOOLS)
    (root / "agentscript.toml").write_text(table)
    return root


@pytest.mark.parametrize(
    ("table", "named"),
    [
        ('[actions]\nisolation = "process"\n', '[actions] isolation = "process"'),
        (
            '[actions.isolation_by_action]\nhang = "process"\n',
            '[actions.isolation_by_action] hang = "process"',
        ),
    ],
)
def test_process_isolation_is_a_config_error_in_load_and_validate(
    tmp_path: Path, table: str, named: str
) -> None:
    root = with_actions(tmp_path, table)
    with pytest.raises(AgentScriptError) as failure:
        agentscript.load(root)
    (loaded,) = failure.value.diagnostics
    (validated,) = [d for d in validate_path(root) if d.is_error]
    for diag in (loaded, validated):
        assert diag.code == "config-error"
        assert diag.file == str(root / "agentscript.toml")
        assert named in diag.message and "threads or inline" in diag.message
        assert diag.message.startswith(str(root / "agentscript.toml"))


def test_other_isolation_settings_still_load(tmp_path: Path) -> None:
    # "process" for a name that is no tool of the project runs nothing: not refused.
    table = '[actions]\nisolation = "inline"\n[actions.isolation_by_action]\nother = "process"\n'
    root = with_actions(tmp_path, table)
    assert not any(d.is_error for d in validate_path(root))
    assert isinstance(agentscript.load(root), MantleAgent)


def test_an_agent_built_from_the_project_refuses_process_isolation_at_its_first_session(
    tmp_path: Path,
) -> None:
    project, _ = load_project(with_actions(tmp_path, '[actions]\nisolation = "process"\n'))
    assert project is not None
    agent = MantleAgent(project)
    for _ in range(2):  # not kept: every session is refused, not only the first
        with pytest.raises(ActionConfigError, match="threads or inline"):
            agent.session(model=ScriptedModel())


# --- 3. async tools need no pool thread ------------------------------------------------------


def call(tool: str) -> dict[str, Any]:
    return {"tool": tool, "args": {}}


def test_an_async_tool_runs_while_timed_out_sync_tools_hold_every_pool_thread(
    tmp_path: Path,
) -> None:
    root = with_actions(tmp_path, "[actions]\nworkers = 1\n")
    agent_yml = root / "agent.yml"
    agent_yml.write_text(agent_yml.read_text() + "tool_timeout: 0.5\n")
    run = Driver(root)
    hang = run.session.agent.project.skills["tk"].tools["hang"]  # type: ignore[attr-defined]
    try:
        held = run.send("go", start("tk"), call("hang"), {"say": "Still waiting."})
        (step,) = reply_steps(held, "ACTION_STEP")
        assert "timed out" in step["error"]  # the one pool thread stays taken
        reply = run.send("again", call("quick"), {"say": "Done."})
        (step,) = reply_steps(reply, "ACTION_STEP")
        assert step["error"] is None
        assert step["output"] == {"ok": True, "memory": True}
        assert step["target"] == "mantle://tk/quick"
    finally:
        assert hang.function is not None
        hang.function.__globals__["RELEASE"].set()


# --- 4 and 5. memory coercion ------------------------------------------------------------------


def entry(kind: str) -> MemoryEntry:
    return MemoryEntry("s", "x", kind, "f", UNKNOWN_SPAN)


@pytest.mark.parametrize("value", [1e23, 1e300, -1e300, 2.0**53 + 2])
def test_an_int_entry_refuses_integral_floats_past_2_53(value: float) -> None:
    with pytest.raises(MemoryWriteError, match=r"s\.x: .* is past 2\*\*53"):
        coerce_value(entry("int"), value)


@pytest.mark.parametrize("value", [2.0**53, -(2.0**53), 3.0])
def test_an_int_entry_takes_integral_floats_up_to_2_53(value: float) -> None:
    assert coerce_value(entry("int"), value) == int(value)


@pytest.mark.parametrize(
    ("kind", "value"),
    [
        ("int", "\u0663"),  # ARABIC-INDIC DIGIT THREE
        ("int", "\uff14\uff12"),  # fullwidth 42
        ("int", "1_000"),
        ("int", "\u3000" + "7"),  # an ideographic space around it
        ("float", "1_0.5"),
        ("float", "\u0663.5"),
        ("float", "\uff11.5"),
        ("float", "inf"),
        ("float", "nan"),
        ("float", "1e400"),
        ("float", "."),
        ("float", "1e5\u3000"),
    ],
)
def test_numbers_as_text_outside_ascii_decimal_forms_are_refused(kind: str, value: str) -> None:
    with pytest.raises(MemoryWriteError, match=rf"s\.x: expected a {kind} value"):
        coerce_value(entry(kind), value)


@pytest.mark.parametrize(
    ("kind", "value", "expected"),
    [
        ("int", " 42 ", 42),
        ("int", "+7", 7),
        ("int", "-7", -7),
        ("float", "2.5", 2.5),
        ("float", "-.5", -0.5),
        ("float", "5.", 5.0),
        ("float", "1e5", 100000.0),
        ("float", " -1.5E-3 ", -0.0015),
        ("float", "3", 3.0),
    ],
)
def test_numbers_as_ascii_decimal_text_are_taken(kind: str, value: str, expected: object) -> None:
    assert coerce_value(entry(kind), value) == expected


def test_session_variables_are_coerced_by_the_same_rules(tmp_path: Path) -> None:
    memory = {"memory.yml": "n:\n  type: int\n  description: A number.\n"}
    agent = agentscript.load(make(tmp_path, {**memory, **TOOLS}))
    for value in (1e300, "1_000", "\u0663"):
        with pytest.raises(ValueError, match=r"project\.n"):
            agent.session(model=ScriptedModel(), variables={"project.n": value})
    session = agent.session(model=ScriptedModel(), variables={"project.n": "12"})
    assert session.state.variables["project.n"] == 12
