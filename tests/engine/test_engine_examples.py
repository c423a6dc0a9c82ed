"""The seed 000 examples: post-action check at the top, and the security gate."""

from __future__ import annotations

import json
from pathlib import Path

from engine_helpers import steps

import agentscript
from agentscript.conversation import load_conversation
from agentscript.playback import Playback, play

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def play_example(folder: str, agent: str, conversation: str) -> Playback:
    base = EXAMPLES / folder
    return play(agentscript.load(base / agent), load_conversation(base / conversation))


def test_S4_post_action_check_at_the_top_transitions_on_re_resolution() -> None:
    playback = play_example("post_action_check", "post_action_check.agent", "cancel_order.yaml")
    done = playback.turns[2].reply
    resolutions = [s for s in steps(done, "RESOLUTION_STEP") if s["node"] == "cancel_order"]
    assert [s["iteration"] for s in resolutions] == [1, 2]
    assert "transition" not in resolutions[0]
    assert resolutions[1]["transition"] == "confirmation"
    assert resolutions[1]["discarded"] == "Your order has been cancelled successfully."
    # The LLM never saw the stale "What is your order number?" after the action succeeded.
    cancel_calls = [s for s in steps(done, "LLM_STEP") if s["node"] == "cancel_order"]
    assert len(cancel_calls) == 1
    final = steps(done, "LLM_STEP")[-1]
    assert final["node"] == "confirmation"
    assert final["input"]["instructions"] == (
        "Confirm to the customer that order A-100 is cancelled.\nGive the reference CX-100."
    )
    assert done.variables["cancellation_id"] == "CX-100"


def test_S12_python_action_failure_goes_back_to_the_model() -> None:
    playback = play_example("post_action_check", "post_action_check.agent", "cancel_order.yaml")
    bad = playback.turns[1].reply
    action = steps(bad, "ACTION_STEP")[0]
    assert action["target"] == "python://post_action_orders:cancel_order"
    assert "is not an order number" in action["error"]
    tool = [m for m in steps(bad, "LLM_STEP")[-1]["input"]["messages"] if m["role"] == "tool"][-1]
    assert "is not an order number" in json.loads(tool["content"])["error"]
    assert bad.error is None and bad.variables["order_cancelled"] is False


def test_S5_security_gate_refuses_an_early_call_and_allows_it_after_verification() -> None:
    playback = play_example("security_gate", "security_gate.agent", "early_update_refused.yaml")
    early, verified = (t.reply for t in playback.turns)
    gate = [s for s in steps(early, "RESOLUTION_STEP") if s["node"] == "account"]
    assert gate[0]["hiddenTools"] == ["update_account"]
    assert "You must verify your identity" in gate[0]["instructions"]
    assert [r["name"] for r in steps(early, "REFUSED_STEP")] == ["update_account"]
    assert steps(early, "ACTION_STEP") == []
    names = [s["name"] for s in steps(verified, "ACTION_STEP")]
    assert names == ["verify", "update_account"]
    assert steps(verified, "ACTION_STEP")[1]["input"] == {"field": "address", "value": "1 Main St"}
    after = [s for s in steps(verified, "RESOLUTION_STEP") if s["node"] == "account"]
    assert "update_account" in after[1]["tools"]
    assert after[1]["instructions"].startswith("Identity verified.")
