"""A turn that fails in the middle of a tool step leaves a history the providers accept."""

from __future__ import annotations

from pathlib import Path

from engine_helpers import assert_histories_well_formed, llm_inputs

import agentscript
from agentscript.actions.registry import StubBook
from agentscript.models.scripted import Move, ScriptedModel

AGENT = """\
system:
    instructions: "Be brief."
    messages:
        welcome: "Hi."
        error: "Something failed."
config:
    developer_name: "h"
variables:
    note: mutable string = ""
start_agent main:
    description: "main"
    reasoning:
        instructions: ->
            | Use the tools.
        actions:
            look: @actions.lookup
                set @variables.note = @outputs.text
                run @actions.audit
            other: @actions.lookup
    actions:
        lookup:
            description: "Look something up"
            target: "flow://Lookup"
            outputs:
                text: string
        audit:
            description: "Write an audit record"
            target: "flow://Audit"
"""


def test_failing_callback_mid_step_keeps_every_tool_call_answered(tmp_path: Path) -> None:
    path = tmp_path / "h.agent"
    path.write_text(AGENT)
    agent = agentscript.load(path, dialect="agentscript")
    stubs = StubBook.from_data(
        {"lookup": {"outputs": {"text": "found"}}, "audit": {"error": "audit service down"}}
    )
    model = ScriptedModel()
    session = agent.session(model=model, stubs=stubs)
    # Two calls in one step; the first one's callback runs a deterministic action that fails.
    model.begin_turn([Move(calls=[("look", {}), ("other", {})])])
    first = session.send("look it up twice")
    assert first.error is not None and "audit service down" in first.error
    assert first.text == "Something failed."
    assert session.variables["note"] == "found"  # committed before the failure (S12)
    # The next request carries a history where every tool call has its result.
    model.begin_turn([Move(text="Done.")])
    second = session.send("and now?")
    assert second.error is None
    assert_histories_well_formed(first, second)
    messages = llm_inputs(first, second)[-1]
    answered = {m["tool_call_id"] for m in messages if m["role"] == "tool"}
    asked = {c["id"] for m in messages for c in m.get("tool_calls", [])}
    assert asked == answered and len(asked) == 2
    assert messages[-2] == {"role": "assistant", "content": "Something failed."}
