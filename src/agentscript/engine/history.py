"""Keeping a session's history within ``Limits.max_history_chars``.

Every later model request re-sends the whole history, so an unbounded one makes each turn
slower and dearer without end. :func:`trim_history` drops the oldest whole exchanges (from
one user message up to the next), never a tool call without its result, and says how many
messages it dropped so the turn can record it.
"""

from __future__ import annotations

from agentscript.models.base import Message


def message_chars(message: Message) -> int:
    """About the JSON length of one message (content and tool-call arguments)."""
    size = len(message.content) + 40
    for call in message.tool_calls:
        size += len(call.name) + 40 + len(repr(call.arguments)) if call.arguments else 40
    return size


def trim_history(history: list[Message], max_chars: int) -> int:
    """Drop the oldest exchanges until ``history`` fits ``max_chars``; the number dropped.

    The last exchange is always kept (whatever its size), so the model still sees the
    message it answers; oversized single values are stopped earlier by the other caps.
    """
    sizes = [message_chars(m) for m in history]
    total = sum(sizes)
    if total <= max_chars:
        return 0
    cut = 0
    for index, message in enumerate(history[1:], start=1):
        if message.role != "user":
            continue
        total -= sum(sizes[cut:index])
        cut = index
        if total <= max_chars:
            break
    del history[:cut]
    return cut
