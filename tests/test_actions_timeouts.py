"""Action timeouts: per action, and a hung synchronous tool never holds the turn."""

from __future__ import annotations

import threading
from pathlib import Path

import agentscript
from agentscript.models.scripted import Move, ScriptedModel

AGENT = """\
system:
    instructions: "Be brief."
    messages:
        error: "Something failed."
config:
    developer_name: "t"
start_agent main:
    description: "main"
    reasoning:
        instructions: ->
            | Use the tools.
        actions:
            slow: @actions.slow_report
            quick: @actions.quick_lookup
    actions:
        slow_report:
            description: "A report that hangs"
            target: "flow://Slow"
        quick_lookup:
            description: "A quick lookup"
            target: "flow://Quick"
"""


def test_a_hung_sync_action_times_out_without_holding_the_turn(tmp_path: Path) -> None:
    path = tmp_path / "t.agent"
    path.write_text(AGENT)
    agent = agentscript.load(path, dialect="agentscript")
    release = threading.Event()
    finished: list[bool] = []

    def slow_report() -> dict[str, object]:
        release.wait(timeout=60)
        finished.append(True)
        return {}

    model = ScriptedModel([Move(calls=[("slow", {})]), Move(text="It timed out.")])
    limits = agentscript.Limits(action_timeout=60.0, action_timeouts={"slow_report": 0.05})
    session = agent.session(
        model=model,
        actions={"slow_report": slow_report, "quick_lookup": lambda: {}},
        limits=limits,
    )
    try:
        reply = session.send("make the report")
        # send() came back while the tool is still stuck: nothing waited for its thread.
        assert finished == []
        assert reply.error is None
        action = next(s for s in reply.trace["planTrace"]["steps"] if s["type"] == "ACTION_STEP")
        assert action["error"] == "action 'slow_report' timed out after 0.05 s"
        # The model got the failure as the tool result and answered.
        assert reply.text == "It timed out."
    finally:
        release.set()
