"""Sessions this worker ran last, kept in memory so that their next turn skips the restore.

A turn reads its session from the store under the session's lock and rebuilds it
(``agent.restore``: decode the JSON, check every field, build the ``Session``), about a fifth
of a turn's CPU with a fast model. The ``Session`` a turn leaves behind is, once its commit
succeeded, exactly what the store now holds: the state written is that object's ``to_json()``.
So it is kept here, under its session id, with the turn count and agent version it was
committed at.

The store stays the truth. A kept session is used only when the locked record carries the
same turn count and version: every write of a session's state is a turn commit that raises the
count under that lock, so an equal count is the same state, and a turn run by another worker
(or a restarted one) makes it stale and it is restored instead. A session is taken out while
its turn runs and put back only after a commit; a turn that fails, or whose commit fails,
leaves nothing here. Before a kept session runs again, :meth:`Session.resume` makes it start its
trace as a restored one would, so a turn's trace never depends on which worker ran the turn
before. Agents with per-session overrides (the playground's scripted models and stubs) are
always restored.
"""

from __future__ import annotations

from collections import OrderedDict

from agentscript.engine.session import Session
from agentscript.server.heap import SurvivorFreezer
from agentscript.store import SessionRecord

# The histories kept in all, in characters (``Session.history_chars``). A session's own is
# bounded by ``Limits.max_history_chars`` (4 million), so a thousand long ones could hold
# gigabytes; real sessions hold a few thousand each and never reach this.
MAX_KEPT_CHARS = 200_000_000


class LiveSessions:
    """At most ``capacity`` sessions and ``max_chars`` of their histories, the least recently
    used dropped first (0: none kept)."""

    def __init__(self, capacity: int, max_chars: int = MAX_KEPT_CHARS) -> None:
        self.capacity = capacity
        self.max_chars = max_chars
        # Set by ``agentscript serve`` (create_app's freeze_heap): kept sessions are most of
        # what outlives start-up (server/heap.py).
        self.freezer: SurvivorFreezer | None = None
        self._kept: OrderedDict[str, tuple[int, str, Session, int]] = OrderedDict()
        self.chars = 0  # the kept histories' size
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._kept)

    def take(self, record: SessionRecord) -> Session | None:
        """The kept session for ``record`` if it is the state the store holds (it leaves the
        cache until :meth:`keep` puts it back), else None."""
        kept = self._kept.pop(record.session_id, None)
        if kept is not None:
            self.chars -= kept[3]
        if kept is None or kept[0] != record.turns or kept[1] != record.agent_version:
            self.misses += 1
            return None
        self.hits += 1
        session = kept[2]
        session.resume()
        return session

    def keep(self, session_id: str, turns: int, version: str, session: Session) -> None:
        """Keep ``session`` as committed with ``turns`` turns by agent version ``version``."""
        if self.capacity <= 0:
            return
        self.drop(session_id)
        size = session.history_chars()
        self._kept[session_id] = (turns, version, session, size)
        self.chars += size
        while len(self._kept) > self.capacity or (self.chars > self.max_chars and self._kept):
            self.chars -= self._kept.popitem(last=False)[1][3]
        if self.freezer is not None:
            self.freezer.kept()

    def drop(self, session_id: str) -> None:
        kept = self._kept.pop(session_id, None)
        if kept is not None:
            self.chars -= kept[3]
