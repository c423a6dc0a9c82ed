"""An in-process store with the same behaviour as the SQL ones (tests, throwaway servers).

Nothing survives the process. Turns of one session are serialised with an ``asyncio.Lock``.
A session's state is kept as the JSON text a SQL store writes (the commit's ``state_text`` when
given), and each read parses it anew: what callers change afterwards is never stored, and a
restore measures the text, as it does a SQL store's (not the parsed copy, which it can only
estimate).
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from agentscript import jsontext
from agentscript.store.base import (
    KeptRevision,
    SessionBusy,
    SessionGone,
    SessionRecord,
    TurnConflict,
    TurnOutcome,
    TurnRecord,
    kept_revision,
)


class MemoryStore:
    """Sessions and turns in dictionaries; see :class:`agentscript.store.base.Store`."""

    url = "memory://"

    def __init__(self) -> None:
        self._sessions: dict[str, SessionRecord] = {}
        self._turns: dict[str, list[TurnRecord]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def ping(self) -> None:
        return None

    async def create_session(self, record: SessionRecord) -> None:
        if record.session_id in self._sessions:
            raise ValueError(f"session {record.session_id} already exists")
        text = record.state_text
        self._sessions[record.session_id] = _holding(
            record, jsontext.dumps(record.state) if text is None else text
        )
        self._turns[record.session_id] = []

    async def get_session(self, session_id: str) -> SessionRecord | None:
        record = self._sessions.get(session_id)
        if record is None or record.expired():
            return None
        return copy.deepcopy(record)

    async def get_session_summary(self, session_id: str) -> SessionRecord | None:
        record = self._sessions.get(session_id)
        if record is None or record.expired():
            return None
        return _summary(record)

    async def list_sessions(
        self, *, owner: str, agent: str | None, limit: int, after: str | None
    ) -> list[SessionRecord]:
        now = time.time()
        found = [
            _summary(r)
            for sid, r in sorted(self._sessions.items())
            if r.owner == owner
            and (agent is None or r.agent == agent)
            and (after is None or sid > after)
            and not r.expired(now)
        ]
        return found[:limit]

    async def delete_session(self, session_id: str) -> bool:
        self._turns.pop(session_id, None)
        return self._sessions.pop(session_id, None) is not None

    @asynccontextmanager
    async def lock_session(
        self, session_id: str, wait: float, *, kept: KeptRevision = None
    ) -> AsyncIterator[_MemoryLock]:
        lock = self._locks.setdefault(session_id, asyncio.Lock())
        try:
            await asyncio.wait_for(lock.acquire(), wait)
        except TimeoutError:
            raise SessionBusy(session_id, wait) from None
        try:
            stored = self._sessions.get(session_id)
            if stored is None or stored.expired():
                raise SessionGone(session_id)
            # As the SQL stores read it: without its state (not copied) when the caller keeps
            # the session at this revision (asked only now: a turn ahead of it in the queue may
            # have committed and kept a newer one meanwhile).
            revision = kept_revision(kept)
            kept_here = revision is not None and stored.revision == revision
            record = _summary(stored, withheld=True) if kept_here else copy.deepcopy(stored)
            yield _MemoryLock(self, record)
        finally:
            lock.release()

    async def find_turn(self, session_id: str, idempotency_key: str) -> TurnRecord | None:
        for turn in self._turns.get(session_id, []):
            if turn.idempotency_key == idempotency_key:
                return copy.deepcopy(turn)
        return None

    async def get_turn(self, session_id: str, turn: int) -> TurnRecord | None:
        turns = self._turns.get(session_id, [])
        return copy.deepcopy(turns[turn - 1]) if 1 <= turn <= len(turns) else None

    async def list_turns(
        self,
        session_id: str,
        after: int = 0,
        limit: int = 1_000_000_000,
        max_bytes: int | None = None,
    ) -> list[TurnRecord]:
        turns = self._turns.get(session_id, [])
        page = turns[max(after, 0) : max(after, 0) + max(limit, 0)]
        return copy.deepcopy(page if max_bytes is None else _up_to_size(page, max_bytes))

    async def list_turns_with_traces(self, session_id: str, limit: int) -> list[TurnRecord]:
        return copy.deepcopy(self._turns.get(session_id, [])[: max(limit, 0)])

    async def purge_expired(self) -> int:
        now = time.time()
        # A session whose lock is held has a turn running, begun before it expired: its
        # commit pushes the expiry back (the SQL stores skip a live lease alike).
        gone = [
            sid
            for sid, r in self._sessions.items()
            if r.expired(now) and not (sid in self._locks and self._locks[sid].locked())
        ]
        for sid in gone:
            await self.delete_session(sid)
        return len(gone)

    async def backfill_expiry(self, ttl: float) -> int:
        untimed = [r for r in self._sessions.values() if r.expires_at is None]
        for stored in untimed:
            stored.expires_at = stored.updated_at + ttl
        return len(untimed)

    def _commit(self, session: SessionRecord, outcome: TurnOutcome) -> None:
        stored = self._sessions.get(session.session_id)
        if stored is None or stored.turns != session.turns:
            raise TurnConflict(session.session_id, session.turns)
        key = outcome.record.idempotency_key
        if key is not None and any(
            t.idempotency_key == key for t in self._turns[session.session_id]
        ):
            raise ValueError(f"Idempotency-Key {key!r} already used in this session")
        text = outcome.state_text
        stored = _holding(stored, jsontext.dumps(outcome.state) if text is None else text)
        stored.revision = outcome.revision
        stored.turns += 1
        stored.ended = outcome.ended
        stored.escalated = outcome.escalated
        stored.expires_at = outcome.expires_at
        stored.updated_at = time.time()
        self._sessions[session.session_id] = stored
        self._turns[session.session_id].append(copy.deepcopy(outcome.record))


def _holding(record: SessionRecord, text: str) -> SessionRecord:
    """``record`` holding ``text`` as its state, unparsed, as a row read from a SQL store holds
    its column (``schema.session_from_row``): a copy of it (``copy.deepcopy``, which shares the
    text) parses its own state when asked."""
    return _rebuilt(record, None, column=text)


def _summary(record: SessionRecord, *, withheld: bool = False) -> SessionRecord:
    """A listed session: the record without its state, as the SQL stores list it (``{}``, never
    damaged: the stored state is not parsed), or as a lock read of a kept session has it
    (``withheld``: no state)."""
    return _rebuilt(record, None if withheld else {}, withheld=withheld)


def _rebuilt(
    record: SessionRecord,
    state: dict[str, Any] | None,
    *,
    column: str | None = None,
    withheld: bool = False,
) -> SessionRecord:
    """A new record with ``record``'s columns but its state: ``state``, or ``column`` unparsed."""
    return SessionRecord(
        record.session_id,
        record.agent,
        record.owner,
        record.agent_version,
        state,
        turns=record.turns,
        ended=record.ended,
        escalated=record.escalated,
        created_at=record.created_at,
        updated_at=record.updated_at,
        expires_at=record.expires_at,
        format=record.format,
        column=column,
        revision=record.revision,
        withheld=withheld,
    )


class _MemoryLock:
    def __init__(self, store: MemoryStore, session: SessionRecord) -> None:
        self._store = store
        self.session = session

    async def read_state(self) -> SessionRecord:
        if self.session.withheld:
            stored = self._store._sessions.get(self.session.session_id)
            if stored is None:
                raise SessionGone(self.session.session_id)
            self.session = copy.deepcopy(stored)
        return self.session

    async def commit(self, outcome: TurnOutcome) -> None:
        self._store._commit(self.session, outcome)


def _up_to_size(turns: list[TurnRecord], max_bytes: int) -> list[TurnRecord]:
    """``turns`` up to the first at which their results total ``max_bytes`` or more, measured
    as the SQL stores measure the JSON they keep (``Store.list_turns``)."""
    total = 0
    for count, turn in enumerate(turns, 1):
        total += len(jsontext.dumps_bytes(turn.result))
        if total >= max_bytes:
            return turns[:count]
    return turns
