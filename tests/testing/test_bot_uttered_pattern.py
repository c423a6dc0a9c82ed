"""Mantle ``bot_uttered.text_matches`` is Rasa's: a regular expression searched in each message
the agent said (rasa/e2e_test/assertions.py, ``BotUtteredAssertion.run``: ``re.compile`` then
``pattern.search(event.text)`` per ``BotUttered`` event). It was matched as a substring of
the joined reply, so a pattern never matched and ``^`` could not anchor to a message."""

from __future__ import annotations

from agentscript.engine.session import Reply
from agentscript.testing.matchers import check_mantle
from agentscript.testing.results import TurnOutcome
from agentscript.testing.spec import Check, CheckKind


def _turn(*messages: str) -> TurnOutcome:
    reply = Reply(
        text="\n\n".join(messages),
        messages=list(messages),
        node=None,
        path=[],
        actions=[],
        escalated=False,
        ended=False,
        error=None,
        displayable=[],
        confirmation=None,
        variables={},
        trace={},
    )
    return TurnOutcome("hi", reply, 1.0)


def _holds(pattern: str, *turns: TurnOutcome) -> bool:
    check = Check(CheckKind.MANTLE, "bot_uttered", {"text_matches": pattern},
                  params={"text_matches": pattern}, line=7)  # fmt: skip
    return check_mantle(check, list(turns), {}).passed


def test_text_matches_is_a_regular_expression() -> None:
    said = _turn("Your order #1234 ships today.")
    assert _holds(r"order #\d+ ships", said)
    assert _holds(r"(?i)YOUR ORDER", said)
    assert not _holds(r"order #\d{5}", said)


def test_a_plain_text_still_matches_as_a_substring() -> None:
    assert _holds("ships today", _turn("Your order #1234 ships today."))


def test_anchors_hold_per_message_as_rasa_matches_each_bot_utterance() -> None:
    turns = [_turn("I can help you replace your card."), _turn("Sorry.", "Your card is ordered.")]
    assert _holds(r"^Your card is ordered\.$", *turns)
    assert not _holds(r"^Sorry\.\s+Your", *turns)  # two messages, never one text


def test_an_invalid_pattern_fails_its_check_naming_the_fix() -> None:
    check = Check(CheckKind.MANTLE, "bot_uttered", {"text_matches": "(card"},
                  params={"text_matches": "(card"}, line=7)  # fmt: skip
    verdict = check_mantle(check, [_turn("(card")], {})
    assert not verdict.passed
    assert "text_matches is not a regular expression (missing ), unterminated subpattern" in (
        verdict.explanation
    )
    assert verdict.explanation.endswith("; fix the pattern")
