"""The embedded default store: one SQLite file in WAL mode, shared by the workers of one machine.

Turns of one session are serialised twice: an ``asyncio.Lock`` inside the process, and a lease
row in ``agentscript_locks`` across processes. A lease whose holder process is gone (killed
mid-turn) or whose time ran out is taken over, so a crash never blocks a session. The commit
still checks the turn count read under the lock, so even a lost lease cannot lose an update.
Statements are short and run on the event loop's thread; ``busy_timeout`` absorbs the writes
of other workers. WAL checkpoints run on a thread of their own (:mod:`.checkpoint`).
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from agentscript.store import schema
from agentscript.store.base import (
    SessionBusy,
    SessionGone,
    SessionRecord,
    StoreError,
    TurnConflict,
    TurnOutcome,
    TurnRecord,
)
from agentscript.store.checkpoint import Checkpointer

# How long a lease lasts without its holder committing; far above any turn's own limits.
LEASE_SECONDS = 600.0
# How often a waiting turn looks at another process's lease again.
POLL_SECONDS = 0.01


class SQLiteStore:
    """Sessions in one SQLite file; see :class:`agentscript.store.base.Store`."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.url = f"sqlite:///{self.path}"
        self._db: sqlite3.Connection | None = None
        self._locks: dict[str, _LocalLock] = {}
        self._pid = os.getpid()
        self._file: tuple[int, int] | None = None  # (device, inode) of the file opened
        self.checkpointer = Checkpointer(self.path)

    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            raise StoreError("the store is not open")
        return self._db

    async def open(self) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")  # durable at each WAL checkpoint; see docs
            db.execute("PRAGMA busy_timeout=5000")
            # Checkpoints run on the checkpointer's thread, never in a turn's commit.
            db.execute("PRAGMA wal_autocheckpoint=0")
            self._db = db
            self._migrate()
            self._file = _identity(self.path)
            self.checkpointer.start()
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(f"cannot open the SQLite store {self.path}: {exc}") from None

    def _migrate(self) -> None:
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            db.execute(
                "CREATE TABLE IF NOT EXISTS agentscript_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
            )
            row = db.execute(
                "SELECT value FROM agentscript_meta WHERE key = ?", (schema.SCHEMA_VERSION_KEY,)
            ).fetchone()
            for sql in schema.pending_migrations(int(row[0]) if row else 0, str(self.path)):
                db.execute(sql)
            db.execute(
                "INSERT OR REPLACE INTO agentscript_meta (key, value) VALUES (?, ?)",
                (schema.SCHEMA_VERSION_KEY, str(len(schema.MIGRATIONS))),
            )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    async def close(self) -> None:
        self.checkpointer.stop()
        if self._db is not None:
            self._db.close()  # the last connection to close checkpoints what is left
            self._db = None

    async def ping(self) -> None:
        self._check_file()
        self._run("SELECT 1 FROM agentscript_meta LIMIT 1")

    def _check_file(self) -> None:
        """StoreError if the database file was removed or replaced since it was opened: the
        open connection would go on writing to a file nobody will read again."""
        if self._file is not None and _identity(self.path) != self._file:
            raise StoreError(
                f"the SQLite file {self.path} was removed or replaced while the server ran; "
                "sessions written now would be lost: put the file back or restart the server"
            )

    def _run(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        try:
            return self.db.execute(sql, params).fetchall()
        except sqlite3.Error as exc:
            raise StoreError(f"SQLite store: {exc}") from None

    async def create_session(self, record: SessionRecord) -> None:
        self._check_file()
        try:
            self.db.execute(schema.INSERT_SESSION, schema.session_params(record))
        except sqlite3.IntegrityError:
            raise ValueError(f"session {record.session_id} already exists") from None
        except sqlite3.Error as exc:
            raise StoreError(f"SQLite store: {exc}") from None

    async def get_session(self, session_id: str) -> SessionRecord | None:
        rows = self._run(schema.SELECT_SESSION, (session_id,))
        if not rows:
            return None
        record = schema.session_from_row(rows[0])
        return None if record.expired() else record

    async def list_sessions(
        self, *, owner: str, agent: str | None, limit: int, after: str | None
    ) -> list[SessionRecord]:
        rows = self._run(
            f"SELECT {schema.SESSION_COLUMNS} FROM agentscript_sessions WHERE owner = ? "
            "AND (? IS NULL OR agent = ?) AND session_id > ? "
            "AND (expires_at IS NULL OR expires_at > ?) ORDER BY session_id LIMIT ?",
            (owner, agent, agent, after or "", time.time(), limit),
        )
        return [schema.session_from_row(r) for r in rows]

    async def delete_session(self, session_id: str) -> bool:
        db = self.db
        try:
            db.execute("BEGIN IMMEDIATE")
            db.execute("DELETE FROM agentscript_turns WHERE session_id = ?", (session_id,))
            cursor = db.execute(
                "DELETE FROM agentscript_sessions WHERE session_id = ?", (session_id,)
            )
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            db.execute("ROLLBACK")
            raise StoreError(f"SQLite store: {exc}") from None
        return cursor.rowcount > 0

    @asynccontextmanager
    async def lock_session(self, session_id: str, wait: float) -> AsyncIterator[_SQLiteLock]:
        self._check_file()
        deadline = time.monotonic() + wait
        local = self._locks.get(session_id)
        if local is None:
            local = self._locks[session_id] = _LocalLock()
        local.users += 1
        try:
            try:
                await asyncio.wait_for(local.lock.acquire(), wait)
            except TimeoutError:
                raise SessionBusy(session_id, wait) from None
            async with self._leased(session_id, deadline, wait, local) as lock:
                yield lock
        finally:
            # Forgotten once nobody holds or awaits it: one entry per running session only.
            local.users -= 1
            if not local.users:
                del self._locks[session_id]

    @asynccontextmanager
    async def _leased(
        self, session_id: str, deadline: float, wait: float, local: _LocalLock
    ) -> AsyncIterator[_SQLiteLock]:
        try:
            holder = f"{self._pid}:{uuid.uuid4().hex}"
            while True:
                taken, record = self._take_lease(session_id, holder)
                if taken:
                    break
                if time.monotonic() >= deadline:
                    raise SessionBusy(session_id, wait)
                await asyncio.sleep(POLL_SECONDS)
            if record is None:
                raise SessionGone(session_id)  # and no lease was written
            lock = _SQLiteLock(self, record, holder)
            try:
                yield lock
            finally:
                if not lock.released:  # a committed turn released it in its transaction
                    self._run(
                        "DELETE FROM agentscript_locks WHERE session_id = ? AND holder = ?",
                        (session_id, holder),
                    )
        finally:
            local.lock.release()

    def _take_lease(self, session_id: str, holder: str) -> tuple[bool, SessionRecord | None]:
        """In one transaction: whether the lease is free (else another process holds it),
        and the session read under it; the lease is written only for a session that exists."""
        db = self.db
        now = time.time()
        try:
            db.execute("BEGIN IMMEDIATE")
            row = db.execute(
                "SELECT holder, until FROM agentscript_locks WHERE session_id = ?", (session_id,)
            ).fetchone()
            if row is not None and row[1] > now and _alive(row[0]):
                db.execute("COMMIT")
                return False, None
            found = db.execute(schema.SELECT_SESSION, (session_id,)).fetchone()
            record = schema.session_from_row(found) if found else None
            if record is None or record.expired():
                db.execute("COMMIT")
                return True, None
            db.execute(
                "INSERT OR REPLACE INTO agentscript_locks (session_id, holder, until) VALUES (?, ?, ?)",
                (session_id, holder, now + LEASE_SECONDS),
            )
            db.execute("COMMIT")
            return True, record
        except sqlite3.Error as exc:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise StoreError(f"SQLite store: {exc}") from None

    def commit_turn(self, session: SessionRecord, outcome: TurnOutcome, holder: str) -> None:
        """The turn's state and record, and the release of its lease, in one transaction."""
        db = self.db
        record = outcome.record
        try:
            db.execute("BEGIN IMMEDIATE")
            cursor = db.execute(
                schema.UPDATE_AFTER_TURN,
                schema.after_turn_params(outcome, session, time.time()),
            )
            if cursor.rowcount != 1:
                raise TurnConflict(session.session_id, session.turns)
            db.execute(schema.INSERT_TURN, schema.turn_params(record))
            db.execute(
                "DELETE FROM agentscript_locks WHERE session_id = ? AND holder = ?",
                (session.session_id, holder),
            )
            db.execute("COMMIT")
        except sqlite3.IntegrityError:
            db.execute("ROLLBACK")
            raise ValueError(
                f"Idempotency-Key {record.idempotency_key!r} already used in this session"
            ) from None
        except sqlite3.Error as exc:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise StoreError(f"SQLite store: {exc}") from None
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise

    async def find_turn(self, session_id: str, idempotency_key: str) -> TurnRecord | None:
        rows = self._run(
            f"SELECT {schema.TURN_COLUMNS} FROM agentscript_turns "
            "WHERE session_id = ? AND idempotency_key = ?",
            (session_id, idempotency_key),
        )
        return schema.turn_from_row(rows[0]) if rows else None

    async def get_turn(self, session_id: str, turn: int) -> TurnRecord | None:
        rows = self._run(
            f"SELECT {schema.TURN_COLUMNS} FROM agentscript_turns WHERE session_id = ? AND turn = ?",
            (session_id, turn),
        )
        return schema.turn_from_row(rows[0]) if rows else None

    async def list_turns(self, session_id: str) -> list[TurnRecord]:
        rows = self._run(
            f"SELECT {schema.TURN_SUMMARY_COLUMNS} FROM agentscript_turns "
            "WHERE session_id = ? ORDER BY turn",
            (session_id,),
        )
        return [schema.turn_from_row(r) for r in rows]

    async def purge_expired(self) -> int:
        db = self.db
        now = time.time()
        try:
            db.execute("BEGIN IMMEDIATE")
            db.execute(
                "DELETE FROM agentscript_turns WHERE session_id IN (SELECT session_id FROM "
                "agentscript_sessions WHERE expires_at IS NOT NULL AND expires_at <= ?)",
                (now,),
            )
            cursor = db.execute(
                "DELETE FROM agentscript_sessions WHERE expires_at IS NOT NULL AND expires_at <= ?",
                (now,),
            )
            db.execute("COMMIT")
        except sqlite3.Error as exc:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise StoreError(f"SQLite store: {exc}") from None
        return cursor.rowcount


def _identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of ``path``, or None when there is no such file."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_dev, found.st_ino


class _LocalLock:
    """One session's lock in this process and how many turns hold or await it."""

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.users = 0


class _SQLiteLock:
    def __init__(self, store: SQLiteStore, session: SessionRecord, holder: str) -> None:
        self._store = store
        self._holder = holder
        self.session = session
        self.released = False

    async def commit(self, outcome: TurnOutcome) -> None:
        self._store.commit_turn(self.session, outcome, self._holder)
        self.released = True


def _alive(holder: str) -> bool:
    """Whether the process named in a lease still runs (SQLite is one machine's store)."""
    try:
        pid = int(holder.split(":", 1)[0])
        os.kill(pid, 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    return True
