"""Seed 002 end to end, collect across turns, save/restore, and the CLI on every example."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from engine_helpers import Scripted, play_file, steps

import agentscript
from agentscript.cli import main
from agentscript.conversation import load_conversation
from agentscript.models.scripted import ScriptedModel, parse_move
from agentscript.playback import play

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
SEED_002_PROMPT = (
    "Tell the user that the expected delivery date for order number 1234 is February 10, 2026.\n"
    "Apologize to the customer for the delay in receiving their order."
)


def test_S3_seed_002_example_builds_the_two_line_prompt() -> None:
    agent = agentscript.load(EXAMPLES / "order_status" / "order_status.agent")
    conversation = load_conversation(EXAMPLES / "order_status" / "late_order.yaml")
    reply = play(agent, conversation).turns[0].reply
    llm = [s for s in steps(reply, "LLM_STEP") if s["node"] == "Order_Management"]
    assert len(llm) == 1
    assert llm[0]["input"]["instructions"] == SEED_002_PROMPT
    resolution = [s for s in steps(reply, "RESOLUTION_STEP") if s["node"] == "Order_Management"]
    assert resolution[0]["preVars"]["num_turns"] == 2
    assert resolution[0]["postVars"]["num_turns"] == 3
    # Both deterministic runs happened during resolution, in order, before the LLM call.
    actions = [(s["name"], s["source"]) for s in steps(reply, "ACTION_STEP")]
    assert actions == [("get_delivery_date", "deterministic"), ("check_if_late", "deterministic")]
    assert steps(reply, "ACTION_STEP")[1]["input"] == {
        "order_ID": "1234",
        "delivery_date": "February 10, 2026",
    }
    # after_reasoning ran and did not transition (num_turns is 3).
    hooks = [(s["node"], s["hook"]) for s in steps(reply, "HOOK_STEP")]
    assert hooks == [("Order_Management", "after_reasoning")]
    assert reply.path == ["router", "Order_Management"]


def test_collect_asks_one_field_per_turn_and_resumes_in_the_subagent() -> None:
    turns = [t.reply for t in play_file("collect", "collect_intake").turns]
    first = next(s for s in steps(turns[0], "RESOLUTION_STEP") if s["node"] == "intake")
    assert "Please give your full name." in first["instructions"]
    assert "Which city" not in first["instructions"]
    assert "capture_intake_fields" in first["tools"]
    # Turn 2 starts in intake, not at the router.
    assert steps(turns[1], "NODE_ENTER")[0] == {
        "type": "NODE_ENTER",
        "node": "intake",
        "reason": "collect in progress",
    }
    second = [s for s in steps(turns[1], "RESOLUTION_STEP")][-1]
    assert "Which city do you live in?" in second["instructions"]
    assert turns[1].variables == {"patient_name": "Ann Lee", "city": None}
    last = [s for s in steps(turns[2], "RESOLUTION_STEP")][-1]
    assert last["instructions"] == "Thank Ann Lee from Paris."
    assert "capture_intake_fields" in last["hiddenTools"]
    # Everything collected: the next turn starts at the router again.
    assert steps(turns[3], "NODE_ENTER")[0]["node"] == "router"


def test_collect_prompt_does_not_double_the_punctuation() -> None:
    reply = play_file("collect", "collect_intake").turns[0].reply
    text = next(s for s in steps(reply, "RESOLUTION_STEP") if s["node"] == "intake")["instructions"]
    assert ".." not in text and "?." not in text


MOVES: list[tuple[str, list[dict[str, Any]]]] = [
    ("I need an appointment", [{"tool": "go_intake"}, {"say": "Name?"}]),
    (
        "Ann Lee",
        [{"tool": "capture_intake_fields", "args": {"patient_name": "Ann Lee"}}, {"say": "City?"}],
    ),
    ("Paris", [{"tool": "capture_intake_fields", "args": {"city": "Paris"}}, {"say": "Thanks."}]),
]


def test_session_to_json_and_restore_mid_conversation() -> None:
    straight = Scripted("collect")
    expected = [straight.send(user, *moves) for user, moves in MOVES]

    first = Scripted("collect")
    first.send(MOVES[0][0], *MOVES[0][1])
    first.send(MOVES[1][0], *MOVES[1][1])
    saved = json.dumps(first.session.to_json())
    model = ScriptedModel()
    restored = first.agent.restore(saved, model=model)
    assert restored.id == first.session.id
    assert restored.variables == {"patient_name": "Ann Lee", "city": None}
    model.begin_turn([parse_move(m) for m in MOVES[2][1]])
    reply = restored.send(MOVES[2][0])
    assert reply.variables == expected[2].variables
    assert reply.path == expected[2].path == ["intake"]
    assert reply.trace["turn"] == 3
    # The restored model saw the whole history.
    assert model.requests[0].messages[0].content == "I need an appointment"


def test_session_to_json_is_a_copy_unless_asked_not_to_detach() -> None:
    first = Scripted("collect")
    first.send(MOVES[0][0], *MOVES[0][1])
    first.session.state.extra["note"] = {"seen": [1]}
    detached = first.session.to_json()
    shared = first.session.to_json(detached=False)
    assert shared == detached
    first.send(MOVES[1][0], *MOVES[1][1])
    first.session.state.extra["note"]["seen"].append(2)
    # The default copy keeps the state it was taken at; the shared one follows the session
    # (for a caller that writes it out at once, as the server's commit does).
    assert detached["variables"] == {"patient_name": None, "city": None}
    assert detached["extra"]["note"] == {"seen": [1]}
    assert shared["variables"] == {"patient_name": "Ann Lee", "city": None}
    assert shared["extra"]["note"] == {"seen": [1, 2]}


def test_restore_rejects_data_that_is_not_a_saved_session() -> None:
    agent = agentscript.load(Path(__file__).parent / "agents" / "collect.agent")
    with pytest.raises(ValueError, match="not a saved session"):
        agent.restore({"format": "something else"}, model=ScriptedModel())


def example_runs() -> list[tuple[Path, Path]]:
    runs = []
    for agent in sorted(EXAMPLES.glob("*/*.agent")):
        for conversation in sorted(agent.parent.glob("*.yaml")):
            runs.append((agent, conversation))
    return runs


@pytest.mark.parametrize(
    ("agent", "conversation"),
    example_runs(),
    ids=lambda p: f"{p.parent.name}/{p.name}",
)
def test_every_example_conversation_runs_with_exit_0(agent: Path, conversation: Path) -> None:
    validated = CliRunner().invoke(main, ["validate", str(agent)])
    assert validated.exit_code == 0, validated.output
    result = CliRunner().invoke(
        main, ["run", str(agent), "--conversation", str(conversation), "--json"]
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert all(turn["error"] is None for turn in data["turns"])
    assert all(turn["unused_moves"] == [] for turn in data["turns"])


def test_examples_are_found() -> None:
    names = {agent.parent.name for agent, _ in example_runs()}
    assert {"order_status", "post_action_check", "security_gate"} <= names


def test_S13_run_exits_1_when_a_turn_after_end_session_is_refused() -> None:
    here = Path(__file__).parent
    result = CliRunner().invoke(
        main,
        [
            "run",
            str(here / "agents" / "tools.agent"),
            "--conversation",
            str(here / "conversations" / "tools_utilities.yaml"),
            "--json",
        ],
    )
    assert result.exit_code == 1
    data = json.loads(result.output)
    assert data["turns"][1]["ended"] is True
    assert "session has ended" in data["turns"][2]["error"]
    assert data["turns"][0]["escalated"] is True
