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

import json
import secrets
import sys
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol

STORE_FORMAT = "agentscript-store/1"

# ``Store.lock_session``'s ``kept``: a revision, or a function that tells it once the caller is
# at the head of the session's queue in this process (what it keeps may change while it waits).
KeptRevision = str | Callable[[], str | None] | None


def kept_revision(kept: KeptRevision) -> str | None:
    """The revision ``kept`` names, asked of its function now if it is one."""
    return kept() if callable(kept) else kept


class StoreError(Exception):
    """A store failure that is not the caller's mistake (unreachable database, bad schema)."""


class StoreUnreachable(StoreError):
    """The database could not be reached, or stopped answering: a connection refused, dropped
    or cut for want of an answer. It passes (a restart, a failover), unlike a bad schema: a
    worker that meets it at its start is started again later (server/supervisor.py)."""


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


def new_revision() -> str:
    """A token no other write of a session's state carries: written with each state a session
    is created or committed with, it tells that write apart from any other (server/live.py)."""
    return secrets.token_hex(16)


class StateWithheld(RuntimeError):
    """The state of a record read without it (``SessionRecord.withheld``) was asked for: a
    caller's bug, never the store's. Nothing may run on a state that was not read."""


class SessionRecord:
    """One stored session. ``state`` is ``Session.to_json()`` (tagged with its own format).

    A record read from a store holds its state column as read (``column``) and parses it the
    first time ``state``, ``state_text`` or ``damaged`` is read: a turn that runs the session
    its worker kept needs none of them (server/live.py matches the ``revision``), and a state at
    the history limit takes tens of milliseconds to parse.

    A lock read told the revision its caller keeps (:meth:`Store.lock_session`) does not even
    read the state of a row that still has that revision: the record is ``withheld``, and asking
    for its state raises :class:`StateWithheld` until :meth:`SessionLock.read_state` reads it."""

    def __init__(
        self,
        session_id: str,
        agent: str,
        owner: str,
        agent_version: str,
        state: dict[str, Any] | None = None,
        turns: int = 0,
        ended: bool = False,
        escalated: bool = False,
        created_at: float | None = None,
        updated_at: float | None = None,
        expires_at: float | None = None,
        format: str = STORE_FORMAT,
        *,
        column: str | bytes | None = None,
        damaged: dict[str, str] | None = None,
        revision: str | None = None,
        withheld: bool = False,
    ) -> None:
        self.session_id = session_id
        self.agent = agent
        self.owner = owner  # hash of the API key that created it ("" when the server has no keys)
        self.agent_version = agent_version  # the agent's version (state hash) at its creation
        self.turns = turns
        self.ended = ended
        self.escalated = escalated
        now = time.time()
        self.created_at = now if created_at is None else created_at
        self.updated_at = now if updated_at is None else updated_at
        self.expires_at = expires_at
        self.format = format
        # Written with the state (``new_revision``); None for a row written before revisions.
        self.revision = revision
        # The state column as read, until parsed (``_state`` None); then the text itself, if it
        # is text and undamaged (``state_text``), else None.
        self._column = column
        self._state = {} if state is None and column is None and not withheld else state
        # The state column was not read (the row had the revision the caller keeps).
        self.withheld = withheld and state is None
        # Columns of the stored row that could not be read, with why (``state`` is then
        # ``{}``); complete once the state is parsed.
        self._damaged: dict[str, str] = dict(damaged or {})

    @property
    def state(self) -> dict[str, Any]:
        if self._state is None:
            return self._parse()
        return self._state

    @state.setter
    def state(self, value: dict[str, Any]) -> None:
        self._state = value
        self._column = None
        self.withheld = False

    @property
    def state_text(self) -> str | None:
        """``state`` as the store holds it (JSON text), when read from a store: restoring from
        the text needs no walk of the parsed copy (engine/restore.py ``decode``)."""
        if self._state is None:
            self._parse()
        return self._column if type(self._column) is str else None

    @property
    def damaged(self) -> dict[str, str]:
        if self._state is None:
            self._parse()
        return self._damaged

    def _parse(self) -> dict[str, Any]:
        if self.withheld:
            raise StateWithheld(
                f"session {self.session_id}: its state was not read (the row holds revision "
                f"{self.revision}, which the caller keeps); read it under the lock first"
            )
        column = self._column if self._column is not None else "{}"
        state = json_object(column, "state", self._damaged)
        if "state" in self._damaged:
            self._column = None
        self._state = state
        return state

    def expired(self, now: float | None = None) -> bool:
        return self.expires_at is not None and self.expires_at <= (now or time.time())

    def _compared(self) -> tuple[Any, ...]:
        return (
            self.session_id,
            self.agent,
            self.owner,
            self.agent_version,
            self.state,
            self.turns,
            self.ended,
            self.escalated,
            self.created_at,
            self.updated_at,
            self.expires_at,
            self.format,
            self.revision,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SessionRecord):
            return NotImplemented
        return self._compared() == other._compared()

    __hash__ = None  # type: ignore[assignment]  # mutable, as a dataclass with eq

    def __repr__(self) -> str:
        withheld = ", withheld=True" if self.withheld else ""
        return (
            f"SessionRecord(session_id={self.session_id!r}, agent={self.agent!r}, "
            f"turns={self.turns}, revision={self.revision!r}{withheld})"
        )


def json_object(text: str | bytes, column: str, damaged: dict[str, str]) -> dict[str, Any]:
    """A column's JSON object; ``{}`` when the stored text is not one, with why under
    ``damaged[column]`` (a row damaged on disk or written by hand must not make the rows
    around it unreadable). The reason quotes none of the text: it reaches API clients.

    Besides text that is not JSON, that is JSON the parser refuses: nested past its recursion
    limit, or an integer longer than Python converts. A lone surrogate escaped in the text
    (``"\\ud800"``, which a model's answer can hold) reads back as it was written: the answers
    write it as its escape again (``jsontext``), and a session must not be lost to what a
    model said."""
    try:
        value = json.loads(text)
    except UnicodeDecodeError:
        damaged[column] = "not UTF-8 text"
        return {}
    except json.JSONDecodeError as exc:
        damaged[column] = f"not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        return {}
    except RecursionError:
        damaged[column] = "JSON nested too deep to read"
        return {}
    except ValueError as exc:  # an integer longer than int() converts (set_int_max_str_digits)
        damaged[column] = (
            f"JSON with an integer of more than {sys.get_int_max_str_digits()} digits"
            if "digits" in str(exc)
            else f"JSON that cannot be read ({type(exc).__name__})"
        )
        return {}
    if type(value) is not dict:
        damaged[column] = f"JSON {JSON_TYPES.get(type(value), 'value')}, not an object"
        return {}
    return value


JSON_TYPES = {
    type(None): "null",
    list: "array",
    str: "string",
    int: "number",
    float: "number",
    bool: "true/false",
}


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
    writes it out or copies it during the commit, and keeps no reference to it.

    ``state_text``, when given, is ``state`` as ``jsontext.dumps`` writes it: the SQL stores
    write it as it is, never serialising the state a second time (the server serialises it
    once, to check its size against ``restore.MAX_SESSION_CHARS``)."""

    state: dict[str, Any]
    record: TurnRecord
    ended: bool
    escalated: bool
    expires_at: float | None
    # Written with the state; the caller keeps it to know the row still holds this commit.
    revision: str = field(default_factory=new_revision)
    state_text: str | None = None


class SessionLock(Protocol):
    """A held session lock: the session as read under it, and the one way to commit a turn."""

    session: SessionRecord

    async def read_state(self) -> SessionRecord:
        """``session`` with its state: read again under the lock if the lock read withheld it
        (the caller no longer has the session it kept, e.g. dropped meanwhile to make room);
        ``session`` becomes that record. :class:`SessionGone` if the row is gone (deleted)."""

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

    async def get_session_summary(self, session_id: str) -> SessionRecord | None:
        """The session without its state (``state`` is ``{}``), as :meth:`list_sessions` has
        it, or None when absent or expired: who owns it and how many turns it has, for the
        requests that need no more (a state at the history limit is 4 MB to read)."""

    async def list_sessions(
        self, *, owner: str, agent: str | None, limit: int, after: str | None
    ) -> list[SessionRecord]:
        """Live sessions of ``owner`` ordered by id, those after ``after`` only, without their
        state (``state`` is ``{}``): a listing shows a session, it never restores one."""

    async def delete_session(self, session_id: str) -> bool:
        """Delete the session and its turns; False when there was none. The session is gone
        for every reader at once; the SQL stores then delete its turns in short transactions,
        none of which any reader sees meanwhile (``schema.DELETE_SESSION_ROW``)."""

    def lock_session(
        self, session_id: str, wait: float, *, kept: KeptRevision = None
    ) -> AbstractAsyncContextManager[SessionLock]:
        """Hold the session's lock (raises :class:`SessionBusy` after ``wait`` seconds,
        :class:`SessionGone` when it does not exist). ``kept``: the revision of the state the
        caller holds already; a row that still has it is read without its state (the record is
        ``withheld``: :meth:`SessionLock.read_state` reads it). None matches no row. A function
        is called once this caller is first in the session's queue in this process, just before
        the read: a turn queued behind another of this process then names the revision that
        turn committed and kept, not the one (or none) it saw on arriving."""

    async def find_turn(self, session_id: str, idempotency_key: str) -> TurnRecord | None: ...

    async def get_turn(self, session_id: str, turn: int) -> TurnRecord | None: ...

    async def list_turns(
        self,
        session_id: str,
        after: int = 0,
        limit: int = 1_000_000_000,
        max_bytes: int | None = None,
    ) -> list[TurnRecord]:
        """The session's turns numbered above ``after``, in order, at most ``limit`` of them
        (traces may be left out: the SQL stores read ``{}`` in their place); given
        ``max_bytes``, they end at the first turn at which their stored results (compact JSON,
        UTF-8: ``jsontext.dumps_bytes``) total ``max_bytes`` or more, so that there is at least
        one, however large, when any is left. A store reads no turn past the last it returns."""

    async def list_turns_with_traces(self, session_id: str, limit: int) -> list[TurnRecord]:
        """The session's first ``limit`` turns in order, each with its trace, in one query
        (:meth:`list_turns` may leave traces out: the SQL stores read ``{}`` in their place).
        A trace that cannot be read is ``{}``, marked ``damaged``, as :meth:`get_turn` has it.
        ``limit`` >= 0."""

    async def purge_expired(self) -> int:
        """Delete expired sessions (and their turns, with those of any deletion left
        unfinished); how many sessions were deleted."""

    async def backfill_expiry(self, ttl: float) -> int:
        """Give every session without an expiry (written while no TTL was set) the one its
        last update would have given it under ``ttl`` seconds, so that a TTL set later expires
        them too; how many were given one. The server starts it in the background once it is ready, when a TTL is set.
        The SQL stores go in batches, each its own transaction."""
