"""S5, S7, S12, S13 and the extra behaviours: delegation, confirmation, output flags."""

from __future__ import annotations

import json

from engine_helpers import (
    Scripted,
    assert_histories_well_formed,
    play_file,
    steps,
    types,
)

STUBS = {
    "lookup_order": [
        {"outputs": {"status": "shipped", "total": 40, "internal_code": "X", "receipt": "R-2"}},
    ],
    "log_event": {"outputs": {"ok": True}},
}


def tool_results(reply_step: dict[str, object]) -> list[dict[str, object]]:
    messages = reply_step["input"]["messages"]  # type: ignore[index]
    return [m for m in messages if m["role"] == "tool"]  # type: ignore[union-attr]


def test_S5_hidden_tool_is_not_offered_and_a_call_is_refused() -> None:
    playback = play_file("tools", "tools_gates")
    early, later = (t.reply for t in playback.turns)
    shop = [s for s in steps(early, "RESOLUTION_STEP") if s["node"] == "shop"]
    assert "secret" in shop[0]["hiddenTools"] and "secret" not in shop[0]["tools"]
    offered = [t["name"] for t in steps(early, "LLM_STEP")[1]["input"]["tools"]]
    assert "secret" not in offered
    refused = steps(early, "REFUSED_STEP")
    assert [r["name"] for r in refused] == ["secret", "broken_gate"]
    assert refused[0]["reason"] == "tool 'secret' is not available now"
    # Not run: no ACTION_STEP for it, and the action was never called.
    assert [s["name"] for s in steps(early, "ACTION_STEP")] == []
    assert "secret" not in early.actions
    # The refusal went back to the model as the tool result of that call.
    result = tool_results(steps(early, "LLM_STEP")[2])[-1]
    assert result["name"] == "secret"
    assert json.loads(result["content"]) == {"error": "tool 'secret' is not available now"}
    # After verification the same call runs.
    assert "secret" in later.actions
    gate = [s for s in steps(later, "RESOLUTION_STEP") if s["node"] == "shop"]
    assert "secret" in gate[1]["tools"]
    assert steps(later, "ACTION_STEP")[-1]["output"] == {"done": True}


def test_S5_available_when_that_cannot_be_evaluated_hides_the_tool() -> None:
    reply = play_file("tools", "tools_gates").turns[0].reply
    shop = next(s for s in steps(reply, "RESOLUTION_STEP") if s["node"] == "shop")
    assert "broken_gate" in shop["hiddenTools"]
    assert any("treated as false" in w for w in shop["warnings"])
    assert steps(reply, "REFUSED_STEP")[1]["name"] == "broken_gate"


def test_S5_available_when_is_reevaluated_every_iteration() -> None:
    reply = play_file("tools", "tools_gates").turns[1].reply
    shop = [s for s in steps(reply, "RESOLUTION_STEP") if s["node"] == "shop"]
    assert ["secret" in s["tools"] for s in shop] == [False, True, True]


def test_S7_bound_and_llm_inputs_and_callback() -> None:
    reply = play_file("tools", "tools_callbacks").turns[0].reply
    lookup, log = steps(reply, "ACTION_STEP")
    # `with region="EU"` bound by the author, `order_number` filled by the LLM.
    assert lookup["input"] == {"region": "EU", "order_number": "1"}
    assert lookup["source"] == "llm"
    # Callback: set from @outputs, nested run with its own `set`, `if` not taken.
    assert log["source"] == "deterministic" and log["input"] == {"event": "lookup"}
    assert reply.variables["status"] == "processing"
    assert reply.variables["total"] == 12.5
    assert reply.variables["audit"] == 1
    assert lookup["preVars"]["status"] == "" and lookup["postVars"]["status"] == "processing"
    assert reply.path == ["router", "shop"]
    # The LLM schema offers only the LLM-filled input.
    tool = next(t for t in steps(reply, "LLM_STEP")[1]["input"]["tools"] if t["name"] == "lookup")
    assert list(tool["parameters"]["properties"]) == ["order_number"]
    assert tool["parameters"]["required"] == ["order_number"]


def test_S7_transition_in_a_callback_is_deferred_and_the_first_wins() -> None:
    reply = play_file("tools", "tools_callbacks").turns[1].reply
    # Both lookups ran (each with its callback) although go_other came first.
    assert [s["name"] for s in steps(reply, "ACTION_STEP")] == [
        "lookup",
        "log_event",
        "lookup",
        "log_event",
    ]
    assert reply.variables["total"] == 41
    assert reply.variables["audit"] == 3
    transitions = [(s["from"], s["to"], s["via"]) for s in steps(reply, "TRANSITION_STEP")]
    assert transitions[-1] == ("shop", "other", "tool go_other")
    assert reply.path == ["router", "shop", "other"]
    # The transition happened after all calls of the step.
    sequence = types(reply)
    last_action = max(i for i, t in enumerate(sequence) if t == "ACTION_STEP")
    assert sequence.index("TRANSITION_STEP", sequence.index("ACTION_STEP")) > last_action


def test_S7_callback_transition_first_in_the_step_wins() -> None:
    session = Scripted("tools", variables={"customer_id": "C"}, stubs=STUBS)
    reply = session.send(
        "x",
        {"tool": "go_shop"},
        {"tools": [{"tool": "lookup", "args": {"order_number": "2"}}, {"tool": "go_other"}]},
        {"say": "shipped"},
    )
    assert reply.path == ["router", "shop", "shipped"]
    assert steps(reply, "TRANSITION_STEP")[-1]["via"] == "tool lookup"


def test_S12_failing_llm_action_returns_an_error_result_to_the_model() -> None:
    reply = play_file("tools", "tools_failures").turns[0].reply
    action = steps(reply, "ACTION_STEP")[0]
    assert action["error"] == "order service unavailable" and action["output"] is None
    result = tool_results(steps(reply, "LLM_STEP")[-1])[-1]
    assert json.loads(result["content"]) == {"error": "order service unavailable"}
    # The turn goes on: the model answers; the callback did not run.
    assert reply.error is None and reply.text == "The order service is down."
    assert reply.variables["status"] == ""
    assert steps(reply, "ERROR_STEP") == []


def test_S12_failing_deterministic_run_ends_the_turn_and_keeps_committed_state() -> None:
    playback = play_file("tools", "tools_failures")
    failed, after = playback.turns[1].reply, playback.turns[2].reply
    assert failed.error == "database down"
    assert failed.text == "Sorry, the shop had a problem."
    assert types(failed)[-3:] == ["ACTION_STEP", "ERROR_STEP", "RESPONSE_STEP"]
    assert [s["node"] for s in steps(failed, "LLM_STEP")] == ["router"]
    assert failed.variables["note"] == "committed before the failure"
    assert after.error is None and after.text == "Still here."
    assert not playback.failed


def test_S13_escalate_ends_the_turn_with_an_event() -> None:
    reply = play_file("tools", "tools_utilities").turns[0].reply
    assert reply.escalated
    event = steps(reply, "EVENT_STEP")[0]
    assert event["event"] == "escalate" and event["tool"] == "escalate_now"
    assert types(reply)[-1] == "EVENT_STEP"
    assert not reply.ended


def test_S13_end_session_refuses_the_next_turn_without_calling_the_model() -> None:
    playback = play_file("tools", "tools_utilities")
    ended, refused = playback.turns[1].reply, playback.turns[2].reply
    assert ended.ended and steps(ended, "EVENT_STEP")[0]["event"] == "end_session"
    assert refused.refused
    assert refused.error is not None and "session has ended" in refused.error
    assert steps(refused, "LLM_STEP") == []
    assert types(refused) == ["ERROR_STEP"]
    # The unused move shows the model was not asked.
    assert playback.turns[2].unused_moves == []
    assert playback.failed


def test_S13_confirmation_holds_the_call_until_yes() -> None:
    playback = play_file("tools", "tools_confirm")
    asked, yes = playback.turns[0].reply, playback.turns[1].reply
    assert asked.confirmation == "Before I run Refund Payment, please confirm: yes or no?"
    assert asked.text == asked.confirmation
    assert steps(asked, "ACTION_STEP") == []
    assert steps(asked, "EVENT_STEP")[0]["event"] == "confirmation_requested"
    assert asked.variables["refund_id"] == ""
    resolved = steps(yes, "EVENT_STEP")[0]
    assert resolved["event"] == "confirmation_resolved" and resolved["confirmed"] is True
    action = steps(yes, "ACTION_STEP")[0]
    assert action["input"] == {"amount": 20}
    assert yes.variables["refund_id"] == "RF-1"
    assert yes.text == "Refunded: RF-1."


def test_S13_confirmation_no_does_not_run_the_action() -> None:
    playback = play_file("tools", "tools_confirm")
    no = playback.turns[3].reply
    assert steps(no, "EVENT_STEP")[0]["confirmed"] is False
    assert steps(no, "ACTION_STEP") == []
    result = tool_results(steps(no, "LLM_STEP")[0])[-1]
    assert "not run" in json.loads(result["content"])["status"]
    assert no.variables["refund_id"] == "RF-1"  # unchanged since the first refund


def test_S13_delegation_runs_the_subagent_and_returns_its_reply_as_the_tool_result() -> None:
    reply = play_file("tools", "tools_delegate").turns[0].reply
    events = [s["event"] for s in steps(reply, "EVENT_STEP")]
    assert events == ["delegate_start", "delegate_end"]
    assert steps(reply, "EVENT_STEP")[1]["reply"] == "Helper says 42."
    assert reply.variables["helper_runs"] == 1  # the delegate's before_reasoning ran
    # Control came back to the caller, which produced the reply of the turn.
    assert reply.node == "shop"
    assert reply.text == "The helper said 42."
    result = tool_results(steps(reply, "LLM_STEP")[-1])[-1]
    assert json.loads(result["content"]) == {"reply": "Helper says 42."}


def test_delegation_keeps_the_message_history_well_formed() -> None:
    reply = play_file("tools", "tools_delegate").turns[0].reply
    assert_histories_well_formed(reply)


def test_every_history_sent_to_the_model_is_well_formed() -> None:
    for name in ("tools_gates", "tools_callbacks", "tools_failures", "tools_confirm"):
        assert_histories_well_formed(*[turn.reply for turn in play_file("tools", name).turns])


def test_filter_from_agent_outputs_never_reach_the_model() -> None:
    playback = play_file("tools", "tools_callbacks")
    for turn in playback.turns:
        for step in steps(turn.reply, "LLM_STEP"):
            assert "X-SECRET-9" not in json.dumps(step["input"])
    first = playback.turns[0].reply
    result = tool_results(steps(first, "LLM_STEP")[-1])[-1]
    assert json.loads(result["content"]) == {
        "status": "processing",
        "total": 12.5,
        "receipt": "R-1",
    }


def test_is_displayable_outputs_are_in_reply_displayable() -> None:
    playback = play_file("tools", "tools_callbacks")
    assert playback.turns[0].reply.displayable == [
        {"action": "lookup_order", "outputs": {"receipt": "R-1"}}
    ]
    assert [d["outputs"]["receipt"] for d in playback.turns[1].reply.displayable] == ["R-2", "R-3"]
