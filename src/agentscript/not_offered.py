"""What the model is told when it calls a tool it was not offered, in both formats.

A hidden tool (its gate does not hold now) and an unknown tool (no such tool here) are refused
with the same text, ``not_offered_message``, so the model cannot probe which hidden tools
exist. The developer still sees the truth: the ``REFUSED_STEP`` of the trace carries the
detailed reason and ``cause`` (a ``NotOffered`` value). Nothing here writes the trace.
"""

from __future__ import annotations

from enum import StrEnum


class NotOffered(StrEnum):
    """Why a called tool was not offered (recorded as a REFUSED_STEP's ``cause``)."""

    HIDDEN = "hidden"  # declared here, but its gate does not hold now
    UNKNOWN = "unknown"  # not a tool of the current subagent or skill


def not_offered_message(name: str) -> str:
    """The one tool result the model gets for a call of a tool it was not offered."""
    return f"tool '{name}' is not available now"


__all__ = ["NotOffered", "not_offered_message"]
