"""The embedded default store: one SQLite file in WAL mode, shared by the workers of one machine.

Turns of one session are serialised by leases (:mod:`.lease`): a lease whose holder process no
longer runs (killed mid-turn) is taken over at once. A lease is a row of a table of its own
(``agentscript_leases``, schema version 6), never written on the session's row: SQLite writes a
whole record on any UPDATE of it, state included, and a lease taken and given back on the row
of a session at the history limit wrote 16 MB of log and held the loop 30-45 ms. Statements are
short and run on the event loop's thread. WAL checkpoints run on a thread of their own
(:mod:`.checkpoint`).

Waiting for another process's lock never blocks the loop for long. SQLite's own busy handler
waits at most ``BUSY_TIMEOUT_MS`` on the loop's thread: enough for another worker's commit,
which holds the write lock well under a millisecond. A lock held longer (an operator's shell
left in ``BEGIN IMMEDIATE``, a checkpoint that makes writers wait) is waited out asleep on the
loop, the statement tried again every few ms, for up to ``BUSY_WAIT`` seconds in all; then the
operation fails with :class:`StoreError` (a 503). Meanwhile the worker serves its other
requests.

A deletion or a purge never holds the write lock, nor the loop, for long itself: the session
rows go first, ``PURGE_BATCH`` at most a transaction, and their turns after them in chunks of
bounded rows and bytes (:mod:`.batches`), one transaction each, the loop serving other requests
between two (``schema.DELETE_SESSION_ROW`` says why no request sees a session half deleted).

Every operation first checks (one ``stat``) that the path still names the file opened. A file
removed or renamed away is refused until it comes back; a file replaced by another (a backup
restored with ``mv``) is let go of for good: the store empties its log into the file it opened
and closes, and answers :class:`StoreError` until the server restarts, rather than serve and
write sessions nobody will read, or leave the old log to be replayed into the new file.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, NoReturn

from agentscript.store import schema
from agentscript.store.base import (
    KeptRevision,
    SessionRecord,
    StoreError,
    TurnConflict,
    TurnOutcome,
    TurnRecord,
)
from agentscript.store.batches import delete_turns_chunk, finish_deletions, in_batches
from agentscript.store.checkpoint import (
    PAGE_SIZE,
    WAL_SIZE_LIMIT,
    Change,
    Checkpointer,
    FileWatch,
)
from agentscript.store.lease import LEASE_SECONDS, Lease, Leases, worker_of

# Take a session's lease when nobody holds it (no row) or its time is up, in one statement that
# finds the session there and not expired; no change when a holder has it, or when the session
# is gone or expired. The session's row is only read.
TAKE_LEASE = (
    "INSERT INTO agentscript_leases (session_id, holder, until) "
    "SELECT session_id, ?, ? FROM agentscript_sessions "
    "WHERE session_id = ? AND (expires_at IS NULL OR expires_at > ?) "
    "ON CONFLICT (session_id) DO UPDATE SET holder = excluded.holder, until = excluded.until "
    "WHERE agentscript_leases.until <= ?"
)
# Who holds the lease of a session that exists (NULL: nobody), no row when it does not.
HOLDER_OF_LEASE = (
    "SELECT agentscript_leases.holder FROM agentscript_sessions "
    "LEFT JOIN agentscript_leases USING (session_id) "
    "WHERE session_id = ? AND (expires_at IS NULL OR expires_at > ?)"
)
TAKE_STALE_LEASE = (
    "UPDATE agentscript_leases SET holder = ?, until = ? WHERE session_id = ? AND holder = ?"
)
DROP_LEASE = "DELETE FROM agentscript_leases WHERE session_id = ? AND holder = ?"
# schema.PURGEABLE with the lease in its table: expired, and no turn running.
PURGEABLE = (
    "expires_at IS NOT NULL AND expires_at <= ? AND NOT EXISTS (SELECT 1 FROM agentscript_leases "
    "WHERE agentscript_leases.session_id = agentscript_sessions.session_id AND until > ?)"
)
# Up to ? sessions expired at a time, none with a turn running (the expiry index finds them):
# one batch of a purge.
EXPIRED_BATCH = f"SELECT session_id FROM agentscript_sessions WHERE {PURGEABLE} LIMIT ?"

# How long SQLite's busy handler may wait for another connection's lock, on the event loop's
# thread (busy_timeout, ms): another worker's commit holds the write lock well under a
# millisecond, and is waited out here at no cost the loop sees. Anything held longer is waited
# out asleep (``_wait_out``).
BUSY_TIMEOUT_MS = 5
# How long an operation waits in all for another process's lock before it fails (StoreError,
# a 503): the busy_timeout the store's statements had when they waited on the loop's thread.
# A migration at start-up still waits that long there: workers starting together wait on each
# other, and nothing is served yet. A store already migrated opens without the write lock.
BUSY_WAIT = 5.0
# The pauses between tries of a statement that found a lock taken: short at first (a RESTART
# checkpoint holds writers 1-9 ms), doubling up to BUSY_PAUSE_MAX, so a long hold costs a try
# every 50 ms.
BUSY_PAUSE = 0.002
BUSY_PAUSE_MAX = 0.05
# Rows of expired sessions deleted per transaction of a purge (their turns go later, in chunks
# of their own), and sessions given an expiry per transaction of ``backfill_expiry``. Each row
# is read whole, state included, to be deleted or rewritten: 4 MB at the history limit, 4-8 ms
# to delete here (30 ms to rewrite with an expiry it had none of), so a batch is a few rows
# rather than the 500 it was, which held the write lock and the loop for seconds on long
# sessions. Small sessions cost a few hundredths of a ms each, so a backlog of them still goes
# fast (20,000 sessions of five turns in 2.5-3 s of short transactions).
PURGE_BATCH = 4


class SQLiteStore:
    """Sessions in one SQLite file; see :class:`agentscript.store.base.Store`."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.url = f"sqlite:///{self.path}"
        self._db: sqlite3.Connection | None = None
        self.leases = Leases(self)
        # This store in this process: its pid, the process's start and its pid namespace are
        # what another process's liveness check reads (see _alive).
        me = os.getpid()
        self._worker = f"{me}.{process_start(me) or 0}.{PID_NAMESPACE}.{uuid.uuid4().hex[:8]}"
        self.watch = FileWatch(self.path)
        self.checkpointer = Checkpointer(self.path, watch=self.watch)
        # Why the store no longer answers: its file was replaced while it ran.
        self._lost: str | None = None

    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            raise StoreError(self._lost or "the store is not open")
        return self._db

    async def open(self) -> None:
        try:
            _create_private(self.path)
            # Until the schema is migrated, a lock is waited for on this thread (BUSY_WAIT).
            db = sqlite3.connect(
                self.path, timeout=BUSY_WAIT, isolation_level=None, check_same_thread=False
            )
            # Takes effect on a new file only (a store keeps the page size it was made with).
            db.execute(f"PRAGMA page_size={PAGE_SIZE}")
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")  # durable at each WAL checkpoint; see docs
            # Checkpoints run on the checkpointer's thread, never in a turn's commit.
            db.execute("PRAGMA wal_autocheckpoint=0")
            # When a write restarts the log, a log file that a burst grew is cut back to this.
            db.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")
            self._db = db
            self._migrate()
            db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
            self.watch.start()
            self._lost = None
            self.checkpointer.start()
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(f"cannot open the SQLite store {self.path}: {exc}") from None

    def _migrate(self) -> None:
        """Bring the schema up to date. A store already at this version is only read: in WAL
        mode a read waits for no writer, so a worker starts while another holds the write lock
        for long (a purge, an operator's shell). Only a migration takes the lock, and reads the
        version again under it: another worker may have migrated meanwhile."""
        done = _schema_version(self.db)
        if done >= len(schema.MIGRATIONS):
            schema.pending_migrations(done, str(self.path), "sqlite")  # newer: refused
            return
        self._migrate_locked()

    def _migrate_locked(self) -> None:
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        with _rolled_back_on_failure(db):
            db.execute(
                "CREATE TABLE IF NOT EXISTS agentscript_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
            )
            row = db.execute(
                "SELECT value FROM agentscript_meta WHERE key = ?", (schema.SCHEMA_VERSION_KEY,)
            ).fetchone()
            done = int(row[0]) if row else 0
            for sql in schema.pending_migrations(done, str(self.path), "sqlite"):
                db.execute(sql)
            db.execute(
                "INSERT OR REPLACE INTO agentscript_meta (key, value) VALUES (?, ?)",
                (schema.SCHEMA_VERSION_KEY, str(len(schema.MIGRATIONS))),
            )
            db.execute("COMMIT")

    async def close(self) -> None:
        self.checkpointer.stop()
        db, self._db = self._db, None
        if db is not None:
            # The last connection to close checkpoints what is left, but only into a file
            # still at the path: one that left it gets its log first (FileWatch).
            self.watch.changed(db)
            db.close()

    async def ping(self) -> None:
        await self._run("SELECT 1 FROM agentscript_meta LIMIT 1")

    def _checked(self) -> sqlite3.Connection:
        """The connection, once ``path`` is found to name the file opened; StoreError if it
        does not: the connection would go on with a file nobody will read again."""
        db = self.db
        change = self.watch.changed(db)
        if change is not None:
            self._refuse(change)
        return db

    def _refuse(self, change: Change) -> NoReturn:
        if change == "removed":  # it may come back (renamed away and back): keep the file
            raise StoreError(
                f"the SQLite file {self.path} was removed or renamed while the server ran; "
                "sessions written now would be lost: put the file back or restart the server"
            )
        self._lost = (
            f"the SQLite file {self.path} was replaced by another file while the server ran; "
            "this server wrote its sessions to the file it had opened and no longer uses the "
            "path: restart it to serve the file there now"
        )
        self._detach()
        raise StoreError(self._lost)

    def _detach(self) -> None:
        """Let go of a file that another one replaced at the path, its log already emptied into
        it (FileWatch). The checkpointer stops first: no checkpoint from here may run once the
        log was emptied (a process serving the new file may be writing to it by now). Then the
        connection closes, with nothing left to write. SQLite's close checkpoints, then deletes
        ``<path>-wal`` and ``<path>-shm`` by name, only when its file has not moved
        (SQLITE_FCNTL_HAS_MOVED): both stay, the log empty, and whoever opens the new file
        rebuilds the shared memory from that. Leaving WAL mode instead (``journal_mode=DELETE``)
        would delete them by name with no such check, under a process that may be using them;
        keeping the log on close (SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE) needs Python 3.12."""
        self.checkpointer.stop()
        db, self._db = self._db, None
        if db is not None:
            with contextlib.suppress(sqlite3.Error):
                db.close()

    async def _run(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        """One statement's rows (a read, or a write of one statement), failures as StoreError."""
        db = self._checked()
        try:
            return (await self._execute(db, sql, params)).fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"SQLite store: {exc}") from None

    async def _write(self, sql: str, params: tuple[Any, ...]) -> int:
        """One statement that writes, committed on its own: how many rows it changed."""
        db = self._checked()
        try:
            return (await self._execute(db, sql, params)).rowcount
        except sqlite3.Error as exc:
            raise StoreError(f"SQLite store: {exc}") from None

    async def _execute(
        self, db: sqlite3.Connection, sql: str, params: tuple[Any, ...] = ()
    ) -> sqlite3.Cursor:
        """``db.execute``, once another process's lock lets it run (``_wait_out``). A
        statement that finds a lock taken did nothing, so trying it again is always safe; in
        a transaction only its ``BEGIN IMMEDIATE`` finds one: once it has run, the transaction
        holds the write lock, and in WAL mode no statement of it waits for another."""
        try:
            return db.execute(sql, params)
        except sqlite3.OperationalError as exc:
            if not _busy(exc):
                raise
        return await self._wait_out(db, sql, params)

    async def _wait_out(
        self, db: sqlite3.Connection, sql: str, params: tuple[Any, ...]
    ) -> sqlite3.Cursor:
        """Try again a statement that found another process's lock taken, asleep between
        tries so that the loop serves other requests, until it runs or BUSY_WAIT seconds
        passed (StoreError)."""
        deadline = time.monotonic() + BUSY_WAIT
        pause = BUSY_PAUSE
        while (left := deadline - time.monotonic()) > 0:
            await asyncio.sleep(min(pause, left))
            pause = min(pause * 2, BUSY_PAUSE_MAX)
            # The file may have left the path, or the store closed, while this slept.
            self._checked()
            try:
                return db.execute(sql, params)
            except sqlite3.OperationalError as exc:
                if not _busy(exc):
                    raise
        raise StoreError(
            f"another process held the write lock of the SQLite file {self.path} for "
            f"{BUSY_WAIT:g} s (an open transaction: a sqlite3 shell, a backup or a long "
            "write); retry later"
        )

    @contextlib.asynccontextmanager
    async def _transaction(self) -> AsyncIterator[sqlite3.Connection]:
        """A write transaction around the block: ``BEGIN IMMEDIATE``, which waits out another
        process's lock as any statement does (``_execute``), the block's statements, run on
        the connection it yields (none waits, the write lock being held), and ``COMMIT``. Any
        failure, of the BEGIN or the COMMIT included, rolls it back (``_end_transaction``) and
        is raised, a SQLite error as StoreError."""
        db = self._checked()
        try:
            with _rolled_back_on_failure(db):
                await self._execute(db, "BEGIN IMMEDIATE")
                yield db
                db.execute("COMMIT")
        except sqlite3.Error as exc:
            raise StoreError(f"SQLite store: {exc}") from None

    async def create_session(self, record: SessionRecord) -> None:
        db = self._checked()
        try:
            await self._execute(db, schema.INSERT_SESSION, schema.session_params(record))
        except sqlite3.IntegrityError:
            raise ValueError(f"session {record.session_id} already exists") from None
        except sqlite3.Error as exc:
            raise StoreError(f"SQLite store: {exc}") from None

    async def get_session(self, session_id: str) -> SessionRecord | None:
        rows = await self._run(schema.SELECT_SESSION, (session_id,))
        if not rows:
            return None
        record = schema.session_from_row(rows[0])
        return None if record.expired() else record

    async def get_session_summary(self, session_id: str) -> SessionRecord | None:
        rows = await self._run(schema.SELECT_SESSION_SUMMARY, (session_id,))
        if not rows:
            return None
        record = schema.session_from_row(rows[0])
        return None if record.expired() else record

    async def list_sessions(
        self, *, owner: str, agent: str | None, limit: int, after: str | None
    ) -> list[SessionRecord]:
        query = schema.list_sessions_query(
            owner=owner, agent=agent, after=after, now=time.time(), limit=limit
        )
        rows = await self._run(*query)
        return [schema.session_from_row(r) for r in rows]

    async def delete_session(self, session_id: str) -> bool:
        # The row first, on its own: gone for every request once committed.
        async with self._transaction() as db:
            deleted = _delete_sessions(db, [(session_id,)])
        if deleted:
            await self._finish_deletions_after_delete()
        return deleted > 0

    async def _finish_deletions_after_delete(self) -> None:
        """The turns of the session just deleted (and of any deletion left unfinished). The
        session is deleted whatever happens here: a failure (a full disk) leaves its turns,
        which nothing reads, to the next purge or deletion, rather than answer a deletion
        that took place with an error."""
        with contextlib.suppress(StoreError):
            await self._finish_deletions()

    async def _finish_deletions(self) -> None:
        await finish_deletions(self._deletion_chunk)

    async def _deletion_chunk(self) -> bool:
        """One transaction of turns of deleted sessions (batches.delete_turns_chunk)."""
        async with self._transaction() as db:
            # No await below yields: the transaction runs to its end at once.
            return await delete_turns_chunk(_Transaction(db), schema.TURN_SIZES_SQLITE)

    def lock_session(
        self, session_id: str, wait: float, *, kept: KeptRevision = None
    ) -> AbstractAsyncContextManager[Lease]:
        # Its statements (take_lease, commit_turn, drop_lease) check the file.
        return self.leases.hold(session_id, wait, kept)

    async def worker(self) -> str:
        return self._worker

    async def read_session(self, session_id: str) -> SessionRecord | None:
        rows = await self._run(schema.SELECT_SESSION, (session_id,))
        return schema.session_from_row(rows[0]) if rows else None

    async def take_lease(
        self, session_id: str, holder: str, kept: str | None = None
    ) -> tuple[bool, SessionRecord | None]:
        # A free or expired lease, the usual case, is taken by one statement; the session is
        # read after it, under the lease. Each statement commits on its own, and one that
        # waits for another process's lock (_execute) is tried again alone: it did nothing,
        # and the steps around it already allow for any other process acting between two of
        # them. Trying the whole method again instead would find the lease taken by its first
        # step as this store's own, so stale, and take it over: the same lease; but a lease
        # taken on a session found expired meanwhile would stay written.
        db = self._checked()
        now = time.time()
        until = now + LEASE_SECONDS
        try:
            taken = await self._execute(db, TAKE_LEASE, (holder, until, session_id, now, now))
            if not taken.rowcount:
                row = (await self._execute(db, HOLDER_OF_LEASE, (session_id, now))).fetchone()
                if row is None:  # no such session, or it expired
                    return True, None
                if row[0] is None:  # given back between the two statements
                    return await self.take_lease(session_id, holder, kept)
                # Taken over if its holder is this store or a process that is gone, unless
                # another store took it over first.
                if not self._stale(row[0]):
                    return False, None
                stale = (holder, until, session_id, row[0])
                if not (await self._execute(db, TAKE_STALE_LEASE, stale)).rowcount:
                    return False, None
            read = (kept, session_id)
            found = (await self._execute(db, schema.SELECT_SESSION_UNLESS_KEPT, read)).fetchone()
            record = schema.session_from_row(found, kept) if found else None
            if record is None or record.expired():
                await self._execute(db, DROP_LEASE, (session_id, holder))
                return True, None
            return True, record
        except sqlite3.Error as exc:
            raise StoreError(f"SQLite store: {exc}") from None

    def _stale(self, holder: str) -> bool:
        """Whether a lease may be taken over: this store's own (its give-back failed), or one
        whose process no longer runs."""
        worker = worker_of(holder)
        return worker == self._worker or not _alive(worker)

    async def drop_lease(self, session_id: str, holder: str) -> None:
        await self._run(DROP_LEASE, (session_id, holder))

    async def commit_turn(self, session: SessionRecord, outcome: TurnOutcome, holder: str) -> None:
        """The turn's state and record, and the release of its lease, in one transaction."""
        record = outcome.record
        async with self._transaction() as db:
            try:
                cursor = db.execute(
                    schema.UPDATE_AFTER_TURN_SQLITE,
                    schema.after_turn_params(outcome, session, None, time.time()),
                )
                if cursor.rowcount != 1:  # the lease is dropped on the way out
                    raise TurnConflict(session.session_id, session.turns)
                db.execute(schema.INSERT_TURN, schema.turn_params(record, packed_trace=True))
                # Given back if still this turn's: a lease taken over meanwhile stays its taker's.
                db.execute(DROP_LEASE, (session.session_id, holder))
            except sqlite3.IntegrityError:
                raise ValueError(
                    f"Idempotency-Key {record.idempotency_key!r} already used in this session"
                ) from None

    async def find_turn(self, session_id: str, idempotency_key: str) -> TurnRecord | None:
        rows = await self._run(schema.FIND_TURN, (session_id, idempotency_key))
        return schema.turn_from_row(rows[0]) if rows else None

    async def get_turn(self, session_id: str, turn: int) -> TurnRecord | None:
        rows = await self._run(schema.GET_TURN, (session_id, turn))
        return schema.turn_from_row(rows[0]) if rows else None

    async def list_turns(
        self,
        session_id: str,
        after: int = 0,
        limit: int = 1_000_000_000,
        max_bytes: int | None = None,
    ) -> list[TurnRecord]:
        rows = await self._run(
            *schema.list_turns_query(
                schema.LIST_TURNS_SIZED_SQLITE,
                session_id=session_id,
                after=after,
                limit=limit,
                max_bytes=max_bytes,
            )
        )
        return [schema.turn_from_row(r) for r in rows]

    async def list_turns_with_traces(self, session_id: str, limit: int) -> list[TurnRecord]:
        rows = await self._run(schema.LIST_TURNS_WITH_TRACES, (session_id, limit))
        return [schema.turn_from_row(r) for r in rows]

    async def purge_expired(self) -> int:
        # Sessions expired by now only: ones expiring during the purge wait for the next.
        now = time.time()
        return await in_batches(lambda: self._purge_batch(now), PURGE_BATCH)

    async def _purge_batch(self, now: float) -> int:
        """Up to PURGE_BATCH sessions expired at ``now``: their rows deleted in one transaction,
        then their turns in chunks (with those of any deletion left unfinished); how many.
        Under the write lock, every session found is deleted."""
        async with self._transaction() as db:
            found = db.execute(EXPIRED_BATCH, (now, now, PURGE_BATCH)).fetchall()
            deleted = _delete_sessions(db, found)
        await self._finish_deletions()
        return deleted

    async def backfill_expiry(self, ttl: float) -> int:
        # In batches, each its own transaction, as a purge: a store of many sessions written
        # without a TTL would otherwise hold every worker's write lock for as long as it takes.
        return await in_batches(
            lambda: self._write(schema.BACKFILL_EXPIRY, (ttl, PURGE_BATCH)), PURGE_BATCH
        )


def _delete_sessions(db: sqlite3.Connection, sessions: list[Any]) -> int:
    """Delete the rows of sessions (their leases with them: ``schema.LEASE_OF_DELETED_SQLITE``)
    and note that their turns are to go, in the transaction under way (``sessions``: rows of one
    session id each): how many session rows there were."""
    deleted = 0
    for (session_id,) in sessions:
        if db.execute(schema.DELETE_SESSION_ROW, (session_id,)).rowcount:
            db.execute(schema.MARK_DELETING, (schema.DELETING + session_id, session_id))
            deleted += 1
    return deleted


class _Transaction:
    """The store's connection as batches.delete_turns_chunk uses it: its statements run at
    once, on the loop's thread, in the transaction under way."""

    def __init__(self, db: sqlite3.Connection) -> None:
        self._db = db

    async def rows(self, sql: str, params: tuple[Any, ...]) -> list[Any]:
        return self._db.execute(sql, params).fetchall()

    async def run(self, sql: str, params: tuple[Any, ...]) -> None:
        self._db.execute(sql, params)


def _schema_version(db: sqlite3.Connection) -> int:
    """The schema version a store records, 0 for a new file (no ``agentscript_meta`` yet)."""
    try:
        row = db.execute(
            "SELECT value FROM agentscript_meta WHERE key = ?", (schema.SCHEMA_VERSION_KEY,)
        ).fetchone()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return 0
        raise
    return int(row[0]) if row else 0


def _create_private(path: Path) -> None:
    """Create the folders up to ``path`` and the database file that are missing, readable by
    their user only: they hold every session's messages and variables, and SQLite gives the
    log and shared-memory files (``-wal``, ``-shm``) the database file's mode. A folder or file
    that exists keeps its mode: the user chose it."""
    for folder in reversed([p for p in path.parents if not p.exists()]):
        with contextlib.suppress(FileExistsError):  # another worker made it just now
            folder.mkdir(mode=0o700)
    if not path.exists():
        with contextlib.suppress(FileExistsError):
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


@contextlib.contextmanager
def _rolled_back_on_failure(db: sqlite3.Connection) -> Iterator[None]:
    """Roll back the transaction under way (``_end_transaction``) when the block fails, whatever
    failed (a statement, a TurnConflict, a cancellation), and raise the failure."""
    try:
        yield
    except BaseException:
        _end_transaction(db)
        raise


def _end_transaction(db: sqlite3.Connection) -> None:
    """Roll back a failed transaction if SQLite has not ended it itself: a commit that fails
    writing (a full disk, an I/O error) rolls the whole transaction back, and a ROLLBACK then
    fails with "no transaction is active". A ROLLBACK that fails is not raised either: the
    failure being reported says more, and a transaction left open fails the next BEGIN with a
    StoreError (whose ROLLBACK then ends it), never with a 500."""
    if db.in_transaction:
        with contextlib.suppress(sqlite3.Error):
            db.execute("ROLLBACK")


def _busy(exc: sqlite3.OperationalError) -> bool:
    """Whether a statement failed because another connection held a lock (SQLITE_BUSY or one
    of its extended codes), rather than for good."""
    return exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY


def _alive(worker: str) -> bool:
    """Whether the process of a lease's worker still runs: SQLite is one machine's store.

    A worker is ``pid.start.namespace.instance`` (``pid.instance`` and ``pid`` as written by
    earlier versions): ``start`` is when that process started, so a pid given to another
    process is not taken for the holder's (in a container, the restarted server is pid 1
    again, like the one that was killed, whose leases would otherwise wait out LEASE_SECONDS,
    10 minutes). A pid of another pid namespace (another container sharing the file) means
    nothing here: such a holder counts as alive, and its lease's time decides. Where the start
    cannot be read (no ``/proc``), the pid alone decides."""
    parts = worker.split(".")
    if len(parts) == 4 and parts[2] != str(PID_NAMESPACE):
        return True
    try:
        pid = int(parts[0])
        os.kill(pid, 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        pass
    if len(parts) == 4 and parts[1].isdigit() and int(parts[1]):
        started = process_start(pid)
        return started is None or started == int(parts[1])
    return True


def _pid_namespace() -> int:
    """This process's pid namespace (the inode of ``/proc/self/ns/pid``), 0 where unknown."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


PID_NAMESPACE = _pid_namespace()


def process_start(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks since the machine booted (Linux's
    ``/proc/<pid>/stat``, field 22), or None where that cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            text = stat.read()
        # The command name (field 2) may hold spaces and parentheses: count after its end.
        return int(text[text.rindex(b")") + 2 :].split()[19])
    except (OSError, ValueError, IndexError):
        return None
    return True
