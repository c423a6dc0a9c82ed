"""Fuzzing conversation files (``agentscript run --conversation``, ``chat --record`` replays):
any YAML document gives a conversation or a ConversationError naming the file, nothing else
escapes; and a conversation read back from its dump is the same conversation."""

from __future__ import annotations

import contextlib
from typing import Any

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from agentscript.conversation import ConversationError, dump_conversation, parse_conversation

# The keys the reader looks for, at every level, so generated documents reach past the first
# check; and some it does not know.
KEYS = [
    "variables",
    "actions",
    "turns",
    "description",
    "name",
    "user",
    "model",
    "expect",
    "say",
    "tool",
    "args",
    "outputs",
    "error",
    "node",
    "response",
    "response_contains",
    "actions",
    "escalated",
    "ended",
    "customer",
    "x",
]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.binary(max_size=6),  # written as YAML's !!binary
    st.sampled_from(KEYS),
)
documents = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.sampled_from(KEYS), inner, max_size=5),
    ),
    max_leaves=30,
)


def _shapes() -> st.SearchStrategy[dict[str, Any]]:
    """Documents shaped like a conversation file, with any values where its values go."""
    # Mostly well-typed where a well-typed file has text, so many reach the end of the reader.
    words = st.one_of(st.text(max_size=12), st.text(max_size=12), scalars)
    move = st.one_of(
        st.fixed_dictionaries({"say": words}),
        st.fixed_dictionaries({"tool": st.sampled_from(["lookup", "x"]), "args": documents}),
        documents,
    )
    turn = st.fixed_dictionaries(
        {"user": words},
        optional={"model": st.one_of(st.lists(move, max_size=3), documents), "expect": documents},
    )
    return st.fixed_dictionaries(
        {},
        optional={
            "variables": documents,
            "actions": st.one_of(
                st.dictionaries(st.sampled_from(["lookup", "x"]), documents, max_size=2),
                documents,
            ),
            "turns": st.one_of(st.lists(turn, max_size=3), documents),
        },
    )


def _parsed_or_refused(data: Any) -> None:
    text = yaml.safe_dump(data, allow_unicode=True)
    try:
        parse_conversation(text)
    except ConversationError as exc:
        assert str(exc).startswith("conversation"), str(exc)


@settings(max_examples=400, deadline=None)
@given(documents)
def test_any_yaml_document_is_a_conversation_or_a_conversation_error(data: Any) -> None:
    _parsed_or_refused(data)


@settings(max_examples=400, deadline=None)
@given(_shapes())
def test_any_value_in_a_conversations_places_is_read_or_refused(data: dict[str, Any]) -> None:
    _parsed_or_refused(data)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200))
def test_any_text_is_a_conversation_or_a_conversation_error(text: str) -> None:
    with contextlib.suppress(ConversationError):
        parse_conversation(text)


@settings(max_examples=200, deadline=None)
@given(_shapes())
def test_a_conversation_dumped_and_read_again_is_the_same(data: dict[str, Any]) -> None:
    try:
        first = parse_conversation(yaml.safe_dump(data, allow_unicode=True))
    except ConversationError:
        return
    again = parse_conversation(dump_conversation(first))
    assert again.variables == first.variables
    assert again.stubs == first.stubs
    assert [t.user for t in again.turns] == [t.user for t in first.turns]
    assert [t.moves for t in again.turns] == [t.moves for t in first.turns]
