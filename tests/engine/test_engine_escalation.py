"""@utils.escalate says the messaging connection's escalation_message (research A.11, C.3)."""

from __future__ import annotations

from pathlib import Path

import agentscript
from agentscript.models.scripted import Move, ScriptedModel

AGENT = """\
system:
    instructions: "Be brief."
    messages:
        error: "Something failed."
config:
    developer_name: "esc"
connection messaging:
    escalation_message: "Transferring you to a human agent"
    outbound_route_type: "OmniChannelFlow"
    outbound_route_name: "flow://Route_To_Agent"
start_agent main:
    description: "main"
    reasoning:
        instructions: ->
            | Escalate when asked.
        actions:
            human: @utils.escalate
"""


def test_escalate_says_the_escalation_message(tmp_path: Path) -> None:
    path = tmp_path / "esc.agent"
    path.write_text(AGENT)
    agent = agentscript.load(path, dialect="agentscript")
    model = ScriptedModel([Move(calls=[("human", {})])])
    session = agent.session(model=model)
    reply = session.send("I want a person")
    assert reply.escalated and reply.error is None
    assert reply.text == "Transferring you to a human agent"
    events = [s["event"] for s in reply.trace["planTrace"]["steps"] if s["type"] == "EVENT_STEP"]
    assert events == ["escalate"]
    # The message follows the tool result in the history the model sees next turn.
    assert [m.role for m in session.state.history][-2:] == ["tool", "assistant"]


def test_escalate_without_a_connection_says_nothing_itself(tmp_path: Path) -> None:
    path = tmp_path / "esc.agent"
    text = (
        AGENT.split("connection messaging:")[0]
        + "start_agent main:"
        + AGENT.split("start_agent main:")[1]
    )
    path.write_text(text)
    agent = agentscript.load(path, dialect="agentscript")
    reply = agent.session(model=ScriptedModel([Move(calls=[("human", {})])])).send(
        "a person please"
    )
    assert reply.escalated and reply.text == ""
