"""What the playground remembers about its sessions, and the per-session overrides it gives
the server: stub results (``--stubs``, or a loaded conversation file's ``actions:``) and, for
a session that replays a conversation file, the file's scripted model moves turn by turn.

Contract: turn N of a replayed session is answered by the script's turn N; turns past the end
of the script, and every turn of other sessions, use the served model. Nothing here is
persisted: the playground runs in one process (``--workers 1``); a session whose own script or
stubs were forgotten is refused (409), never run on the served model and the real actions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentscript.actions.registry import StubBook
from agentscript.conversation import Conversation
from agentscript.models.base import Model
from agentscript.models.scripted import ScriptedModel
from agentscript.server.errors import ApiError

# Sessions remembered at once; the oldest are forgotten first (the store keeps the sessions
# themselves; a forgotten one loses only its script, its stubs and its initial variables).
MAX_SESSIONS = 1000
# Ids of forgotten sessions that had a script or stubs of their own, remembered to refuse
# their turns: run with the served model and the real actions instead, a replay that stubbed
# an identity check would go on as if the check had passed.
MAX_FORGOTTEN = 100_000


class ForgottenSession(ApiError):
    def __init__(self, session_id: str) -> None:
        super().__init__(
            409,
            "playground_session_forgotten",
            f"session {session_id} replayed a conversation or stubbed actions, and the "
            f"playground has forgotten them ({MAX_SESSIONS} newer sessions came after it); "
            "start it again",
        )


@dataclass
class PlaygroundSession:
    variables: dict[str, Any]
    stubs: dict[str, Any]
    script: Conversation | None = None

    def own_choices(self, default_stubs: dict[str, Any]) -> bool:
        """Whether it has a script or stubs besides the server's (``--stubs``)."""
        return self.script is not None or self.stubs != default_stubs


@dataclass
class PlaygroundSessions:
    """Implements ``SessionOverrides`` for every served agent of a playground."""

    default_stubs: dict[str, Any] = field(default_factory=dict)
    sessions: dict[str, PlaygroundSession] = field(default_factory=dict)
    forgotten: dict[str, None] = field(default_factory=dict)  # insertion-ordered set

    def register(
        self, session_id: str, variables: dict[str, Any], script: Conversation | None
    ) -> None:
        stubs = dict(self.default_stubs)
        if script is not None:
            stubs.update(script.stubs)
        self.sessions[session_id] = PlaygroundSession(dict(variables), stubs, script)
        while len(self.sessions) > MAX_SESSIONS:
            oldest = next(iter(self.sessions))
            if self.sessions.pop(oldest).own_choices(self.default_stubs):
                self.forgotten[oldest] = None
        while len(self.forgotten) > MAX_FORGOTTEN:
            self.forgotten.pop(next(iter(self.forgotten)))

    def get(self, session_id: str) -> PlaygroundSession | None:
        return self.sessions.get(session_id)

    def model(self, session_id: str, turn: int) -> Model | None:
        known = self._known(session_id)
        if known is None or known.script is None or turn > len(known.script.turns):
            return None
        scripted = ScriptedModel()
        scripted.begin_turn(known.script.turns[turn - 1].moves)
        return scripted

    def stubs(self, session_id: str) -> StubBook | None:
        known = self._known(session_id)
        data = known.stubs if known is not None else self.default_stubs
        return StubBook.from_data(data) if data else None

    def _known(self, session_id: str) -> PlaygroundSession | None:
        if session_id in self.forgotten:
            raise ForgottenSession(session_id)
        return self.sessions.get(session_id)
