"""What the playground remembers about its sessions, and the per-session overrides it gives
the server: stub results (``--stubs``, or a loaded conversation file's ``actions:``) and, for
a session that replays a conversation file, the file's scripted model moves turn by turn.

Contract: turn N of a replayed session is answered by the script's turn N; turns past the end
of the script, and every turn of other sessions, use the served model. Nothing here is
persisted: the playground runs in one process (``--workers 1``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentscript.actions.registry import StubBook
from agentscript.conversation import Conversation
from agentscript.models.base import Model
from agentscript.models.scripted import ScriptedModel

# Sessions remembered at once; the oldest are forgotten first (the store keeps the sessions
# themselves; a forgotten one loses only its script and its initial variables).
MAX_SESSIONS = 1000


@dataclass
class PlaygroundSession:
    variables: dict[str, Any]
    stubs: dict[str, Any]
    script: Conversation | None = None


@dataclass
class PlaygroundSessions:
    """Implements ``SessionOverrides`` for every served agent of a playground."""

    default_stubs: dict[str, Any] = field(default_factory=dict)
    sessions: dict[str, PlaygroundSession] = field(default_factory=dict)

    def register(
        self, session_id: str, variables: dict[str, Any], script: Conversation | None
    ) -> None:
        stubs = dict(self.default_stubs)
        if script is not None:
            stubs.update(script.stubs)
        self.sessions[session_id] = PlaygroundSession(dict(variables), stubs, script)
        while len(self.sessions) > MAX_SESSIONS:
            self.sessions.pop(next(iter(self.sessions)))

    def get(self, session_id: str) -> PlaygroundSession | None:
        return self.sessions.get(session_id)

    def model(self, session_id: str, turn: int) -> Model | None:
        known = self.sessions.get(session_id)
        if known is None or known.script is None or turn > len(known.script.turns):
            return None
        scripted = ScriptedModel()
        scripted.begin_turn(known.script.turns[turn - 1].moves)
        return scripted

    def stubs(self, session_id: str) -> StubBook | None:
        known = self.sessions.get(session_id)
        data = known.stubs if known is not None else self.default_stubs
        return StubBook.from_data(data) if data else None
