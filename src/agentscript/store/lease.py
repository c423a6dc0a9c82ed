"""One turn of a session at a time, across processes, without holding the database meanwhile.

Both SQL stores serialise the turns of a session the same way:

- inside a process, an ``asyncio.Lock`` per session queues its turns;
- across processes, the turn at the head of a queue takes a lease naming its holder, written
  in one short statement: on PostgreSQL two columns of the session's own row (``lease_holder``,
  ``lease_until``), on SQLite a row of a table of its own (``agentscript_leases``: SQLite
  writes a whole record on any UPDATE of it, state included). The turn then runs (the model
  may take seconds) with no connection, transaction or row lock held, and gives the lease back
  in its commit (PostgreSQL: the commit's own update; SQLite: a statement of the commit's
  transaction), or on its way out when it does not commit;
- a lease whose holder is gone (a worker killed mid-turn) or whose time ran out is taken over,
  so a crash never blocks a session. Each backend knows what "gone" means: a process that no
  longer runs for SQLite (one machine), a worker whose presence lock PostgreSQL no longer
  holds;
- a give-back that fails (a connection lost just then) is owed: the store drops it before its
  next turn, and a lease of this very store is taken back at once anyway, since the local
  lock proves no turn of this store still runs there;
- the commit still checks the turn count read under the lease, so even a lost lease (taken
  over from a worker that was only slow) cannot lose an update: that turn gets
  :class:`~agentscript.store.base.TurnConflict`.

A holder is ``"<worker>:<nonce>"``: ``worker`` names this store in this process (what the
liveness check reads), ``nonce`` this one turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Protocol

from agentscript.store.base import (
    KeptRevision,
    SessionBusy,
    SessionGone,
    SessionRecord,
    StoreError,
    TurnOutcome,
    kept_revision,
)

# How long a lease lasts without its holder committing: a backstop far above any turn's own
# limits, for a holder that is alive but stuck (a dead one is taken over at once).
LEASE_SECONDS = 600.0
# How often a waiting turn looks again at another process's lease: soon at first (most turns
# are short), then half as often each time, down to once every POLL_MAX_SECONDS, so a turn that
# waits out another worker's long model call costs the database about 50 statements in 5 s
# rather than 500.
POLL_SECONDS = 0.005
POLL_MAX_SECONDS = 0.1


class LeaseBackend(Protocol):
    """What a store does with its lease rows; :class:`Leases` does the rest."""

    async def worker(self) -> str:
        """This store's name in holders (the part its liveness check reads)."""

    async def take_lease(
        self, session_id: str, holder: str, kept: str | None = None
    ) -> tuple[bool, SessionRecord | None]:
        """In one step: take the lease unless a live holder of another store has it, and read
        the session after taking it, without its state if its revision is ``kept``
        (``SessionRecord.withheld``). ``(True, record)``: taken; ``(False, None)``: another
        holder has it; ``(True, None)``: no such session (and no lease was left written)."""

    async def read_session(self, session_id: str) -> SessionRecord | None:
        """The session's row, state included, expired or not (it is read under its lease,
        taken while it had not expired); None if it is gone."""

    async def drop_lease(self, session_id: str, holder: str) -> None:
        """Give the lease back (a turn that did not commit)."""

    async def commit_turn(self, session: SessionRecord, outcome: TurnOutcome, holder: str) -> None:
        """Write the turn and give the lease back, in one transaction (the
        :meth:`~agentscript.store.base.SessionLock.commit` contract)."""


class Lease:
    """A held lease: the session as read under it, and the one way to commit a turn."""

    def __init__(self, backend: LeaseBackend, session: SessionRecord, holder: str) -> None:
        self._backend = backend
        self.session = session
        self.holder = holder
        self.released = False

    async def read_state(self) -> SessionRecord:
        """``session`` with its state, read again if the lease's read withheld it."""
        if self.session.withheld:
            found = await self._backend.read_session(self.session.session_id)
            if found is None:  # deleted meanwhile: a commit would find no row either
                raise SessionGone(self.session.session_id)
            self.session = found
        return self.session

    async def commit(self, outcome: TurnOutcome) -> None:
        await self._backend.commit_turn(self.session, outcome, self.holder)
        # On any failure the give-back runs on the way out: it is a no-op for a lease the
        # failed statement gave back already.
        self.released = True


class _Queue:
    """One session's lock in this process and how many turns hold or await it."""

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.users = 0


class Leases:
    """The lock of every session of one store: local queues, then the backend's lease rows."""

    def __init__(self, backend: LeaseBackend) -> None:
        self._backend = backend
        self._queues: dict[str, _Queue] = {}
        # Leases whose give-back failed (session, holder): retried before this store's next
        # turn, since other workers would otherwise wait for them until they time out.
        self._owed: set[tuple[str, str]] = set()

    @property
    def queued(self) -> int:
        """Sessions with a turn running or waiting in this process."""
        return len(self._queues)

    @asynccontextmanager
    async def hold(
        self, session_id: str, wait: float, kept: KeptRevision = None
    ) -> AsyncIterator[Lease]:
        """The session's lease (:class:`SessionBusy` after ``wait`` seconds,
        :class:`SessionGone` when it does not exist), the session read without its state if
        its revision is ``kept`` (a function of ``kept`` is asked once this turn heads the
        local queue)."""
        deadline = time.monotonic() + wait
        if self._owed:
            await self._give_back_owed()
        queue = self._queues.get(session_id)
        if queue is None:
            queue = self._queues[session_id] = _Queue()
        queue.users += 1
        try:
            if not await acquire_within(queue.lock, wait):
                raise SessionBusy(session_id, wait)
            try:
                # Asked only now: a turn of this process that ran meanwhile has committed and
                # kept a newer revision than the caller saw on arriving. It stays the same while
                # the lease is polled for, since no other turn of this process runs meanwhile.
                revision = kept_revision(kept)
                lease = await self._take(session_id, deadline, wait, revision)
                try:
                    yield lease
                finally:
                    if not lease.released:
                        await self._give_back(session_id, lease.holder)
            finally:
                queue.lock.release()
        finally:
            # Forgotten once nobody holds or awaits it: one entry per running session only.
            queue.users -= 1
            if not queue.users:
                del self._queues[session_id]

    async def _give_back(self, session_id: str, holder: str) -> None:
        """Drop a lease that no commit gave back. It runs to its end even if the turn is
        cancelled meanwhile (a shutdown), and a failure is owed, not raised: raising would hide
        what ended the turn, and the lease is still given back before this store's next turn
        (or taken over once this worker is gone)."""
        owed = (session_id, holder)
        drop = asyncio.ensure_future(self._backend.drop_lease(session_id, holder))

        def settle(done: asyncio.Future[None]) -> None:
            if done.cancelled() or done.exception() is not None:
                self._owed.add(owed)

        drop.add_done_callback(settle)
        with contextlib.suppress(StoreError):
            await asyncio.shield(drop)

    async def _give_back_owed(self) -> None:
        for session_id, holder in list(self._owed):
            try:
                await self._backend.drop_lease(session_id, holder)
            except StoreError:
                return  # the database is still away; the next turn tries again
            self._owed.discard((session_id, holder))

    async def _take(self, session_id: str, deadline: float, wait: float, kept: str | None) -> Lease:
        holder = f"{await self._backend.worker()}:{uuid.uuid4().hex}"
        pause = POLL_SECONDS
        while True:
            try:
                taken, record = await self._backend.take_lease(session_id, holder, kept)
            except StoreError:
                raise  # the database failed; this store takes its own lease back at once
            except BaseException:
                # Perhaps taken, then the row could not be read or the turn was cancelled (a
                # shutdown): no turn will run under it, so it goes back now, not when it expires.
                await self._give_back(session_id, holder)
                raise
            if taken:
                if record is None:
                    raise SessionGone(session_id)
                return Lease(self._backend, record, holder)
            left = deadline - time.monotonic()
            if left <= 0:
                raise SessionBusy(session_id, wait)
            await asyncio.sleep(min(pause, left))
            pause = min(pause * 2, POLL_MAX_SECONDS)


async def acquire_within(lock: asyncio.Lock | asyncio.Semaphore, seconds: float) -> bool:
    """Acquire ``lock`` within ``seconds``; False if it stayed taken. A free one is taken at
    once, without the task ``wait_for`` would start for the timeout (one per turn)."""
    if not lock.locked():
        await lock.acquire()
        return True
    try:
        await asyncio.wait_for(lock.acquire(), seconds)
    except TimeoutError:
        return False
    return True


def worker_of(holder: str) -> str:
    """The worker part of a holder."""
    return holder.rsplit(":", 1)[0]
