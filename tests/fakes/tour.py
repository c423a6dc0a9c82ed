"""One agent that exercises every kind of turn the engine has: a router, a subagent used as a
tool (its exchange is cut from and restored to the history: the non-append case), transitions
both ways and an LLM-called action; with the scripted model moves of five turns through it."""

from __future__ import annotations

from agentscript.models.scripted import Move

from .agent_texts import Action, Tool, agent_text

AGENT = agent_text(
    instructions="Help the customer.",
    tools=[
        Tool("ask", "@subagent.helper"),
        Tool("look", "@actions.lookup", ["with ref=..."]),
        Tool("go", "@utils.transition to @subagent.other"),
    ],
    actions=[
        Action(
            "lookup",
            "Look up a reference",
            "flow://Lookup",
            inputs={"ref": "string"},
            outputs={"status": "string"},
        )
    ],
    more="""\
subagent helper:
    description: "Answers side questions"
    reasoning:
        instructions: ->
            | Answer the side question.

subagent other:
    description: "Other area"
    reasoning:
        instructions: ->
            | Help with the other area.
        actions:
            back: @utils.transition to @start_agent.main
""",
)


TURNS: list[list[Move]] = [
    [Move(calls=[("look", {"ref": "A"})]), Move(text="A is late.")],
    [Move(calls=[("ask", {})]), Move(text="Side answer."), Move(text="Back to you.")],
    [Move(calls=[("go", {})]), Move(text="Other area here.")],
    [Move(calls=[("back", {})]), Move(calls=[("look", {"ref": "B"})]), Move(text="B ok.")],
    [Move(text="Anything else?")],
]
