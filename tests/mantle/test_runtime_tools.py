"""Tool execution in Mantle turns: failures, timeouts, stubs, context, gates that raise."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import agentscript
from agentscript.actions.settings import ActionSettings
from agentscript.conversation import parse_conversation
from agentscript.diagnostics import AgentScriptError
from agentscript.mantle.runtime import MantleAgent, load_mantle_agent
from agentscript.playback import Playback, play
from agentscript.trace_inputs import rebuild_messages

TOOLS = '''
import asyncio


class ToolResult:
    def __init__(self, llm_response):
        self.llm_response = llm_response


def boom() -> dict:
    """Always fails."""
    raise RuntimeError("kaput")


async def hang() -> dict:
    """Never answers in time."""
    await asyncio.sleep(30)
    return {}


def weird() -> dict:
    """Gated by a condition that cannot be evaluated."""
    return {"ok": True}


async def talk(context=None):
    """Speaks and writes memory."""
    await context.send("Hello from the tool")
    context.memory.set("count", context.memory.get("count") + 1)
    return ToolResult({"said": True})


def bad_write(context=None) -> dict:
    """Writes an undeclared entry."""
    name = "no" + "pe"  # not a literal: the loader cannot see it, the runtime must refuse
    context.memory.set(name, 1)
    return {}


def lock(context=None) -> dict:
    """Writes a write-once project entry."""
    context.memory.set("owner", "someone else")
    return {}


def shout() -> dict:
    """Prints, then answers."""
    print("loud")
    return {"ok": True}


def add(a: int, b: int = 0) -> dict:
    """Adds.

    Args:
        a: First.
        b: Second.
    """
    return {"sum": a + b}
'''

SKILL = """---
name: Tools
description: Exercise tools.
tool_constraints:
  - weird:
      requires: session.tools.count > "x"
  - boom:
      on_failure: utter_failed
---
Use the tools.
"""


@pytest.fixture(scope="module")
def agent(tmp_path_factory: pytest.TempPathFactory) -> MantleAgent:
    root = tmp_path_factory.mktemp("tools_project")
    (root / "agent.yml").write_text(
        "agent:\n  id: tools\n  persona: You test tools.\ntool_timeout: 0.2\n"
    )
    (root / "memory.yml").write_text("owner:\n  type: text\n  initial_value: me\n")
    (root / "responses.yml").write_text("responses:\n  utter_failed:\n    - text: That failed.\n")
    skill = root / "skills" / "tools"
    skill.mkdir(parents=True)
    (skill / "skill.md").write_text(SKILL)
    (skill / "memory.yml").write_text(
        "schema:\n  public:\n    count:\n      type: int\n      initial_value: 3\n"
    )
    (skill / "tools.py").write_text(TOOLS)
    loaded = agentscript.load(root)
    assert isinstance(loaded, MantleAgent)
    return loaded


def run(agent: MantleAgent, calls: str, actions: str = "") -> Playback:
    text = f"""
{actions}
turns:
  - user: "go"
    model:
      - tool: activate_skill
        args: {{skill: tools}}
{calls}
      - say: "done"
"""
    playback = play(agent, parse_conversation(text))
    assert not playback.failed and playback.turns[0].reply.error is None
    return playback


def actions(playback: Playback) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = playback.turns[0].reply.trace["planTrace"]["steps"]
    return [s for s in found if s["type"] == "ACTION_STEP"]


def tool_messages(playback: Playback) -> list[str]:
    model = playback.turns[0].reply.trace["planTrace"]["steps"]
    last = [s for s in model if s["type"] == "LLM_STEP"][-1]["input"]["messages"]
    return [m["content"] for m in last if m["role"] == "tool"]


def test_a_raising_tool_gives_an_error_result_and_on_failure(agent: MantleAgent) -> None:
    playback = run(agent, "      - tool: boom")
    step = actions(playback)[0]
    assert step["name"] == "boom" and "RuntimeError: kaput" in step["error"]
    assert "kaput" in tool_messages(playback)[-1]
    assert playback.turns[0].reply.messages == ["That failed.", "done"]


def test_a_hanging_tool_times_out_with_an_error_result(agent: MantleAgent) -> None:
    playback = run(agent, "      - tool: hang")
    assert "timed out" in actions(playback)[0]["error"]


def test_a_tool_whose_condition_raises_stays_hidden_and_is_refused(agent: MantleAgent) -> None:
    playback = run(agent, "      - tool: weird")
    steps = playback.turns[0].reply.trace["planTrace"]["steps"]
    resolution = [s for s in steps if s["type"] == "RESOLUTION_STEP"][1]
    assert "weird" in resolution["hiddenTools"] and "weird" not in resolution["tools"]
    assert [s["name"] for s in steps if s["type"] == "REFUSED_STEP"] == ["weird"]
    assert actions(playback) == []


def test_context_send_memory_and_tool_result(agent: MantleAgent) -> None:
    playback = run(agent, "      - tool: talk")
    assert playback.turns[0].reply.messages == ["Hello from the tool", "done"]
    step = actions(playback)[0]
    assert step["output"] == {"said": True}
    assert step["preVars"]["tools.count"] == 3 and step["postVars"]["tools.count"] == 4


def test_undeclared_and_write_once_memory_writes_fail_the_tool(agent: MantleAgent) -> None:
    playback = run(agent, "      - tool: bad_write\n      - tool: lock")
    errors = [s["error"] for s in actions(playback)]
    assert "'nope' is not a declared memory entry" in errors[0]
    assert "project.owner is already set" in errors[1]
    assert playback.variables["project.owner"] == "me"


def test_arguments_are_checked_against_the_signature(agent: MantleAgent) -> None:
    playback = run(
        agent,
        '      - tool: add\n        args: {a: "one"}\n'
        "      - tool: add\n        args: {b: 1}\n"
        "      - tool: add\n        args: {a: 1, c: 2}\n"
        "      - tool: add\n        args: {a: 2, b: 3}",
    )
    steps = playback.turns[0].reply.trace["planTrace"]["steps"]
    reasons = [s["reason"] for s in steps if s["type"] == "REFUSED_STEP"]
    assert "expected integer" in reasons[0]
    assert "missing required argument 'a'" in reasons[1]
    assert "unknown argument(s) ['c']" in reasons[2]
    assert actions(playback)[0]["output"] == {"sum": 5}


def test_conversation_stubs_win_over_real_tools(agent: MantleAgent) -> None:
    stubbed = "actions:\n  boom: {outputs: {fine: true}}\n  add: [{error: unavailable}]"
    playback = run(agent, "      - tool: boom\n      - tool: add\n        args: {a: 1}", stubbed)
    first, second = actions(playback)
    assert first["output"] == {"fine": True} and first["error"] is None
    assert second["error"] == "unavailable"


def ran(step: dict[str, Any]) -> tuple[Any, Any, Any]:
    return step["printed"], step["ranTarget"], step["stubbed"]


def test_a_tool_step_says_what_it_printed_what_ran_and_whether_a_stub_answered(
    agent: MantleAgent,
) -> None:
    # The keys of an Agent Script ACTION_STEP, filled the same way (trace_steps.action_ran).
    stub = "actions:\n  boom: {outputs: {fine: true}}"
    playback = run(
        agent,
        "      - tool: add\n        args: {a: 1}\n      - tool: shout\n      - tool: boom",
        stub,
    )
    assert [ran(s) for s in actions(playback)] == [
        (None, None, False),
        ({"stdout": "loud\n"}, None, False),
        (None, None, True),
    ]


def test_a_tool_run_by_a_mapped_target_names_it(tmp_path: Path) -> None:
    # agentscript.toml's [actions.targets] is dropped for Mantle projects (maps_targets), but
    # settings assigned to the agent keep their mapping: the trace says what really ran.
    skill = tmp_path / "project" / "skills" / "s"
    skill.mkdir(parents=True)
    (tmp_path / "project" / "agent.yml").write_text("agent:\n  id: x\n  persona: P.\n")
    (skill / "skill.md").write_text("---\nname: S\ndescription: D.\n---\nCall own.\n")
    (skill / "tools.py").write_text(
        'def own() -> dict:\n    """Own."""\n    return {"by": "own"}\n'
    )
    # The agent's folder, for python:// modules, is the one holding the project.
    (tmp_path / "backend.py").write_text(
        'def other() -> dict:\n    print("mapped")\n    return {"by": "mapped"}\n'
    )
    agent = agentscript.load(tmp_path / "project")
    agent.action_settings = ActionSettings(targets={"mantle://s/own": "python://backend:other"})
    text = """
turns:
  - user: "go"
    model:
      - tool: activate_skill
        args: {skill: s}
      - tool: own
      - say: "done"
"""
    playback = play(agent, parse_conversation(text))
    (step,) = actions(playback)
    assert step["target"] == "mantle://s/own" and step["output"] == {"by": "mapped"}
    assert ran(step) == ({"stdout": "mapped\n"}, "python://backend:other", False)


def test_unknown_tool_and_tools_without_a_skill_are_refused(agent: MantleAgent) -> None:
    text = """
turns:
  - user: "go"
    model:
      - tool: add
        args: {a: 1}
      - tool: activate_skill
        args: {skill: tools}
      - tool: nothing_here
      - say: "done"
"""
    playback = play(agent, parse_conversation(text))
    steps = playback.turns[0].reply.trace["planTrace"]["steps"]
    reasons = [s["reason"] for s in steps if s["type"] == "REFUSED_STEP"]
    assert "no skill is active" in reasons[0]
    assert "unknown tool 'nothing_here'" in reasons[1]


def test_missing_tools_are_errors_unless_stubbed(tmp_path: Path) -> None:
    skill = tmp_path / "skills" / "s"
    skill.mkdir(parents=True)
    (tmp_path / "agent.yml").write_text("agent:\n  id: x\n  persona: P.\n")
    (skill / "skill.md").write_text(
        "---\nname: S\ndescription: D.\nimport_tools: [lookup]\n---\nCall lookup.\n"
    )
    with pytest.raises(AgentScriptError) as failure:
        agentscript.load(tmp_path)
    assert any(d.code == "mantle-unresolved-tool" for d in failure.value.diagnostics)
    agent = load_mantle_agent(tmp_path, stub_missing_tools=True)
    text = """
turns:
  - user: "go"
    model:
      - tool: activate_skill
        args: {skill: s}
      - tool: lookup
        args: {q: 1}
      - say: "done"
"""
    playback = play(agent, parse_conversation(text))
    step = [
        s for s in playback.turns[0].reply.trace["planTrace"]["steps"] if s["type"] == "ACTION_STEP"
    ]
    assert step[0]["output"] == {"ok": True, "stub": "lookup", "arguments": {"q": 1}}


def test_messages_said_during_tool_calls_follow_the_answers(agent: MantleAgent) -> None:
    # Regression (fuzz): providers need a call's answer right after the call; a tool's
    # context.send and an on_failure response used to land in between.
    playback = run(agent, "      - tool: talk\n      - tool: boom")
    # The full input of the last call (LLM_STEPs record only what each call added).
    messages = rebuild_messages([playback.turns[0].reply.trace])[-1]
    shape = [
        m["tool_calls"][0]["name"] if m.get("tool_calls") else m.get("name") or m["content"]
        for m in messages
    ]
    assert shape[-6:] == ["talk", "talk", "Hello from the tool", "boom", "boom", "That failed."]
    assert [m["role"] for m in messages[-6:]] == ["assistant", "tool", "assistant"] * 2


def test_engine_tools_are_bounded_like_skill_tools(agent: MantleAgent) -> None:
    # Regression (fuzz): set_fields stored arguments of any size.
    huge = "y" * 25_000
    playback = run(agent, f"      - tool: set_fields\n        args: {{count: {huge}}}")
    steps = playback.turns[0].reply.trace["planTrace"]["steps"]
    refused = [s["reason"] for s in steps if s["type"] == "REFUSED_STEP"]
    assert refused == ["arguments of 'set_fields' are too large (25013 characters)"]
    assert actions(playback) == []
