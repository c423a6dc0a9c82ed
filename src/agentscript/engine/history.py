"""Keeping a session's history within ``Limits.max_history_chars``.

Every later model request re-sends the whole history, so an unbounded one makes each turn
slower and dearer without end. :func:`trim_history` drops the oldest whole exchanges (from
one user message up to the next), never a tool call without its result, and says how many
messages it dropped so the turn can record it.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from agentscript.jsonsafe import json_size
from agentscript.models.base import Message, ToolCall


def message_chars(message: Message) -> int:
    """About the JSON length of one message (content and tool-call arguments)."""
    size = len(message.content) + 40
    for call in message.tool_calls:
        size += len(call.name) + 40 + len(repr(call.arguments)) if call.arguments else 40
    return size


# What a saved session's JSON may spend on one character of a string: a `\u` escape (6) for a
# control character, and, in the standard library's ASCII form, 6 for any other non-ASCII
# character and 12 (two escapes) for one outside the Basic Multilingual Plane.
_ASCII_CEILING = 6
_TEXT_CEILING = 12
# A message's keys, quotes and separators (``{"role": "tool", "content": ...}``), and a call's.
_MESSAGE_FRAME = 200
_CALL_FRAME = 100


def _text_ceiling(text: str) -> int:
    return (_ASCII_CEILING if text.isascii() else _TEXT_CEILING) * len(text) + 2


def message_ceiling(message: Message) -> int:
    """At least the characters ``message`` takes in any form a saved session is read back in
    (its JSON text, compact or spaced, escaped to ASCII or not, and the walk that checks a
    saved mapping, which counts a number as 24): cheap, for the common case where even this
    bound is far from ``MAX_SESSION_CHARS``. :func:`stored_chars` is the exact figure."""
    size = _MESSAGE_FRAME + _text_ceiling(message.content)
    size += _text_ceiling(message.tool_call_id or "") + _text_ceiling(message.name or "")
    for call in message.tool_calls:
        size += _CALL_FRAME + _text_ceiling(call.id) + _text_ceiling(call.name)
        # repr spells a number in at least 3 characters, and keeps a non-ASCII character as
        # one: 12 covers the walk's 24 a number and the escapes.
        size += _TEXT_CEILING * len(repr(call.arguments))
    return size


def stored_chars(message: Message) -> int:
    """The characters ``message`` takes in the largest form a saved session is read back in:
    the standard library's JSON text (spaced, non-ASCII escaped), or the size the restore's
    walk of a saved mapping counts, whichever is more."""
    data = message.to_json()
    try:
        text = len(json.dumps(data, default=repr))
    except ValueError:  # an integer too long to print: no saved session holds one
        return message_ceiling(message)
    return max(text, json_size(data))


def trim_history(
    history: list[Message], max_chars: int, ledger: HistoryLedger | None = None
) -> int:
    """Drop the oldest exchanges until ``history`` fits ``max_chars``; the number dropped.

    The last exchange is always kept (whatever its size), so the model still sees the
    message it answers; oversized single values are stopped earlier by the other caps.
    With the session's ``ledger`` a history that fits costs only its new messages.
    """
    if ledger is not None:
        ledger.sync(history)
        if ledger.chars <= max_chars:
            return 0
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


class HistoryLedger:
    """What trimming and the answered-calls checks need to know about a session's history
    (its size, every tool call id, the calls not yet answered), brought up to date from the
    messages added since the last look. Scanning the whole history before every model call
    instead made a turn's cost grow with the session (0.6 ms at turn 1, 2 ms at turn 200).

    Valid while the history only grows at its end. Anything else (trimmed, cut and restored
    around a delegation, replaced by ``restore``) moves or drops the messages it saw, which
    :meth:`sync` notices (the first and last message seen are no longer in their places);
    it then counts again from the start. Messages are never edited once in the history.
    """

    __slots__ = (
        "_exact",
        "_first",
        "_last",
        "_open",
        "_seen",
        "answered",
        "call_ids",
        "ceiling",
        "chars",
    )

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self._seen = 0
        self._first: Message | None = None
        self._last: Message | None = None
        self.chars = 0
        # Upper bounds of the messages' size in a saved session (engine/room.py): ``ceiling``
        # always, ``_exact`` once asked for (:meth:`stored`), then kept up to date.
        self.ceiling = 0
        self._exact: int | None = None
        self.call_ids: set[str] = set()
        self.answered: set[str | None] = set()
        self._open: dict[str, list[ToolCall]] = {}  # call id -> its calls, in history order

    def sync(self, history: Sequence[Message]) -> None:
        seen = self._seen
        size = len(history)
        if seen and (
            size < seen or history[seen - 1] is not self._last or history[0] is not self._first
        ):
            self.reset()
            seen = 0
        if size == seen:
            return
        for index in range(seen, size):
            message = history[index]
            self.chars += message_chars(message)
            self.ceiling += message_ceiling(message)
            if self._exact is not None:
                self._exact += stored_chars(message)
            for call in message.tool_calls:
                self.call_ids.add(call.id)
                if call.id not in self.answered:
                    self._open.setdefault(call.id, []).append(call)
            if message.role == "tool":
                self.answered.add(message.tool_call_id)
                if message.tool_call_id is not None:
                    self._open.pop(message.tool_call_id, None)
        self._seen, self._first, self._last = size, history[0], history[-1]

    def stored(self, history: Sequence[Message]) -> int:
        """The characters ``history`` takes in a saved session (:func:`stored_chars` of each
        message): counted in full the first time it is asked for after a reset, then only
        for the new messages."""
        self.sync(history)
        if self._exact is None:
            self._exact = sum(stored_chars(message) for message in history)
        return self._exact

    def unanswered(self) -> list[ToolCall]:
        """The tool calls no tool message answers (as :func:`kernel.unanswered_calls`)."""
        return [call for calls in self._open.values() for call in calls]
