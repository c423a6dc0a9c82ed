"""The text given to a session's stream sink (``Session.on_text``) during a turn is the reply's
text (engine/speech.py), in both formats: the model's streamed answer, what the framework
says itself (a confirmation question, a failed turn's message, an escalation message, Mantle's
responses) when it is said, and the blank line between two messages."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from engine_helpers import agent

import agentscript
from agentscript.engine.session import AgentBase, Reply, Session
from agentscript.models.scripted import ScriptedModel, parse_move

CARD_BANK = Path(__file__).resolve().parents[2] / "examples" / "card_bank"
SIGNED_IN = {
    "project.authenticated": True,
    "project.customer_id": "1001",
    "project.customer_name": "Ada",
}

AGENT = """
connection messaging:
    escalation_message: "Transferring you to a human agent"
    outbound_route_type: "OmniChannelFlow"
    outbound_route_name: "flow://Route_To_Agent"

start_agent main:
    description: "main"
    reasoning:
        instructions: ->
            | main node
        actions:
            wipe: @actions.wipe_all
                description: "wipe"
            human: @utils.escalate
                description: "escalate"
            ask_ops: @subagent.ops
                description: "ops"

    actions:
        wipe_all:
            description: "wipe"
            target: "flow://Wipe"
            require_user_confirmation: True
            outputs:
                ok: boolean

subagent ops:
    description: "ops"
    reasoning:
        instructions: ->
            | ops node
        actions:
            wipe: @actions.wipe_all
                description: "wipe"

    actions:
        wipe_all:
            description: "wipe"
            target: "flow://Wipe"
            require_user_confirmation: True
            outputs:
                ok: boolean
"""
QUESTION = "Before I run wipe all, please confirm: yes or no?"


class Streamed:
    """A session whose every turn is scripted and whose stream sink keeps what it is given."""

    def __init__(self, loaded: AgentBase, variables: dict[str, Any] | None = None) -> None:
        self.model = ScriptedModel()
        self.session: Session = loaded.session(model=self.model, variables=variables or {})
        self.tokens: list[str] = []
        self.session.on_text = self.tokens.append

    def send(self, text: str, *moves: dict[str, Any]) -> Reply:
        self.tokens.clear()
        self.model.begin_turn([parse_move(m) for m in moves])
        return self.session.send(text)


@pytest.fixture
def script(tmp_path: Path) -> Streamed:
    return Streamed(agent(tmp_path, "Said", AGENT))


def bank() -> Streamed:
    return Streamed(agentscript.load(CARD_BANK), SIGNED_IN)


def test_the_tokens_of_a_plain_answer_are_the_reply(script: Streamed) -> None:
    reply = script.send("hi", {"say": "Hello there."})
    assert "".join(script.tokens) == reply.text == "Hello there."


def test_a_held_confirmation_question_is_given_to_the_sink(script: Streamed) -> None:
    reply = script.send("wipe it", {"tool": "wipe"})
    assert reply.confirmation == QUESTION
    assert "".join(script.tokens) == reply.text == QUESTION


def test_S13_the_models_text_then_the_question_are_the_reply(script: Streamed) -> None:
    reply = script.send("wipe it", {"say": "I can wipe the account.", "tool": "wipe"})
    assert script.tokens == ["I can wipe the account.", "\n\n", QUESTION]
    assert "".join(script.tokens) == reply.text


def test_S13_a_question_held_in_a_delegate_follows_both_models_texts(script: Streamed) -> None:
    reply = script.send(
        "ops, wipe it",
        {"say": "Asking ops.", "tool": "ask_ops"},
        {"say": "Ops can do that.", "tool": "wipe"},
    )
    assert reply.messages == ["Asking ops.", "Ops can do that.", QUESTION]
    assert "".join(script.tokens) == reply.text


def test_a_failed_turns_error_message_is_given_to_the_sink(script: Streamed) -> None:
    reply = script.send("hi")  # no model move left: the turn fails
    assert reply.error is not None
    assert "".join(script.tokens) == reply.text == "ERR"


def test_S13_the_models_text_then_the_escalation_message_are_the_reply(script: Streamed) -> None:
    reply = script.send("human please", {"say": "One moment.", "tool": "human"})
    assert reply.escalated
    assert (
        "".join(script.tokens) == reply.text == "One moment.\n\nTransferring you to a human agent"
    )


def test_a_sink_that_raises_fails_the_turn_and_is_not_called_again(script: Streamed) -> None:
    given: list[str] = []

    def broken(piece: str) -> None:
        given.append(piece)
        raise BrokenPipeError("the client went away")

    script.session.on_text = broken
    reply = script.send("wipe it", {"tool": "wipe"})
    # The question raised; the failure's own message reaches the reply, not the dead sink.
    assert given == [QUESTION]
    assert reply.error is not None and "BrokenPipeError" in reply.error
    assert reply.messages == [QUESTION, "ERR"]


# ---------------------------------------------------------------------- Mantle


def test_mantle_an_activate_utterance_then_the_models_text_are_the_reply() -> None:
    session = bank()
    reply = session.send(
        "I lost my card",
        {"tool": "activate_skill", "args": {"skill": "card_replace"}},
        {"say": "Tell me what happened."},
    )
    assert reply.messages == ["I can help you replace your card.", "Tell me what happened."]
    assert "".join(session.tokens) == reply.text


def test_mantle_a_collect_question_is_given_to_the_sink() -> None:
    session = bank()
    reply = session.send(
        "I lost my card",
        {"tool": "activate_skill", "args": {"skill": "card_replace"}},
        {"tool": "set_fields", "args": {"reason": "lost"}},
        {"tool": "activate_skill", "args": {"skill": "card_replace", "block": "order_card"}},
    )
    assert reply.messages[-1] == "Which card should we replace?"
    assert "".join(session.tokens) == reply.text


def test_mantle_the_completion_follow_up_is_given_to_the_sink() -> None:
    session = bank()
    reply = session.send(
        "my balance?",
        {"tool": "activate_skill", "args": {"skill": "check_balance"}},
        {"tool": "get_balance"},
        {"tool": "complete_skill"},
        {"say": "You have 1250.75 EUR."},
    )
    assert reply.messages == [
        "You have 1250.75 EUR.",
        "Is there anything else I can help you with?",
    ]
    assert "".join(session.tokens) == reply.text


def test_mantle_a_failed_turns_message_follows_what_was_said() -> None:
    session = bank()
    reply = session.send(
        "I lost my card", {"tool": "activate_skill", "args": {"skill": "card_replace"}}
    )
    assert reply.error is not None
    assert "".join(session.tokens) == reply.text
    assert reply.text == "I can help you replace your card.\n\nSorry, something went wrong."
