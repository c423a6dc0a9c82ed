"""RESOLUTION_STEP.instructionLines: each piece of the resolved instructions with the `if`
branches that produced it (docs/trace.md), so a reader can say which branch wrote each line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from engine_helpers import Scripted, play_file, steps

import agentscript
from agentscript.engine.session import Reply

AGENT = """\
# @dialect: agentscript (nested `if`)
system:
    instructions: "Be brief."
    messages:
        welcome: "Hi."
        error: "Oops."

config:
    developer_name: "Branches"

variables:
    tier: mutable string = "gold"
    vip: mutable boolean = False
    name: mutable string
        description: "The customer's name"

start_agent main:
    description: "Main"
    before_reasoning:
        if @variables.vip == True:
            set @variables.tier = "gold"
    reasoning:
        instructions: ->
            | Greet the customer.
            if @variables.tier == "gold":
                | Offer the gold lounge.
                if @variables.vip == True:
                    | Mention the VIP desk.
                else:
                    | Suggest becoming a VIP.
            else if @variables.tier == "silver":
                | Offer the silver lounge.
            else:
                | Offer a membership,
                  in two lines.
            if @variables.tier == "none":
                | Never said.
        actions:
            set_tier: @utils.setVariables
                description: "Set the tier"
                with tier=...
"""


def at(text: str) -> int:
    """The line of AGENT that holds ``text``."""
    return next(i for i, line in enumerate(AGENT.splitlines(), 1) if text in line)


GOLD = at('if @variables.tier == "gold"')
VIP = at(" " * 16 + "if @variables.vip == True:")  # the one inside the instructions
HOOK = at(" " * 8 + "if @variables.vip == True:")


@pytest.fixture
def agent_path(tmp_path: Path) -> Path:
    path = tmp_path / "branches.agent"
    path.write_text(AGENT, encoding="utf-8")
    return path


def resolution(reply: Reply) -> dict[str, Any]:
    found: dict[str, Any] = steps(reply, "RESOLUTION_STEP")[0]
    return found


def lines(reply: Reply) -> list[tuple[str, list[tuple[int, str, str]]]]:
    return [
        (line["text"], [(b["line"], b["taken"], b["condition"]) for b in line["branches"]])
        for line in resolution(reply)["instructionLines"]
    ]


def test_each_instruction_line_names_the_branches_that_produced_it(agent_path: Path) -> None:
    reply = Scripted(agentscript.load(agent_path), variables={"vip": True}).send(
        "hi", {"say": "Hello."}
    )
    assert lines(reply) == [
        ("Greet the customer.", []),
        ("Offer the gold lounge.", [(GOLD, "if", '@variables.tier == "gold"')]),
        (
            "Mention the VIP desk.",
            [(GOLD, "if", '@variables.tier == "gold"'), (VIP, "if", "@variables.vip == True")],
        ),
    ]
    step = resolution(reply)
    # The pieces are the instructions, in order; each has its source line.
    assert "\n".join(line["text"] for line in step["instructionLines"]) == step["instructions"]
    assert [line["line"] for line in step["instructionLines"]] == [
        at("| Greet"),
        at("| Offer the gold"),
        at("| Mention"),
    ]
    # `index` points into the turn's `branches` (the hook's `if` came first).
    branches = reply.trace["branches"]
    for line in step["instructionLines"]:
        for branch in line["branches"]:
            decided = branches[branch["index"]]
            assert (decided["line"], decided["taken"]) == (branch["line"], branch["taken"])
    assert branches[0]["line"] == HOOK  # before_reasoning: not an instruction line's branch


def test_else_if_and_else_lines_name_the_condition_decided(agent_path: Path) -> None:
    session = Scripted(agentscript.load(agent_path), variables={"tier": "silver"})
    silver = session.send("hi", {"say": "Hello."})
    assert lines(silver)[1] == (
        "Offer the silver lounge.",
        [(GOLD, "elif 1", '@variables.tier == "silver"')],
    )
    other = Scripted(agentscript.load(agent_path), variables={"tier": "bronze"})
    reply = other.send("hi", {"say": "Hello."})
    # `else`: the condition is the `if`'s (false, as were the else ifs); a multi-line
    # template is one piece.
    assert lines(reply)[1] == (
        "Offer a membership,\nin two lines.",
        [(GOLD, "else", '@variables.tier == "gold"')],
    )
    assert lines(reply)[0] == ("Greet the customer.", [])
    inner = Scripted(agentscript.load(agent_path)).send("hi", {"say": "Hello."})
    assert lines(inner)[2] == (
        "Suggest becoming a VIP.",
        [(GOLD, "if", '@variables.tier == "gold"'), (VIP, "else", "@variables.vip == True")],
    )


def test_each_resolution_has_its_own_lines(agent_path: Path) -> None:
    session = Scripted(agentscript.load(agent_path))
    reply = session.send("hi", {"tool": "set_tier", "args": {"tier": "silver"}}, {"say": "Done."})
    first, second = steps(reply, "RESOLUTION_STEP")
    assert first["instructionLines"][1]["text"] == "Offer the gold lounge."
    assert second["iteration"] == 2
    assert second["instructionLines"][1]["text"] == "Offer the silver lounge."
    assert second["instructionLines"][1]["branches"][0]["taken"] == "elif 1"


def test_a_collect_question_is_a_line_of_its_own() -> None:
    reply = play_file("collect", "collect_intake").turns[0].reply
    step = next(s for s in steps(reply, "RESOLUTION_STEP") if s["node"] == "intake")
    (line,) = step["instructionLines"]
    assert line["text"].startswith("Ask the user for: Please give your full name.")
    assert line["branches"] == [] and isinstance(line["line"], int)
    assert line["text"] == step["instructions"]


def test_a_single_text_instruction_is_one_line_without_branches(tmp_path: Path) -> None:
    path = tmp_path / "plain.agent"
    path.write_text(
        AGENT.split("start_agent")[0]
        + 'start_agent main:\n    description: "Main"\n    reasoning:\n'
        + '        instructions: "Answer {!@variables.tier} questions."\n',
        encoding="utf-8",
    )
    reply = Scripted(agentscript.load(path)).send("hi", {"say": "Hello."})
    step = resolution(reply)
    assert step["instructionLines"] == [
        {
            "text": "Answer gold questions.",
            "line": step["instructionLines"][0]["line"],
            "branches": [],
        }
    ]
    assert "branches" not in reply.trace


def test_a_resolution_that_transitions_describes_the_discarded_text() -> None:
    reply = Scripted("flow", variables={"jump": True}).send(
        "go", {"tool": "go_jump"}, {"say": "Here is b."}
    )
    jumper = next(s for s in steps(reply, "RESOLUTION_STEP") if s["node"] == "jumper")
    assert jumper["transition"] == "b" and jumper["instructions"] == ""
    assert jumper["discarded"] == "Partial text of jumper."
    assert jumper["instructionLines"] == [
        {
            "text": "Partial text of jumper.",
            "line": jumper["instructionLines"][0]["line"],
            "branches": [],
        }
    ]
