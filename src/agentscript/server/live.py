"""What this worker remembers of the sessions it served: the sessions it ran last, kept in
memory so that their next turn skips the restore, and who owns each session it has seen.

A turn reads its session from the store under the session's lock and rebuilds it
(``agent.restore``: decode the JSON, check every field, build the ``Session``), about a fifth
of a turn's CPU with a fast model. The ``Session`` a turn leaves behind is, once its commit
succeeded, exactly what the store now holds: the state written is that object's ``to_json()``.
So it is kept here, under its session id, with the turn count and agent version it was
committed at and the revision the commit wrote with the state (a random token each commit and
each creation writes: ``store.base.new_revision``).

The store stays the truth. A kept session is used only when the locked record carries the
same turn count, version and revision as its commit wrote; its stored state is then not even
read: the turn tells the lock read the revision it keeps (``Store.lock_session``'s ``kept``),
and a row that still has it comes without its state (``SessionRecord.withheld``), which at the
history limit is 4 MB to read (6 ms of the event loop on SQLite, 7-9 ms on PostgreSQL) and
tens of milliseconds to parse. A session dropped from here while its turn waited for the lock (to make room) is then
read under the lock after all (``SessionLock.read_state``) and restored. The turn count alone is not enough: a database that loses a commit
(``synchronous_commit = off`` and a crash, a failover to an asynchronous replica, a restored
backup) rewinds the count, and another worker's commit of the same turn number then looks like
ours; its revision is another. A state written by anything but a commit (an operator's UPDATE,
an older agentscript's commit) loses its revision in the database itself (store/schema.py,
migration 5), so a row edited by hand is read and checked, refused if damaged or restored, on
this worker as on any other. (A disk fault that changes the state's bytes and not its
revision goes unseen here: the kept session runs, and its commit writes its own state over
the damaged one.) A turn run by another worker (or a restarted one) makes the kept session
stale and it is restored instead. A session is taken out while its turn runs and put back
only after a commit; a turn that fails, or whose commit fails, leaves nothing here. Before a
kept session runs again, :meth:`Session.resume` makes it start its trace as a restored one
would, so a turn's trace never depends on which worker ran the turn before. Agents with
per-session overrides (the playground's scripted models and stubs) are always restored.

A kept session whose store record has expired (``--session-ttl`` since the commit that kept
it) is dropped by :meth:`LiveSessions.drop_expired`: nobody can run it again.

A session's owner never changes and its id is never reused (the server draws it), so an owner
once read stays true: :class:`SessionOwners` lets a turn refuse another key's session (404)
before it queues for the session's lock, without a read of its own.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass

from agentscript.engine.session import Session
from agentscript.server.heap import SurvivorFreezer
from agentscript.store import SessionRecord

# The histories kept in all, in characters (``Session.history_chars``). A session's own is
# bounded by ``Limits.max_history_chars`` (4 million), so a thousand long ones could hold
# gigabytes; real sessions hold a few thousand each and never reach this.
MAX_KEPT_CHARS = 200_000_000
# Owners remembered (a 32-character id and a 64-character key hash each, about 300 bytes
# with the map's own share: 30 MB at most). A session forgotten is read once more.
MAX_KNOWN_OWNERS = 100_000


@dataclass
class _Kept:
    """A kept session and what its commit wrote."""

    turns: int
    version: str
    revision: str  # written with the state by the commit (or creation) that kept it
    session: Session
    chars: int  # its history's size
    at: float  # when it was kept (time.monotonic())

    def matches(self, record: SessionRecord) -> bool:
        # Reads none of the record's state: an unparsed one stays unparsed.
        return (
            self.turns == record.turns
            and self.version == record.agent_version
            and self.revision == record.revision
        )


class LiveSessions:
    """At most ``capacity`` sessions and ``max_chars`` of their histories, the least recently
    used dropped first (0: none kept); with a ``ttl``, none kept longer than ``ttl`` seconds
    after its commit (:meth:`drop_expired`)."""

    def __init__(
        self, capacity: int, max_chars: int = MAX_KEPT_CHARS, ttl: float | None = None
    ) -> None:
        self.capacity = capacity
        self.max_chars = max_chars
        self.ttl = ttl
        # Set by ``agentscript serve`` (create_app's freeze_heap): kept sessions are most of
        # what outlives start-up (server/heap.py).
        self.freezer: SurvivorFreezer | None = None
        self._kept: OrderedDict[str, _Kept] = OrderedDict()
        self.chars = 0  # the kept histories' size
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._kept)

    def revision(self, session_id: str) -> str | None:
        """The revision of the session kept under ``session_id``, if any, for the turn's lock
        read to leave out a state it would not use (``Store.lock_session``'s ``kept``);
        nothing is taken or counted. A session dropped before the turn takes it is read then."""
        kept = self._kept.get(session_id)
        return None if kept is None else kept.revision

    def holds(self, record: SessionRecord) -> bool:
        """Whether the session kept for ``record`` is the state the store holds (a state this
        server committed, so checked already); nothing is taken or counted."""
        kept = self._kept.get(record.session_id)
        return kept is not None and kept.matches(record)

    def take(self, record: SessionRecord) -> Session | None:
        """The kept session for ``record`` if it is the state the store holds (it leaves the
        cache until :meth:`keep` puts it back), else None."""
        kept = self._kept.pop(record.session_id, None)
        if kept is not None:
            self.chars -= kept.chars
        if kept is None or not kept.matches(record):
            self.misses += 1
            return None
        self.hits += 1
        kept.session.resume()
        return kept.session

    def keep(
        self,
        session_id: str,
        turns: int,
        version: str,
        session: Session,
        revision: str,
    ) -> None:
        """Keep ``session`` as committed with ``turns`` turns by agent version ``version``,
        the commit having written its state with ``revision``."""
        if self.capacity <= 0:
            return
        self.drop(session_id)
        kept = _Kept(turns, version, revision, session, session.history_chars(), time.monotonic())
        self._kept[session_id] = kept
        self.chars += kept.chars
        while len(self._kept) > self.capacity or (self.chars > self.max_chars and self._kept):
            self.chars -= self._kept.popitem(last=False)[1].chars
        if self.freezer is not None:
            self.freezer.kept()

    def drop(self, session_id: str) -> None:
        kept = self._kept.pop(session_id, None)
        if kept is not None:
            self.chars -= kept.chars

    def drop_expired(self) -> None:
        """Drop the sessions kept ``ttl`` seconds or more: their records have expired."""
        if not self.ttl:
            return
        # Kept in the order they were kept (keep puts each last), so the expired come first.
        cutoff = time.monotonic() - self.ttl
        while self._kept and next(iter(self._kept.values())).at <= cutoff:
            self.chars -= self._kept.popitem(last=False)[1].chars


class SessionOwners:
    """The owner of each session this worker has read or created, at most ``capacity``, the
    least recently used forgotten first."""

    def __init__(self, capacity: int = MAX_KNOWN_OWNERS) -> None:
        self.capacity = capacity
        self._owners: OrderedDict[str, str] = OrderedDict()

    def __len__(self) -> int:
        return len(self._owners)

    def get(self, session_id: str) -> str | None:
        owner = self._owners.get(session_id)
        if owner is not None:
            self._owners.move_to_end(session_id)
        return owner

    def learn(self, session_id: str, owner: str) -> None:
        self._owners[session_id] = owner
        self._owners.move_to_end(session_id)
        if len(self._owners) > self.capacity:
            self._owners.popitem(last=False)

    def forget(self, session_id: str) -> None:
        self._owners.pop(session_id, None)
