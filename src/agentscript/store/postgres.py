"""The shared store for several workers and machines: PostgreSQL through psycopg 3 (async).

Same schema and behaviour as the SQLite store. A turn holds its session's row lock
(``SELECT ... FOR UPDATE``) in a transaction for the whole turn and commits the new state, the
turn record and its trace in that same transaction: a worker killed mid-turn drops its
connection, PostgreSQL rolls the transaction back and releases the lock, and the session is
exactly as before the turn. A second turn waits for the row up to ``wait`` seconds
(``lock_timeout``), then gets :class:`SessionBusy`. Migrations run at start-up under an
advisory lock, so workers starting together migrate once.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
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

# Idle connections kept for reuse by default; more are opened on demand (one per running
# turn). `serve` keeps as many as it runs turns at once (--max-concurrent-turns): with fewer, a
# busy worker closes and reopens connections all the time, and each new one costs a PostgreSQL
# backend process and ~1 ms of CPU here.
MAX_IDLE = 64
_MIGRATION_LOCK = 7_146_937_311  # any constant shared by every agentscript worker
_PASSWORD = re.compile(r"(://[^:/@]+:)[^@]*@")

Q = schema.pyformat


def _import_psycopg() -> Any:
    try:
        import psycopg
    except ImportError:
        raise StoreError(
            "the PostgreSQL store needs psycopg; install it with: pip install 'agentscript[serve]'"
        ) from None
    return psycopg


class PostgresStore:
    """Sessions in PostgreSQL; see :class:`agentscript.store.base.Store`."""

    def __init__(self, dsn: str, *, max_idle: int = MAX_IDLE) -> None:
        self.dsn = dsn
        self.max_idle = max_idle
        self.url = _PASSWORD.sub(r"\1***@", dsn)  # never print a password
        self._idle: list[Any] = []
        # The lock_timeout each open connection has (by id), so it is set once, not per turn.
        self._lock_timeouts: dict[int, str] = {}
        self._psycopg: Any = None
        self._open = False

    async def _connect(self) -> Any:
        if self._idle:
            return self._idle.pop()
        try:
            return await self._psycopg.AsyncConnection.connect(self.dsn, autocommit=True)
        except self._psycopg.Error as exc:
            raise StoreError(f"cannot connect to {self.url}: {_first_line(exc)}") from None

    async def _release(self, conn: Any) -> None:
        if not conn.closed and len(self._idle) < self.max_idle and self._open:
            self._idle.append(conn)
        else:
            await self._discard(conn)

    async def _flush(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            with contextlib.suppress(Exception):  # a dead connection closes with an error
                await self._discard(conn)

    async def _discard(self, conn: Any) -> None:
        self._lock_timeouts.pop(id(conn), None)
        await conn.close()

    @asynccontextmanager
    async def _conn(self) -> AsyncIterator[Any]:
        conn = await self._connect()
        try:
            yield conn
        except (self._psycopg.OperationalError, self._psycopg.InterfaceError) as exc:
            await self._discard(conn)
            # The server went away (restarted, failed over): the other idle connections are
            # as dead as this one, and each would fail one more request.
            await self._flush()
            raise StoreError(f"PostgreSQL store: {_first_line(exc)}") from None
        except BaseException:
            await self._discard(conn)  # its state is unknown; never hand it out again
            raise
        else:
            await self._release(conn)

    async def open(self) -> None:
        self._psycopg = _import_psycopg()
        self._open = True
        async with self._conn() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS agentscript_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
            )
            cur = await conn.execute(
                "SELECT value FROM agentscript_meta WHERE key = %s", (schema.SCHEMA_VERSION_KEY,)
            )
            row = await cur.fetchone()
            for sql in schema.pending_migrations(int(row[0]) if row else 0, self.url):
                await conn.execute(sql)
            await conn.execute(
                "INSERT INTO agentscript_meta (key, value) VALUES (%s, %s) "
                "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                (schema.SCHEMA_VERSION_KEY, str(len(schema.MIGRATIONS))),
            )

    async def close(self) -> None:
        self._open = False
        idle, self._idle = self._idle, []
        for conn in idle:
            await self._discard(conn)

    async def _fetch(self, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
        try:
            async with self._conn() as conn:
                cur = await conn.execute(Q(sql), params)
                return list(await cur.fetchall()) if cur.description else []
        except self._psycopg.Error as exc:
            raise StoreError(f"PostgreSQL store: {_first_line(exc)}") from None

    async def ping(self) -> None:
        try:
            await self._fetch("SELECT 1")
        except StoreError:
            # That connection may have been the only stale one left: the pool is flushed now,
            # so a second try tells whether the server itself answers.
            await self._fetch("SELECT 1")

    async def create_session(self, record: SessionRecord) -> None:
        try:
            await self._fetch(schema.INSERT_SESSION, schema.session_params(record))
        except StoreError:
            if await self.get_session(record.session_id) is not None:
                raise ValueError(f"session {record.session_id} already exists") from None
            raise

    async def get_session(self, session_id: str) -> SessionRecord | None:
        rows = await self._fetch(schema.SELECT_SESSION, (session_id,))
        if not rows:
            return None
        record = schema.session_from_row(rows[0])
        return None if record.expired() else record

    async def list_sessions(
        self, *, owner: str, agent: str | None, limit: int, after: str | None
    ) -> list[SessionRecord]:
        rows = await self._fetch(
            f"SELECT {schema.SESSION_COLUMNS} FROM agentscript_sessions WHERE owner = ? "
            "AND (?::text IS NULL OR agent = ?) AND session_id > ? "
            "AND (expires_at IS NULL OR expires_at > ?) ORDER BY session_id LIMIT ?",
            (owner, agent, agent, after or "", time.time(), limit),
        )
        return [schema.session_from_row(r) for r in rows]

    async def delete_session(self, session_id: str) -> bool:
        try:
            async with self._conn() as conn, conn.transaction():
                await conn.execute(
                    "DELETE FROM agentscript_turns WHERE session_id = %s", (session_id,)
                )
                cur = await conn.execute(
                    "DELETE FROM agentscript_sessions WHERE session_id = %s", (session_id,)
                )
                return bool(cur.rowcount > 0)
        except self._psycopg.Error as exc:
            raise StoreError(f"PostgreSQL store: {_first_line(exc)}") from None

    @asynccontextmanager
    async def lock_session(self, session_id: str, wait: float) -> AsyncIterator[_PostgresLock]:
        psycopg = self._psycopg
        async with self._conn() as conn:
            # lock_timeout takes milliseconds; 0 would mean "wait forever". Set for the
            # connection (not the transaction) and only when it changes: one round trip less
            # per turn, as a server always waits the same time. Other statements on the
            # connection (a delete behind a running turn) then wait no longer than that either.
            timeout = f"{max(1, int(wait * 1000))}ms"
            if self._lock_timeouts.get(id(conn)) != timeout:
                await conn.execute("SELECT set_config('lock_timeout', %s, false)", (timeout,))
                self._lock_timeouts[id(conn)] = timeout
            # BEGIN and the locking read go in one round trip, and the commit's writes with
            # the COMMIT in one more (``_PostgresLock.commit``): two round trips a turn, not
            # five. Any failure inside leaves the transaction open on a connection that
            # ``_conn`` then closes, and PostgreSQL rolls it back.
            refused: SessionBusy | SessionGone | None = None
            lock: _PostgresLock | None = None
            try:
                async with conn.pipeline():
                    await conn.execute("BEGIN")
                    cur = await conn.execute(
                        Q(schema.SELECT_SESSION + " FOR UPDATE"), (session_id,)
                    )
            except psycopg.errors.LockNotAvailable:
                refused = SessionBusy(session_id, wait)
            else:
                row = await cur.fetchone()
                record = schema.session_from_row(row) if row else None
                if record is None or record.expired():
                    refused = SessionGone(session_id)
                else:
                    lock = _PostgresLock(conn, record, psycopg)
            if lock is not None:
                yield lock
                if lock.finished:
                    return
            # Nothing was written (a busy or missing session, a replayed key): end the
            # transaction and keep the connection. Raised through ``_conn``, the refusal would
            # close it, and a client retrying a busy session (or probing for ids) would cost a
            # new PostgreSQL backend each time.
            await conn.execute("ROLLBACK")
        if refused is not None:
            raise refused

    async def find_turn(self, session_id: str, idempotency_key: str) -> TurnRecord | None:
        rows = await self._fetch(
            f"SELECT {schema.TURN_COLUMNS} FROM agentscript_turns "
            "WHERE session_id = ? AND idempotency_key = ?",
            (session_id, idempotency_key),
        )
        return schema.turn_from_row(rows[0]) if rows else None

    async def get_turn(self, session_id: str, turn: int) -> TurnRecord | None:
        rows = await self._fetch(
            f"SELECT {schema.TURN_COLUMNS} FROM agentscript_turns WHERE session_id = ? AND turn = ?",
            (session_id, turn),
        )
        return schema.turn_from_row(rows[0]) if rows else None

    async def list_turns(self, session_id: str) -> list[TurnRecord]:
        rows = await self._fetch(
            f"SELECT {schema.TURN_SUMMARY_COLUMNS} FROM agentscript_turns "
            "WHERE session_id = ? ORDER BY turn",
            (session_id,),
        )
        return [schema.turn_from_row(r) for r in rows]

    async def purge_expired(self) -> int:
        now = time.time()
        try:
            async with self._conn() as conn, conn.transaction():
                await conn.execute(
                    "DELETE FROM agentscript_turns WHERE session_id IN (SELECT session_id FROM "
                    "agentscript_sessions WHERE expires_at IS NOT NULL AND expires_at <= %s)",
                    (now,),
                )
                cur = await conn.execute(
                    "DELETE FROM agentscript_sessions "
                    "WHERE expires_at IS NOT NULL AND expires_at <= %s",
                    (now,),
                )
                return int(cur.rowcount)
        except self._psycopg.Error as exc:
            raise StoreError(f"PostgreSQL store: {_first_line(exc)}") from None


class _PostgresLock:
    def __init__(self, conn: Any, session: SessionRecord, psycopg: Any) -> None:
        self._conn = conn
        self._psycopg = psycopg
        self.session = session
        self.finished = False  # the transaction was committed

    async def commit(self, outcome: TurnOutcome) -> None:
        conn, session = self._conn, self.session
        record = outcome.record
        params = schema.after_turn_params(outcome, session, time.time())
        try:
            # One statement writes the session and the turn, or neither; on any error the
            # pipeline skips the COMMIT and the transaction is rolled back with its connection.
            async with conn.pipeline():
                cur = await conn.execute(
                    Q(schema.UPDATE_AND_INSERT_TURN), params + schema.turn_params(record)
                )
                await conn.execute("COMMIT")
        except self._psycopg.errors.UniqueViolation:
            raise ValueError(
                f"Idempotency-Key {record.idempotency_key!r} already used in this session"
            ) from None
        self.finished = True
        if cur.rowcount != 1:  # the guard did not match: nothing was written
            raise TurnConflict(session.session_id, session.turns)


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
