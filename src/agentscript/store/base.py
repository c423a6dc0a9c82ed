"""What every session store offers: the records it keeps and the one Protocol it implements.

A store keeps sessions (the engine's saved state, tagged with its format) and their turns (the
turn JSON and the trace of each committed turn). The contract, the same for every backend:

- a turn commits atomically: the new state, the turn record and its trace are written in one
  transaction, and only if the session still has the turn count read under the lock, so an
  update is never lost;
- :meth:`Store.lock_session` serialises turns of one session (across processes for the SQL
  backends): a second caller waits up to ``wait`` seconds, then gets :class:`SessionBusy`;
  different sessions never wait on each other;
- an expired session (``expires_at`` in the past) reads as absent and is purged by
  :meth:`Store.purge_expired`; a deleted one is gone with its turns;
- an Idempotency-Key is unique per session: :meth:`Store.find_turn` returns the committed turn
  that carried it.
"""

from __future__ import annotations

import time
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

STORE_FORMAT = "agentscript-store/1"


class StoreError(Exception):
    """A store failure that is not the caller's mistake (unreachable database, bad schema)."""


class SessionBusy(Exception):
    """Another turn of the session held its lock for longer than the caller would wait
    (``why`` says otherwise when something else held it)."""

    def __init__(
        self, session_id: str, waited: float, *, why: str = "is running another turn"
    ) -> None:
        super().__init__(f"session {session_id} {why} (waited {waited:g} s); retry later")
        self.session_id = session_id
        self.waited = waited


class SessionGone(Exception):
    """The session does not exist (never created, deleted or expired)."""

    def __init__(self, session_id: str) -> None:
        super().__init__(f"no session {session_id}")
        self.session_id = session_id


class TurnConflict(Exception):
    """The session moved on while the turn ran (its lock was lost): the turn is not committed."""

    def __init__(self, session_id: str, expected: int) -> None:
        super().__init__(
            f"session {session_id} changed or was deleted while turn {expected + 1} ran; "
            "nothing of that turn was written: send the message again (404 if it was deleted)"
        )
        self.session_id = session_id
        self.expected = expected


@dataclass
class DamagedRecord(Exception):
    """A stored row whose JSON (or packed trace) cannot be read: damaged on disk or written by
    hand. Stores never raise it; they mark the record (``damaged``) and the service refuses to
    use the damaged part, so the rest of the session (its listing, other turns, its deletion)
    keeps working and the row stays as it was found."""

    def __init__(self, session_id: str, column: str, reason: str, turn: int | None = None) -> None:
        if turn is None:  # the session cannot go on
            message = (
                f"session {session_id}: its stored state cannot be read ({reason}); it is kept "
                "as found for the operator; start a new session, or delete this one"
            )
        else:  # one turn's record; the session goes on
            message = (
                f"session {session_id}: the stored {column} of turn {turn} cannot be read "
                f"({reason}); it is kept as found for the operator"
            )
        super().__init__(message)
        self.session_id = session_id
        self.column = column
        self.turn = turn


@dataclass
class SessionRecord:
    """One stored session. ``state`` is ``Session.to_json()`` (tagged with its own format)."""

    session_id: str
    agent: str
    owner: str  # hash of the API key that created it ("" when the server has no keys)
    agent_version: str  # fingerprint of the agent's shape when the session was created
    state: dict[str, Any]
    turns: int = 0
    ended: bool = False
    escalated: bool = False
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    expires_at: float | None = None
    format: str = STORE_FORMAT
    # ``state`` as the store holds it (JSON text), when read from a store: restoring from the
    # text needs no walk of the parsed copy (engine/restore.py ``decode``).
    state_text: str | None = field(default=None, compare=False, repr=False)
    # Columns of the stored row that could not be read, with why (``state`` is then ``{}``).
    damaged: dict[str, str] = field(default_factory=dict, compare=False)

    def expired(self, now: float | None = None) -> bool:
        return self.expires_at is not None and self.expires_at <= (now or time.time())


@dataclass
class TurnRecord:
    """One committed turn: its number, the turn JSON returned to the client, and its trace."""

    session_id: str
    turn: int
    result: dict[str, Any]
    trace: dict[str, Any]
    idempotency_key: str | None = None
    created_at: float = field(default_factory=time.time)
    # Columns of the stored row that could not be read (``result``, ``trace``: then ``{}``),
    # with why.
    damaged: dict[str, str] = field(default_factory=dict, compare=False)


@dataclass
class TurnOutcome:
    """What a turn changes on its session, handed to :meth:`SessionLock.commit`. ``state``
    may share containers with the live session (``Session.to_json(detached=False)``): a store
    writes it out or copies it during the commit, and keeps no reference to it."""

    state: dict[str, Any]
    record: TurnRecord
    ended: bool
    escalated: bool
    expires_at: float | None


class SessionLock(Protocol):
    """A held session lock: the session as read under it, and the one way to commit a turn."""

    session: SessionRecord

    async def commit(self, outcome: TurnOutcome) -> None:
        """Write the state and the turn in one transaction; :class:`TurnConflict` if the session
        no longer has ``session.turns`` turns, ``ValueError`` if the key was already used."""


class Store(Protocol):
    """A session store. Every method may raise :class:`StoreError` when the backend fails."""

    url: str  # where it stores, without credentials (for logs and start-up output)

    async def open(self) -> None:
        """Connect and migrate the schema (idempotent)."""

    async def close(self) -> None: ...

    async def ping(self) -> None:
        """Raise :class:`StoreError` unless the backend answers."""

    async def create_session(self, record: SessionRecord) -> None: ...

    async def get_session(self, session_id: str) -> SessionRecord | None:
        """The session, or None when absent or expired."""

    async def list_sessions(
        self, *, owner: str, agent: str | None, limit: int, after: str | None
    ) -> list[SessionRecord]:
        """Live sessions of ``owner`` ordered by id, those after ``after`` only, without their
        state (``state`` is ``{}``): a listing shows a session, it never restores one."""

    async def delete_session(self, session_id: str) -> bool:
        """Delete the session and its turns; False when there was none."""

    def lock_session(
        self, session_id: str, wait: float
    ) -> AbstractAsyncContextManager[SessionLock]:
        """Hold the session's lock (raises :class:`SessionBusy` after ``wait`` seconds,
        :class:`SessionGone` when it does not exist)."""

    async def find_turn(self, session_id: str, idempotency_key: str) -> TurnRecord | None: ...

    async def get_turn(self, session_id: str, turn: int) -> TurnRecord | None: ...

    async def list_turns(self, session_id: str) -> list[TurnRecord]: ...

    async def list_turns_with_traces(self, session_id: str, limit: int) -> list[TurnRecord]:
        """The session's first ``limit`` turns in order, each with its trace, in one query
        (:meth:`list_turns` may leave traces out: the SQL stores read ``{}`` in their place).
        A trace that cannot be read is ``{}``, marked ``damaged``, as :meth:`get_turn` has it.
        ``limit`` >= 0."""

    async def purge_expired(self) -> int:
        """Delete expired sessions (and their turns); how many were deleted."""

    async def backfill_expiry(self, ttl: float) -> int:
        """Give every session without an expiry (written while no TTL was set) the one its
        last update would have given it under ``ttl`` seconds, so that a TTL set later expires
        them too; how many were given one. The server starts it in the background once it is ready, when a TTL is set.
        The SQL stores go in batches, each its own transaction."""
