"""Connected subagents called as tools: target through handlers/stubs, inputs, after_response."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import agentscript
from agentscript.actions.registry import ActionRequest
from agentscript.models.scripted import Move, ScriptedModel

AGENT = """\
system:
    instructions: "Be brief."
    messages:
        error: "Something failed."
config:
    developer_name: "conn"
variables:
    customer_id: mutable string = "C-7"
    refund_requested: mutable boolean = False
connected_subagent Refunds:
    target: "agent://Refund_Agent"
    description: "Handles refunds end to end"
    inputs:
        customer_id: string = @variables.customer_id
        reason: string
    after_response:
        set @variables.refund_requested = True
start_agent main:
    description: "main"
    reasoning:
        instructions: ->
            | Help the customer.
        actions:
            refund: @connected_subagent.Refunds
                with reason = ...
"""


def test_connected_subagent_runs_through_its_scheme_handler(tmp_path: Path) -> None:
    path = tmp_path / "conn.agent"
    path.write_text(AGENT)
    agent = agentscript.load(path, dialect="agentscript")
    seen: list[ActionRequest] = []

    def refund_agent(request: ActionRequest) -> dict[str, Any]:
        seen.append(request)
        return {"reply": f"Refund opened for {request.inputs['customer_id']}."}

    agent.register_handler("agent", refund_agent)
    model = ScriptedModel(
        [Move(calls=[("refund", {"reason": "damaged"})]), Move(text="Your refund is open.")]
    )
    session = agent.session(model=model)
    reply = session.send("I want a refund")
    assert reply.error is None
    # The model filled only `reason`; `customer_id` came from its `= @variables...` default.
    assert [(r.target, r.inputs) for r in seen] == [
        ("agent://Refund_Agent", {"customer_id": "C-7", "reason": "damaged"})
    ]
    tool_schema = model.requests[0].tools[0].parameters
    assert tool_schema["required"] == ["reason"]
    # after_response ran once the connected agent answered.
    assert session.variables["refund_requested"] is True
    # The model got the connected agent's reply as the tool result.
    result = model.requests[1].messages[-1]
    assert result.role == "tool" and json.loads(result.content) == {
        "reply": "Refund opened for C-7."
    }


def test_connected_subagent_without_handler_is_an_error_result(tmp_path: Path) -> None:
    path = tmp_path / "conn.agent"
    path.write_text(AGENT)
    agent = agentscript.load(path, dialect="agentscript")
    model = ScriptedModel([Move(calls=[("refund", {"reason": "late"})]), Move(text="Sorry.")])
    reply = agent.session(model=model).send("refund please")
    assert reply.error is None
    error = json.loads(model.requests[1].messages[-1].content)["error"]
    assert "Refunds" in error and "agent://" in error


def test_transition_to_a_connected_subagent_ends_the_turn_with_a_clear_error(
    tmp_path: Path,
) -> None:
    text = AGENT.replace(
        "            | Help the customer.\n",
        "            | Help the customer.\n            transition to @connected_subagent.Refunds\n",
    )
    path = tmp_path / "conn.agent"
    path.write_text(text)
    agent = agentscript.load(path, dialect="agentscript")
    reply = agent.session(model=ScriptedModel()).send("refund please")
    assert reply.error is not None and "call it as a tool" in reply.error
    assert reply.text == "Something failed."
