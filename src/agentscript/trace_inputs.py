"""``LLM_STEP`` inputs without copying: each step records only the messages added since the
session's previous LLM call, and where in the history they start.

Writing side (:class:`MessageLog`, one per session): for each call the log finds how many
leading messages the new request shares with the previous call's request (the same objects),
and the step records ``input.messagesFrom`` (that count) and ``input.messages`` (the rest). The
history only grows between calls, or is cut and restored around a delegation, so the shared
prefix is found in O(1) on the common path (the previous last message still in place) and by
one scan otherwise. ``system``, ``instructions`` and ``tools`` stay complete in every step.

Reading side (:func:`rebuild_messages`): walking a session's ``LLM_STEP``\\ s in order (trace
files by turn, steps in order), the full input of a step is the previous step's full input cut
to ``messagesFrom``, plus the step's ``messages``. A step whose ``messagesFrom`` is null or
missing is complete (written by code that attaches no log, or before this format). The jq equivalent is in
``docs/tracing.md``.

Contract: the log never copies a message and never changes the request; a session restored
from JSON starts a new log, so its first step is complete (``messagesFrom: 0``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from agentscript.models.base import Message


class MessageLog:
    """What the session's previous LLM call was given (references, not copies)."""

    __slots__ = ("sent",)

    def __init__(self) -> None:
        self.sent: Sequence[Message] = ()

    def delta(self, messages: Sequence[Message]) -> tuple[int, Sequence[Message]]:
        """``(start, new)``: ``messages[:start]`` were in the previous call, ``new`` follow."""
        sent = self.sent
        size = len(sent)
        if size and size <= len(messages) and messages[size - 1] is sent[-1]:
            start = size  # appended to: the common path
        else:
            start = 0
            for old, new in zip(sent, messages, strict=False):
                if old is not new:
                    break
                start += 1
        self.sent = messages
        return start, messages[start:]


def rebuild_messages(traces: Iterable[Mapping[str, Any]]) -> list[list[dict[str, Any]]]:
    """The full ``messages`` input of every ``LLM_STEP`` in ``traces`` (one session's trace
    documents, in turn order), in order."""
    inputs: list[list[dict[str, Any]]] = []
    previous: list[dict[str, Any]] = []
    for trace in traces:
        for step in trace.get("planTrace", {}).get("steps", []):
            if step.get("type") != "LLM_STEP":
                continue
            data = step.get("input") or {}
            start = data.get("messagesFrom")
            added = list(data.get("messages") or [])
            previous = added if start is None else previous[:start] + added
            inputs.append(previous)
    return inputs
