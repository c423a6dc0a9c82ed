"""Session state: everything that survives between turns, serialisable to JSON."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from agentscript.models.base import Message

STATE_FORMAT = "agentscript-session/2"
# /1 had no agent identity; such sessions are still restored (and checked in full).
STATE_FORMATS = frozenset({"agentscript-session/1", STATE_FORMAT})


@dataclass
class PendingConfirmation:
    """A tool call held until the user says yes or no (``require_user_confirmation``)."""

    node: str
    tool: str
    call_id: str
    arguments: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "tool": self.tool,
            "call_id": self.call_id,
            "arguments": self.arguments,
        }


@dataclass
class SessionState:
    session_id: str
    variables: dict[str, Any]
    history: list[Message] = field(default_factory=list)
    current_node: str | None = None
    # `collect`: the node to start the next turn in while fields are missing.
    resume_node: str | None = None
    pending_confirmation: PendingConfirmation | None = None
    turn: int = 0
    ended: bool = False
    stub_usage: dict[str, int] = field(default_factory=dict)
    # Engine-specific extension state (the Mantle skill stack lives here).
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self, *, detached: bool = True) -> dict[str, Any]:
        """The state as JSON-compatible data. ``detached=False`` shares the containers of
        ``variables`` and ``extra`` with this state instead of deep-copying them: only for a
        caller that serialises the result before the session runs again."""
        clone = copy.deepcopy if detached else _same
        return {
            "format": STATE_FORMAT,
            "session_id": self.session_id,
            "variables": clone(self.variables),
            "history": [m.to_json() for m in self.history],
            "current_node": self.current_node,
            "resume_node": self.resume_node,
            "pending_confirmation": self.pending_confirmation.to_json()
            if self.pending_confirmation
            else None,
            "turn": self.turn,
            "ended": self.ended,
            "stub_usage": dict(self.stub_usage),
            "extra": clone(self.extra),
        }

    @staticmethod
    def from_json(data: dict[str, Any]) -> SessionState:
        if data.get("format") not in STATE_FORMATS:
            raise ValueError(f"not a saved session (expected format {STATE_FORMAT!r})")
        pending = data.get("pending_confirmation")
        return SessionState(
            session_id=str(data["session_id"]),
            variables=dict(data.get("variables") or {}),
            history=[Message.from_json(m) for m in data.get("history") or []],
            current_node=data.get("current_node"),
            resume_node=data.get("resume_node"),
            pending_confirmation=PendingConfirmation(**pending) if pending else None,
            turn=int(data.get("turn", 0)),
            ended=bool(data.get("ended", False)),
            stub_usage=dict(data.get("stub_usage") or {}),
            extra=dict(data.get("extra") or {}),
        )


def _same(value: Any) -> Any:
    return value
