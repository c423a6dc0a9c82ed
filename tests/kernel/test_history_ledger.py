"""Issue 10: per-turn cost stays flat in the session length. The checks before each model call
(every tool call answered, fresh call ids) and the history's size cap read a
:class:`HistoryLedger` brought up to date from the new messages only. These tests pin that the
ledger always agrees with a full scan of the history, whatever happens to the list: appends,
trimming, a cut and restore around a delegation, a replaced history."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentscript.engine.history import HistoryLedger, message_chars, trim_history
from agentscript.engine.kernel import check_answered, unanswered_calls
from agentscript.errors import UnansweredToolCall
from agentscript.models.base import Message, ToolCall

IDS = st.sampled_from(["a", "b", "c", "", "call_1"])

message = st.one_of(
    st.builds(Message, role=st.just("user"), content=st.text(max_size=30)),
    st.builds(
        lambda text, ids: Message(
            "assistant", text, tool_calls=[ToolCall(i, "tool", {"x": 1}) for i in ids]
        ),
        st.text(max_size=10),
        st.lists(IDS, max_size=3),
    ),
    st.builds(lambda i: Message("tool", '{"ok": true}', tool_call_id=i, name="tool"), IDS),
)

# What happens to the history between two looks: messages appended, the front trimmed, the
# end cut off (a delegation's scratch history), or a new list (restore).
change = st.one_of(
    st.tuples(st.just("append"), st.lists(message, min_size=1, max_size=4)),
    st.tuples(st.just("trim"), st.integers(1, 5)),
    st.tuples(st.just("cut"), st.integers(1, 5)),
    st.tuples(st.just("replace"), st.lists(message, max_size=6)),
)


def agrees(ledger: HistoryLedger, history: list[Message]) -> None:
    ledger.sync(history)
    assert ledger.chars == sum(message_chars(m) for m in history)
    assert ledger.call_ids == {c.id for m in history for c in m.tool_calls}
    assert Counter(id(c) for c in ledger.unanswered()) == Counter(
        id(c) for c in unanswered_calls(history)
    )


@settings(max_examples=300, deadline=None)
@given(st.lists(change, max_size=25))
def test_the_ledger_agrees_with_a_full_scan_after_any_change(
    changes: list[tuple[str, Any]],
) -> None:
    history: list[Message] = []
    ledger = HistoryLedger()
    for kind, value in changes:
        if kind == "append":
            history.extend(value)
        elif kind == "trim":
            del history[:value]
        elif kind == "cut":
            del history[max(0, len(history) - value) :]
        else:
            history = list(value)
        agrees(ledger, history)
        agrees(ledger, list(history))  # a request holds a copy of the list: same messages


def test_check_answered_with_the_ledger_refuses_what_the_full_scan_refuses() -> None:
    ledger = HistoryLedger()
    history = [Message("user", "hi"), Message("assistant", "", [ToolCall("a", "t", {})])]
    with pytest.raises(UnansweredToolCall):
        check_answered(history, ledger)
    history.append(Message("tool", "{}", tool_call_id="a", name="t"))
    check_answered(history, ledger)  # answered now: no error


def test_trimming_with_the_ledger_drops_what_trimming_without_it_drops() -> None:
    def exchange(n: int) -> list[Message]:
        return [Message("user", "u" * 50), Message("assistant", f"answer {n} " + "x" * 50)]

    plain = [m for n in range(6) for m in exchange(n)]
    tracked = list(plain)
    ledger = HistoryLedger()
    assert trim_history(tracked, 10_000, ledger) == 0  # fits: only new messages were read
    assert trim_history(plain, 300) == trim_history(tracked, 300, ledger) > 0
    assert plain == tracked
    agrees(ledger, tracked)
