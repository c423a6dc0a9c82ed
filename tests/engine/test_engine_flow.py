"""S1-S4, S6, S9, S11: where a turn starts, hooks, resolution, transitions, limits."""

from __future__ import annotations

from engine_helpers import Scripted, play_file, steps, types

from agentscript.engine.turn import Limits


def test_S1_every_turn_starts_at_the_router_by_default() -> None:
    second = play_file("flow", "flow_two_turns").turns[1].reply
    enter = steps(second, "NODE_ENTER")[0]
    assert enter == {"type": "NODE_ENTER", "node": "router", "reason": "turn start (router)"}
    assert second.path == ["router"]
    assert second.variables["router_before"] == 2


def test_S1_reset_to_initial_node_false_keeps_the_last_subagent() -> None:
    playback = play_file("sticky", "flow_two_turns")
    first, second = (t.reply for t in playback.turns)
    assert first.node == "a"
    assert steps(second, "NODE_ENTER")[0]["node"] == "a"
    assert steps(second, "NODE_ENTER")[0]["reason"] == "turn start (previous subagent)"
    assert second.path == ["a"]
    # The router did not run again; a's before_reasoning did (a new entry of a).
    assert second.variables["router_before"] == 1
    assert second.variables["a_before"] == 2
    assert steps(second, "LLM_STEP")[0]["node"] == "a"


def test_S2_before_reasoning_runs_once_per_entry_and_again_on_reentry() -> None:
    reply = play_file("flow", "flow_reentry").turns[0].reply
    assert reply.path == ["router", "a", "b", "a"]
    hooks = [(s["node"], s["hook"]) for s in steps(reply, "HOOK_STEP")]
    assert hooks == [
        ("router", "before_reasoning"),
        ("a", "before_reasoning"),
        ("b", "before_reasoning"),
        ("a", "before_reasoning"),
        ("a", "after_reasoning"),
    ]
    # a's before_reasoning did not rerun between its two LLM calls of the first entry.
    assert reply.variables["a_before"] == 2
    first_a = steps(reply, "HOOK_STEP")[1]
    assert first_a["preVars"]["a_before"] == 0 and first_a["postVars"]["a_before"] == 1


def test_S3_set_runs_before_every_llm_call() -> None:
    reply = play_file("flow", "flow_reentry").turns[0].reply
    a_resolutions = [s for s in steps(reply, "RESOLUTION_STEP") if s["node"] == "a"]
    counters = [
        (s["preVars"]["a_resolutions"], s["postVars"]["a_resolutions"]) for s in a_resolutions
    ]
    assert counters == [(0, 1), (1, 2), (2, 3)]
    a_calls = [s for s in steps(reply, "LLM_STEP") if s["node"] == "a"]
    assert len(a_calls) == len(a_resolutions) == 3
    assert [s["input"]["instructions"].splitlines()[0] for s in a_calls] == [
        "Resolution 1 of a.",
        "Resolution 2 of a.",
        "Resolution 3 of a.",
    ]


def test_S3_if_else_if_else_pick_one_branch_against_current_state() -> None:
    playback = play_file("flow", "flow_reentry")
    first, second = (t.reply for t in playback.turns)
    texts = [s["instructions"] for s in steps(first, "RESOLUTION_STEP") if s["node"] == "a"]
    assert texts[0] == "Resolution 1 of a.\nLevel zero.\nUse set_level or go_b."
    # The tool call changed the level; the next resolution picks the `else if` branch.
    assert texts[1] == "Resolution 2 of a.\nLevel one.\nUse set_level or go_b."
    later = [s["instructions"] for s in steps(second, "RESOLUTION_STEP") if s["node"] == "a"]
    # `else` branch, with an interpolated expression.
    assert later[-1] == "Resolution 5 of a.\nLevel high: 17.\nUse set_level or go_b."


def test_S3_the_llm_never_sees_procedure_code() -> None:
    reply = play_file("flow", "flow_reentry").turns[0].reply
    for step in steps(reply, "LLM_STEP"):
        text = step["input"]["instructions"] + step["input"]["system"]
        for word in ("if ", "set ", "run ", "transition to", "available when", "{!", "@variables"):
            assert word not in text


def test_S3_actions_reference_renders_the_tool_name() -> None:
    reply = play_file("flow", "flow_reentry").turns[0].reply
    assert steps(reply, "LLM_STEP")[0]["input"]["instructions"] == "Route with go_a."


def test_S4_transition_mid_instructions_discards_the_partial_prompt() -> None:
    reply = play_file("flow", "flow_jump").turns[0].reply
    assert reply.path == ["router", "jumper", "b"]
    jumper = [s for s in steps(reply, "RESOLUTION_STEP") if s["node"] == "jumper"]
    assert len(jumper) == 1
    assert jumper[0]["transition"] == "b"
    assert jumper[0]["discarded"] == "Partial text of jumper."
    # No LLM call for jumper; the LLM sees only b's prompt.
    assert [s["node"] for s in steps(reply, "LLM_STEP")] == ["router", "b"]
    assert steps(reply, "LLM_STEP")[1]["input"]["instructions"] == "This is b."
    # jumper's after_reasoning never ran; b's before_reasoning did; state set before the jump kept.
    hooks = [(s["node"], s["hook"]) for s in steps(reply, "HOOK_STEP")]
    assert ("jumper", "after_reasoning") not in hooks
    assert ("b", "before_reasoning") in hooks
    assert reply.variables["marker"] == "set before the jump"
    assert reply.text == "b answers."
    transitions = [(s["from"], s["to"]) for s in steps(reply, "TRANSITION_STEP")]
    assert transitions == [("router", "jumper"), ("jumper", "b")]


def test_S4_without_the_transition_the_whole_prompt_is_built() -> None:
    session = Scripted("flow", variables={"jump": False})
    reply = session.send("x", {"tool": "go_jump"}, {"say": "jumper answers"})
    assert reply.path == ["router", "jumper"]
    assert steps(reply, "LLM_STEP")[1]["input"]["instructions"] == (
        "Partial text of jumper.\nRest of jumper."
    )
    assert reply.variables["marker"] == "jumper after_reasoning ran"


def test_S6_after_reasoning_runs_once_after_the_text_answer() -> None:
    reply = play_file("flow", "flow_reentry").turns[0].reply
    sequence = types(reply)
    assert sequence[-2:] == ["RESPONSE_STEP", "HOOK_STEP"]
    after = [s for s in steps(reply, "HOOK_STEP") if s["hook"] == "after_reasoning"]
    assert len(after) == 1  # not after each tool call
    assert reply.variables["a_after"] == 1


def test_S6_transition_in_after_reasoning_runs_the_target_in_the_same_turn() -> None:
    reply = play_file("flow", "flow_after_transition").turns[0].reply
    assert reply.path == ["router", "finisher", "b"]
    assert reply.messages == ["First reply.", "Second reply."]
    assert reply.text == "First reply.\n\nSecond reply."
    assert reply.node == "b"
    assert reply.variables["finisher_after"] == 1
    after = [s for s in steps(reply, "HOOK_STEP") if s["hook"] == "after_reasoning"]
    assert after[0]["node"] == "finisher" and after[0]["transition"] == "b"
    assert steps(reply, "TRANSITION_STEP")[-1]["from"] == "finisher"


def test_S9_subagent_system_instructions_replace_the_global_ones() -> None:
    reply = play_file("flow", "flow_reentry").turns[0].reply
    systems = {s["node"]: s["input"]["system"] for s in steps(reply, "LLM_STEP")}
    assert systems == {
        "router": "Global system prompt.",
        "a": "System prompt of a.",
        "b": "Global system prompt.",
    }


def test_S11_transition_limit_ends_the_turn_with_the_error_message() -> None:
    playback = play_file("flow", "flow_loop")
    looped, after = (t.reply for t in playback.turns)
    assert looped.error is not None and "transitions" in looped.error
    assert looped.text == "Something went wrong (flow)."
    assert steps(looped, "ERROR_STEP")[0]["message"] == looped.error
    assert len(steps(looped, "TRANSITION_STEP")) == Limits().max_transitions + 1
    assert steps(looped, "LLM_STEP") == []
    # The session stays usable.
    assert after.error is None and after.text == "Fine again."
    assert not playback.failed


def test_S11_llm_iteration_limit_ends_the_turn_and_the_session_goes_on() -> None:
    session = Scripted("flow", limits=Limits(max_llm_calls=3))
    moves = [{"tool": "go_a"}] + [{"tool": "set_level", "args": {"level": 1}}] * 5
    reply = session.send("spin", *moves)
    assert reply.error is not None and "LLM calls" in reply.error
    assert reply.text == "Something went wrong (flow)."
    assert len(steps(reply, "LLM_STEP")) == 3
    assert types(reply)[-2:] == ["ERROR_STEP", "RESPONSE_STEP"]
    # State committed before the limit is kept.
    assert reply.variables["level"] == 1
    ok = session.send("again", {"say": "Back."})
    assert ok.error is None and ok.text == "Back."
