"""The shared store for several workers and machines: PostgreSQL through psycopg 3 (async).

Same schema and behaviour as the SQLite store. Turns of one session are serialised by leases
(:mod:`.lease`): a turn takes its lease and reads the session in one statement, runs with no
connection, transaction or row lock held (a worker's running turns need no database connection
each, however long the model takes), and commits the new state, the turn record, its trace and
the give-back of its lease in one statement. A worker killed mid-turn never committed, so the
session is exactly as before the turn, and its lease is taken over at once: each store holds a
session-level advisory lock (its *presence*) on a connection of its own for as long as it runs,
PostgreSQL releases it when that connection drops, and a lease whose holder's presence is gone
is free. Migrations run at start-up under an advisory lock, so workers starting together
migrate once.

No statement waits on another client for long: the store's connections bound how long a
statement waits for a lock (``LOCK_TIMEOUT``) and how long it runs (``STATEMENT_TIMEOUT``). A
session whose row another client keeps locked (an operator's open ``SELECT ... FOR UPDATE``)
is busy: its turns and its deletion end with :class:`~agentscript.store.base.SessionBusy`
instead of holding a connection for as long as that lock lasts.

Nor does any wait on the server itself last: those bounds are the server's to enforce, so a
server or a network path that stops answering (a frozen host, a failover that leaves the
connections dangling) would hold a statement, its connection and whatever waits behind it
for good. Every use of a connection therefore has a deadline of the store's own
(:class:`_Deadline`): a statement unanswered ``ANSWER_MARGIN`` seconds past its own bound,
and a statement that does no work (a ``SET``, the presence's lock and its check) unanswered
``QUICK_ANSWER`` seconds, has its connection cut, which fails like a connection the server
dropped: ``StoreError`` (503), the pool flushed, the presence checked by the next turn. A
readiness probe (:meth:`PostgresStore.ping`) answers within ``PING_WAIT``. Connections also
send TCP keepalives (``KEEPALIVES``), so that an idle pooled connection to a host gone dark is
found dead before it is handed out.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import re
import secrets
import select
import socket
import time
from collections import deque
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from agentscript.store import schema
from agentscript.store.base import (
    KeptRevision,
    SessionBusy,
    SessionRecord,
    StoreError,
    StoreUnreachable,
    TurnConflict,
    TurnOutcome,
    TurnRecord,
)
from agentscript.store.batches import delete_turns_chunk, finish_deletions, in_batches
from agentscript.store.lease import LEASE_SECONDS, Lease, Leases, acquire_within, worker_of

# Connections a store opens at most by default (`serve --store-connections`), plus its presence
# connection. A turn uses one only while its statements run, about 1 ms a turn, so a few serve
# hundreds of turns in flight; all are kept open once opened (a new one costs a PostgreSQL
# backend process and ~1 ms of CPU here).
MAX_CONNECTIONS = 16
# How long a statement waits for a free connection before it fails (StoreError, 503): for one
# of the store's slots, and, while the database refuses more connections at a limit, for one
# of the store's connections in use by a short block (not a purge's batch, nor the start-up's
# migration: ``_conn``) to be given back.
CONNECTION_WAIT = 30.0
# Seconds to wait for a new connection to PostgreSQL (libpq's connect_timeout), unless the
# store URL sets its own.
CONNECT_TIMEOUT = 10
# How long a statement waits for a lock (lock_timeout). A turn's commit and a lease statement
# hold a session's row for about a millisecond, so only another client's lock (an operator's
# open transaction) or a stalled server makes one wait this long; much shorter would fail a
# statement queued behind a commit whose fsync is slow.
LOCK_TIMEOUT = 2.0
# How long a statement may run (statement_timeout): a turn's statements take milliseconds, so
# only a stalled server or a runaway query reaches it, and its connection is then freed after
# as long as a statement may wait for a connection anyway.
STATEMENT_TIMEOUT = CONNECTION_WAIT
# How long past its own bound (statement_timeout, or the purge's) a block of statements may go
# unanswered before its connection is taken for dead and cut (:class:`_Deadline`): the server
# says itself when a statement ran out of time, so only a server or a network path that
# stopped answering gets this far.
ANSWER_MARGIN = 5.0
# How long a statement that does no work may go unanswered (the SET on a new connection, the
# presence's lock and its check) before its connection is cut the same way. Every turn waits
# for the presence's check when one is due (``worker``), so it is short.
QUICK_ANSWER = 5.0
# How long a readiness probe (``ping``) waits for the store's answer; a check that takes longer
# goes on, bounded itself, and the probes that come meanwhile wait for it rather than pile up.
PING_WAIT = 10.0
# The client's bound on the start-up's migration transaction, which has none on the server (it
# waits for another worker's migration): only for a server that stopped answering, far above
# what a start gets anyway (``serve`` checks the store within 15 s, and a worker not started
# within its supervisor's start timeout is killed).
OPEN_TIMEOUT = 600.0
# TCP keepalives on every connection, unless the store URL sets its own: an idle pooled
# connection to a host that went dark without a word (powered off, a failover whose old
# primary's packets are dropped) is found dead within about 25 s and dropped before it is
# handed out; tcp_user_timeout (ms) ends one whose data stays unacknowledged. libpq's default
# is the system's: the first probe after two hours.
KEEPALIVES = {
    "keepalives": 1,
    "keepalives_idle": 10,
    "keepalives_interval": 5,
    "keepalives_count": 3,
    "tcp_user_timeout": 30_000,
}
# Rows of expired sessions deleted per transaction of a purge (their turns go later, in chunks
# of bounded rows and bytes: store/batches.py), and sessions given an expiry per statement of
# ``backfill_expiry``: sessions left to expire during a long outage go in many short
# transactions, each of which a failure or a timeout costs alone, rather than in one that a
# timeout rolls back whole every round.
PURGE_BATCH = 500
# How long the statement deleting a batch's session rows may run: 500 rows holding states of
# megabytes each (their TOAST) may take longer than STATEMENT_TIMEOUT on a loaded server.
PURGE_TIMEOUT = 600.0
_MIGRATION_LOCK = 7_146_937_311  # any constant shared by every agentscript worker
# The first key of every presence lock (the second is the store's token), so that they are
# told apart from any other advisory lock in the database.
PRESENCE_LOCKS = 1_634_165_603

# A lease needs no durability: a database that crashes drops every connection, so every
# presence, and no lease outlives it anyway. Its writes skip waiting for the WAL flush (an
# fsync, ~0.2 ms here, that would otherwise come on top of the commit's own in each turn); a
# later durable commit flushes them with it.
NO_FLUSH = "WITH no_flush AS (SELECT set_config('synchronous_commit', 'off', true)) "

# Take a session's lease unless a live holder of another store has it, and read the session in
# the same statement: taken when nobody holds it, when its time ran out, when its holder is
# this store (whose give-back failed) or when its holder's presence lock is no longer held;
# only for a session that exists and has not expired. The liveness check reads pg_locks, and
# only when a lease is there. Times are the database's clock, which every worker shares. A
# turn's commit updates the same row: this update waits for it and then reads the row as
# committed, so the session returned is never older than its last commit. The state is left
# where it is (TOASTed, never detoasted) when the row has the revision the caller keeps
# (``kept``: schema.SESSION_COLUMNS_UNLESS_KEPT): 3 ms and more at the history limit.
TAKE_LEASE = f"""{NO_FLUSH}
UPDATE agentscript_sessions
SET lease_holder = %(holder)s, lease_until = extract(epoch FROM clock_timestamp()) + {LEASE_SECONDS}
FROM no_flush
WHERE session_id = %(session)s AND (expires_at IS NULL OR expires_at > %(now)s)
AND (lease_holder IS NULL
    OR lease_until <= extract(epoch FROM clock_timestamp())
    OR split_part(lease_holder, ':', 1) = %(worker)s
    OR NOT EXISTS (
        SELECT 1 FROM pg_locks
        WHERE locktype = 'advisory' AND granted AND objsubid = 2
        AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
        AND classid = {PRESENCE_LOCKS}
        AND objid = split_part(lease_holder, ':', 1)::bigint::oid))
RETURNING {schema.SESSION_COLUMNS_UNLESS_KEPT.replace("?", "%(kept)s")}"""
# Whether a session whose lease was not taken exists (its lease is held) or not.
SESSION_LIVE = (
    "SELECT 1 FROM agentscript_sessions "
    "WHERE session_id = ? AND (expires_at IS NULL OR expires_at > ?)"
)
DROP_LEASE = (
    f"{NO_FLUSH}UPDATE agentscript_sessions SET lease_holder = NULL FROM no_flush "
    "WHERE session_id = ? AND lease_holder = ?"
)
# Set once on each connection of the pool (not the presence's, which only holds an advisory
# lock). A SET after connecting rather than libpq's ``options``: PgBouncer refuses startup
# options it was not configured to ignore, and the round trip is paid once per connection,
# which the store keeps.
BOUND_STATEMENTS = (
    "SELECT set_config('lock_timeout', %s, false), set_config('statement_timeout', %s, false)"
)
# The same for one transaction only (SET LOCAL); 0 is no bound.
BOUND_TRANSACTION = (
    "SELECT set_config('lock_timeout', %s, true), set_config('statement_timeout', %s, true)"
)
# PostgreSQL's refusals of a connection at a limit (SQLSTATE 53300, which libpq does not
# pass on for a connection refused at its start): the server's max_connections, the slots
# reserved for other roles, a role's or a database's CONNECTION LIMIT.
_AT_CONNECTION_LIMIT = re.compile(
    r"too many (?:clients|connections)|connection slots are reserved", re.IGNORECASE
)
# Pauses before each new try of a connection once one of the store's was closed to make room
# at a connection limit (the presence's), or closed while blocks wait for one (``_opened``):
# the limit counts a closed connection until its backend has exited, and a backend that is
# being refused counts too, so on a loaded machine the room may take longer than 0.26 s to show.
ROOM_PAUSES = (0.01, 0.05, 0.2, 0.5)
# How long after the database refused a connection at its limit a block that finds no idle
# connection queues for one given back without asking for a new one first (while blocks are
# queued): each try costs the server a backend process started and refused, and the blocks
# of a busy store would otherwise try one each, in turn, for as long as the limit lasts.
REFUSAL_HOLDS = 1.0
# A password in a query string (``?password=...``, ``sslpassword``) or a key=value DSN.
_QUERY_PASSWORD = re.compile(r"((?:^|[?&])(?:ssl)?password=)[^&]*", re.IGNORECASE)
_KEYWORD_PASSWORD = re.compile(r"(\b(?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'|\S*)", re.IGNORECASE)

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

    def __init__(self, dsn: str, *, max_connections: int = MAX_CONNECTIONS) -> None:
        self.dsn = dsn
        self.max_connections = max_connections
        self.url = masked(dsn)  # never print a password
        self._idle: list[Any] = []
        # One slot per connection that may be open: a burst of statements (hundreds of turns
        # starting at once) waits for a connection instead of opening one each and running
        # the database out of max_connections.
        self._slots = asyncio.Semaphore(max_connections)
        # Pooled connections handed out (to a block, or to a queued block), and the blocks
        # queued for one given back while the database refuses new ones at a connection limit
        # (first come, first served: a ticket each, the future gets the connection, or None
        # when room may have freed). Of those lent, the ones held by long blocks (a purge's
        # batch, the migration: ``_conn``), which a block refused at a limit does not wait for.
        self._lent = 0
        self._long = 0
        self._queued: deque[tuple[int, asyncio.Future[Any]]] = deque()
        self._tickets = itertools.count()
        # The last refusal at a connection limit: when, and libpq's words.
        self._refused_at = float("-inf")
        self._refusal = ""
        self._psycopg: Any = None
        self._open = False
        self.leases = Leases(self)
        # This store's presence: a connection of its own holding (PRESENCE_LOCKS, token).
        self._presence: Any = None
        self._token = 0
        self._presence_doubtful = False  # a connection failed: check the presence's too
        self._presence_guard = asyncio.Lock()
        # Set while the presence, refused at a connection limit, waits for the next connection
        # given back to be closed for its room (``_room_for_presence``).
        self._presence_wanted: asyncio.Future[None] | None = None
        # The readiness check under way, which the probes that come meanwhile share (``ping``).
        self._check: asyncio.Future[None] | None = None
        # libpq's settings the store adds unless the URL sets them (``_connection_options``).
        self._options: dict[str, Any] | None = None

    async def _connect(self, wait: float) -> Any:
        """A connection, holding one of the store's slots (given back by ``_conn``)."""
        until = time.monotonic() + wait
        if not await acquire_within(self._slots, wait):
            raise StoreError(
                f"all {self.max_connections} connections to {self.url} stayed busy for {wait:g} s"
            )
        try:
            return await self._connection(until, wait)
        except BaseException:
            self._slots.release()
            raise

    async def _connection(self, until: float, wait: float) -> Any:
        """An idle connection, else a new one. While the database refuses new ones at a
        connection limit (its max_connections, a role's or database's CONNECTION LIMIT), one
        this store's other blocks give back, in the order the blocks came, by ``until``: they
        hold theirs for milliseconds (short blocks: ``_conn``), and failing a request (503)
        meanwhile would fail it for want of a connection that is about to be free."""
        ticket = next(self._tickets)
        conn = await self._idle_connection()
        if conn is None and not self._refused_lately():
            conn = await self._opened(until)
        while conn is None:
            # One may have gone idle while this block asked for a new one (nobody was queued).
            conn = await self._idle_connection()
            if conn is None:
                conn = await self._given_back(ticket, until, wait)
            if conn is None:  # room may have freed at the limit
                conn = await self._opened(until, ROOM_PAUSES)
        return conn

    async def _idle_connection(self) -> Any:
        """An idle connection of the pool, live, or None."""
        while self._idle:
            conn = self._idle.pop()
            if not _hung_up(conn):
                self._lent += 1
                return conn
            with contextlib.suppress(Exception):
                await self._discard(conn)
        return None

    def _refused_lately(self) -> bool:
        """Whether blocks are queued for a connection given back since a refusal at a limit
        REFUSAL_HOLDS ago at most: a new block queues behind them without trying."""
        return bool(self._queued) and time.monotonic() - self._refused_at < REFUSAL_HOLDS

    async def _opened(self, until: float, pauses: tuple[float, ...] = ()) -> Any:
        """A new connection, or None while the database refuses one at a connection limit:
        tried again after each of ``pauses`` that ends before ``until``."""
        for pause in (0.0, *pauses):
            if pause:
                if time.monotonic() + pause >= until:
                    break
                await asyncio.sleep(pause)
            try:
                conn = await self._pooled_connection()
            except StoreUnreachable as exc:
                if not _AT_CONNECTION_LIMIT.search(str(exc)):
                    raise
                continue
            self._lent += 1
            return conn
        return None

    async def _given_back(self, ticket: int, until: float, wait: float) -> Any:
        """The connection another block of this store gives back first to the block of
        ``ticket`` (queued before every later ticket), or None when room may have freed at
        the limit (a connection of the store was closed). Fails as a refused connection when
        no other short block holds one (a long one may hold its own for minutes), or none is
        given to this block by ``until``."""
        if not self._short_lent():
            long = (
                f" ({self._long} held by long blocks: a purge, the migration)" if self._long else ""
            )
            raise self._refused(f"and this store holds none to wait for{long}")
        waiter = self._queue(ticket)
        try:
            await asyncio.wait((waiter,), timeout=max(0.0, until - time.monotonic()))
        except BaseException:  # cancelled: what it was given goes on
            await self._leave(ticket, waiter)
            raise
        if not waiter.done():
            self._queued.remove((ticket, waiter))
            waiter.cancel()
            raise self._refused(
                f"and none of the {self._short_lent()} this store holds came free within {wait:g} s"
            )
        conn = waiter.result()
        if conn is not None and _hung_up(conn):
            # The server closed it meanwhile: its room at the limit is this block's to try.
            with contextlib.suppress(Exception):
                await self._drop(conn, make_room=False)
            return None
        return conn

    def _short_lent(self) -> int:
        """How many connections short blocks hold: the ones worth waiting for."""
        return self._lent - self._long

    def _queue(self, ticket: int) -> asyncio.Future[Any]:
        """A queued block's future, placed by its ticket: a block woken to try for room and
        refused again goes back to where it was, ahead of the blocks that came after it."""
        waiter: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        place = next((n for n, (t, _) in enumerate(self._queued) if t > ticket), None)
        self._queued.insert(len(self._queued) if place is None else place, (ticket, waiter))
        return waiter

    async def _leave(self, ticket: int, waiter: asyncio.Future[Any]) -> None:
        """A queued block that was cancelled leaves the queue; a connection it was given goes
        to the next block or to the pool, and a chance to try for room to the next block."""
        if not waiter.done():
            self._queued.remove((ticket, waiter))
            waiter.cancel()
        elif waiter.result() is None:
            self._wake(1)
        else:
            await self._release(waiter.result())

    def _wake(self, count: int | None) -> None:
        """Tell the first ``count`` queued blocks (None: all) that room may have freed at the
        limit: each tries for a new connection."""
        while self._queued and (count is None or count > 0):
            self._queued.popleft()[1].set_result(None)
            if count is not None:
                count -= 1

    def _refused(self, why: str) -> StoreUnreachable:
        return StoreUnreachable(
            f"cannot connect to {self.url}: the database refused more connections, {why}: "
            f"{self._refusal}"
        )

    async def _pooled_connection(self) -> Any:
        """A new connection for the pool, its lock waits and statements bounded in time."""
        conn = await self._new_connection()
        with _Deadline(conn, QUICK_ANSWER) as deadline:
            async with self._closed_on_failure(conn, f"cannot connect to {self.url}", deadline):
                await conn.execute(BOUND_STATEMENTS, (_ms(LOCK_TIMEOUT), _ms(STATEMENT_TIMEOUT)))
        return conn

    @asynccontextmanager
    async def _closed_on_failure(
        self, conn: Any, failed: str, deadline: _Deadline
    ) -> AsyncIterator[None]:
        """Close ``conn`` if the block fails (it is not handed out); a database error, or the
        connection cut by ``deadline``, becomes a StoreError worded ``failed: <why>``."""
        try:
            yield
        except BaseException as exc:
            with contextlib.suppress(Exception):
                await conn.close()
            if isinstance(exc, self._psycopg.Error):
                raise StoreUnreachable(f"{failed}: {deadline.reason(exc)}") from None
            raise

    async def _new_connection(self) -> Any:
        try:
            return await self._psycopg.AsyncConnection.connect(
                self.dsn, autocommit=True, **self._connection_options()
            )
        except self._psycopg.Error as exc:
            if _AT_CONNECTION_LIMIT.search(str(exc)):
                self._refused_at, self._refusal = time.monotonic(), _first_line(exc)
            raise StoreUnreachable(f"cannot connect to {self.url}: {_first_line(exc)}") from None

    def _connection_options(self) -> dict[str, Any]:
        """What the store sets on each connection unless the URL sets it: connect_timeout
        (libpq waits for a host that drops packets as long as the OS does, minutes, holding a
        slot meanwhile) and the keepalives."""
        if self._options is None:
            given = self._psycopg.conninfo.conninfo_to_dict(self.dsn)
            wanted = {"connect_timeout": CONNECT_TIMEOUT, **KEEPALIVES}
            self._options = {key: value for key, value in wanted.items() if key not in given}
        return self._options

    async def _release(self, conn: Any) -> None:
        """Give back a connection a block used: closed for the presence's room when it wants
        one, else to the first queued block, else to the pool (closed if it is not clean)."""
        idle = conn.info.transaction_status == self._psycopg.pq.TransactionStatus.IDLE
        if conn.closed or not idle or not self._open or self._presence_wanted is not None:
            await self._drop(conn)
        elif self._queued:
            self._queued.popleft()[1].set_result(conn)  # still lent, to that block now
        else:
            self._lent -= 1
            self._idle.append(conn)

    async def _drop(self, conn: Any, *, make_room: bool = True) -> None:
        """Close a connection a block used, for good. The room it held at a connection limit
        is the presence's when it wants one, else the first queued block's to try
        (``make_room``); every queued block's when no other short block holds one (none will
        be given back soon)."""
        try:
            await self._discard(conn)
        finally:
            self._lent -= 1
            wanted, make_room = self._room_taken(make_room)
            self._wake(None if not self._short_lent() else 1 if make_room else 0)
            if wanted is not None:
                wanted.set_result(None)

    def _room_taken(self, make_room: bool) -> tuple[asyncio.Future[None] | None, bool]:
        """The presence's wait to tell of the room a closed connection left, if it wants
        one (no queued block is told of it then), and whether a queued block still is."""
        wanted = self._presence_wanted
        if not make_room or wanted is None:
            return None, make_room
        self._presence_wanted = None
        return wanted, False

    async def _flush(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            with contextlib.suppress(Exception):  # a dead connection closes with an error
                await self._discard(conn)

    async def _discard(self, conn: Any) -> None:
        await conn.close()

    @asynccontextmanager
    async def _conn(
        self, within: float | None = None, *, wait: float | None = None
    ) -> AsyncIterator[Any]:
        """A connection of the pool for one block of statements (``wait``: seconds to wait for
        one, CONNECTION_WAIT as it is now by default), cut unless the block is done within
        ``within`` seconds (by default ``STATEMENT_TIMEOUT + ANSWER_MARGIN``): a block the
        server left unanswered fails as a lost connection does. A block allowed longer is a
        long one (a purge's batch, the migration): at a connection limit no block waits for
        the connection it holds, which may be minutes."""
        conn = await self._connect(CONNECTION_WAIT if wait is None else wait)
        short = STATEMENT_TIMEOUT + ANSWER_MARGIN
        long = within is not None and within > short
        self._hold_long(long)
        deadline = _Deadline(conn, short if within is None else within)
        try:
            try:
                yield conn
            finally:
                # Before anything below awaits: the connection may go back to the pool, and
                # whoever gets it next holds it for as long as its own block says.
                deadline.cancel()
                self._long -= long
        except self._psycopg.Error as exc:
            errors = self._psycopg.errors
            if not deadline.fired and isinstance(
                exc, (errors.LockNotAvailable, errors.QueryCanceled)
            ):
                # A lock or statement timeout (or an operator's pg_cancel_backend) ends the
                # statement, not the connection: the server answered, and the transaction
                # around it, if any, was rolled back on the way out. The connection and the
                # pool are kept; the caller tells what timed out.
                await self._release(conn)
                raise
            lost = (self._psycopg.OperationalError, self._psycopg.InterfaceError)
            if deadline.fired or isinstance(exc, lost):
                await self._lost(conn)
                raise StoreUnreachable(f"PostgreSQL store: {deadline.reason(exc)}") from None
            await self._drop(conn)  # its state is unknown; never hand it out again
            raise
        except BaseException:
            if deadline.fired:
                await self._lost(conn)
            else:
                await self._drop(conn)  # its state is unknown; never hand it out again
            raise
        else:
            if deadline.fired:  # answered just as it was cut
                await self._drop(conn)
            else:
                await self._release(conn)
        finally:
            self._slots.release()

    def _hold_long(self, long: bool) -> None:
        """Count a connection as a long block's (``long``); the queued blocks, when no short
        block holds one any more, try for room rather than wait for it."""
        if long:
            self._long += 1
            if not self._short_lent():
                self._wake(None)

    async def _lost(self, conn: Any) -> None:
        """Drop a connection that failed or was cut. The server went away (restarted, failed
        over) or stopped answering: the other idle connections are as dead as this one, and each
        would fail one more request; the presence's connection may be too."""
        await self._drop(conn)
        await self._flush()
        self._presence_doubtful = True
        # The connections other blocks hold may be as dead: the queued blocks try for room
        # (their closed backends free it) rather than wait for those.
        self._wake(None)

    async def open(self) -> None:
        self._psycopg = _import_psycopg()
        self._open = True
        async with self._conn(OPEN_TIMEOUT) as conn, conn.transaction():
            # Unbounded for this transaction only: the advisory lock waits for another
            # worker's migration (lock_timeout counts advisory locks too), and a migration
            # rolled back half-way by a timeout would fail every start-up alike.
            await conn.execute(BOUND_TRANSACTION, ("0", "0"))
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            await conn.execute(
                "CREATE TABLE IF NOT EXISTS agentscript_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)"
            )
            cur = await conn.execute(
                "SELECT value FROM agentscript_meta WHERE key = %s", (schema.SCHEMA_VERSION_KEY,)
            )
            row = await cur.fetchone()
            done = int(row[0]) if row else 0
            for sql in schema.pending_migrations(done, self.url, "postgresql"):
                await conn.execute(sql)
            await conn.execute(
                "INSERT INTO agentscript_meta (key, value) VALUES (%s, %s) "
                "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                (schema.SCHEMA_VERSION_KEY, str(len(schema.MIGRATIONS))),
            )
        await self.worker()

    async def close(self) -> None:
        self._open = False
        if self._check is not None:
            self._check.cancel()  # a readiness check under way takes no new presence now
        idle, self._idle = self._idle, []
        self._wake(None)  # nothing is pooled any more: queued blocks try on their own
        for conn in idle:
            await self._discard(conn)
        if self._presence is not None:
            presence, self._presence = self._presence, None
            with contextlib.suppress(Exception):  # it may have died with the server
                await presence.close()

    async def worker(self) -> str:
        """This store's presence token, taking a new presence when the last one is lost (its
        connection dropped: other workers may have taken over its leases by now)."""
        async with self._presence_guard:
            presence = self._presence
            if presence is not None and (
                _hung_up(presence)
                or (self._presence_doubtful and not await self._answers(presence))
            ):
                self._presence = None
                with contextlib.suppress(Exception):
                    await presence.close()
            self._presence_doubtful = False  # checked (a check cut short leaves the doubt)
            if self._presence is None or self._presence.closed:
                self._presence, self._token = await self._present()
            return str(self._token)

    async def _answers(self, conn: Any) -> bool:
        """Whether the presence's connection answers within QUICK_ANSWER (every turn that
        comes meanwhile waits for this check; a connection whose host went dark is cut)."""
        with _Deadline(conn, QUICK_ANSWER) as deadline:
            try:
                await conn.execute("SELECT 1")
            except self._psycopg.Error:
                return False
        return not deadline.fired

    async def _present(self) -> tuple[Any, int]:
        conn = await self._presence_connection()
        with _Deadline(conn, QUICK_ANSWER) as deadline:
            async with self._closed_on_failure(conn, f"PostgreSQL store {self.url}", deadline):
                while True:  # a token no running store holds (a clash is unlikely but possible)
                    token = 1 + secrets.randbelow(2**31 - 2)
                    cur = await conn.execute(
                        "SELECT pg_try_advisory_lock(%s, %s)", (PRESENCE_LOCKS, token)
                    )
                    row = await cur.fetchone()
                    if row and row[0]:
                        return conn, token

    async def _presence_connection(self) -> Any:
        """A new connection for the presence. At a connection limit (the role's, the
        database's or the server's), the pool's idle connections would keep out the one
        connection every turn needs, for as long as the limit lasts: the least recently used is
        closed to make room, which the limit counts once its backend has exited (a few
        milliseconds; another client may take the room first, and the next turn tries again)."""
        try:
            return await self._new_connection()
        except StoreUnreachable as exc:
            if not (_AT_CONNECTION_LIMIT.search(str(exc)) and await self._room_for_presence()):
                raise
            failed = exc
        for pause in ROOM_PAUSES:
            await asyncio.sleep(pause)
            try:
                return await self._new_connection()
            except StoreUnreachable as exc:
                if not _AT_CONNECTION_LIMIT.search(str(exc)):
                    raise
                failed = exc
        raise failed

    async def _room_for_presence(self) -> bool:
        """Close one of the pool's connections to make room for the presence at a connection
        limit: the least recently used idle one, else the first a block gives back within
        CONNECTION_WAIT (while blocks are queued, each one given back goes to the next, so
        none goes idle for as long as the limit lasts). False when there is none to close:
        none idle and none held by a short block."""
        if self._idle:
            with contextlib.suppress(Exception):
                await self._discard(self._idle.pop(0))
            return True
        if not self._short_lent():
            return False
        wanted: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._presence_wanted = wanted
        try:
            await asyncio.wait((wanted,), timeout=CONNECTION_WAIT)
        finally:
            if self._presence_wanted is wanted:  # timed out or cancelled: wants none now
                self._presence_wanted = None
        return wanted.done()

    async def _fetch(
        self,
        sql: str,
        params: tuple[Any, ...] = (),
        *,
        session_id: str | None = None,
        within: float | None = None,
    ) -> list[Any]:
        """The rows of one statement (``session_id``: the session it writes, for errors;
        ``within``: its deadline, as ``_conn`` has it)."""
        try:
            async with self._conn(within) as conn:
                cur = await conn.execute(Q(sql), params)
                return list(await cur.fetchall()) if cur.description else []
        except self._psycopg.Error as exc:
            raise self._failed(exc, session_id) from None

    def _failed(
        self, exc: Exception, session_id: str | None = None, limit: float | None = None
    ) -> StoreError:
        """The StoreError for a failed statement, saying so when it timed out (``limit``: its
        statement_timeout when not STATEMENT_TIMEOUT)."""
        errors = self._psycopg.errors
        if isinstance(exc, errors.LockNotAvailable):
            what = _what_was_locked(exc, session_id)
            return StoreError(
                f"PostgreSQL store {self.url}: {what} stayed locked by another client for "
                f"{LOCK_TIMEOUT:g} s (lock_timeout); retry later"
            )
        if isinstance(exc, errors.QueryCanceled):
            return StoreError(
                f"PostgreSQL store {self.url}: a statement took longer than "
                f"{STATEMENT_TIMEOUT if limit is None else limit:g} s (statement_timeout) or "
                f"was cancelled by an operator: {_first_line(exc)}"
            )
        return StoreError(f"PostgreSQL store: {_first_line(exc)}")

    async def ping(self) -> None:
        """Whether the server answers, within PING_WAIT: a probe must answer even while the
        server does not. A check that takes longer goes on (each of its steps is bounded) and
        the probes that come meanwhile wait for it rather than start one each."""
        check = self._check
        if check is None or check.done():
            check = self._check = asyncio.ensure_future(self._check_answers())
        try:
            await asyncio.wait_for(asyncio.shield(check), PING_WAIT)
        except TimeoutError:
            raise StoreUnreachable(
                f"PostgreSQL store {self.url}: no answer within {PING_WAIT:g} s"
            ) from None

    async def _check_answers(self) -> None:
        try:
            await self._fetch("SELECT 1", within=QUICK_ANSWER)
        except StoreError:
            # That connection may have been the only stale one left: the pool is flushed now,
            # so a second try tells whether the server itself answers.
            await self._fetch("SELECT 1", within=QUICK_ANSWER)
        # Readiness probes come often: they notice a lost presence before a turn needs it.
        self._presence_doubtful = True
        await self.worker()

    async def create_session(self, record: SessionRecord) -> None:
        try:
            await self._fetch(
                schema.INSERT_SESSION, schema.session_params(record), session_id=record.session_id
            )
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

    async def get_session_summary(self, session_id: str) -> SessionRecord | None:
        rows = await self._fetch(schema.SELECT_SESSION_SUMMARY, (session_id,))
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
        rows = await self._fetch(*query)
        return [schema.session_from_row(r) for r in rows]

    async def delete_session(self, session_id: str) -> bool:
        try:
            # The row first, on its own (schema.DELETE_SESSION_ROW), then the turns in chunks.
            async with self._conn() as conn, conn.transaction():
                deleted = (await conn.execute(Q(schema.DELETE_SESSION_ROW), (session_id,))).rowcount
                if deleted:
                    await conn.execute(
                        Q(schema.MARK_DELETING), (schema.DELETING + session_id, session_id)
                    )
        except self._psycopg.errors.LockNotAvailable:
            # Another client keeps the session's row locked (nothing of ours holds it longer
            # than a commit): busy, like a turn would find it; nothing was deleted.
            raise SessionBusy(
                session_id, LOCK_TIMEOUT, why="is locked by another client of the database"
            ) from None
        except self._psycopg.Error as exc:
            raise self._failed(exc, session_id) from None
        if deleted:
            # The session is deleted whatever happens now: turns left (a turn row another
            # client keeps locked, the database gone) go with the next purge or deletion,
            # and nothing reads them meanwhile.
            with contextlib.suppress(StoreError):
                await self._finish_deletions()
        return bool(deleted > 0)

    async def _finish_deletions(self) -> None:
        await finish_deletions(self._deletion_chunk)

    async def _deletion_chunk(self) -> bool:
        """One transaction of turns of deleted sessions (batches.delete_turns_chunk)."""
        try:
            async with self._conn() as conn, conn.transaction():
                return await delete_turns_chunk(_Transaction(conn), schema.TURN_SIZES_POSTGRESQL)
        except self._psycopg.Error as exc:
            raise self._failed(exc) from None

    def lock_session(
        self, session_id: str, wait: float, *, kept: KeptRevision = None
    ) -> AbstractAsyncContextManager[Lease]:
        return self.leases.hold(session_id, wait, kept)

    async def read_session(self, session_id: str) -> SessionRecord | None:
        rows = await self._fetch(schema.SELECT_SESSION, (session_id,))
        return schema.session_from_row(rows[0]) if rows else None

    async def take_lease(
        self, session_id: str, holder: str, kept: str | None = None
    ) -> tuple[bool, SessionRecord | None]:
        params = {
            "session": session_id,
            "holder": holder,
            "now": time.time(),
            "worker": worker_of(holder),
            "kept": kept,
        }
        try:
            async with self._conn() as conn:
                cur = await conn.execute(TAKE_LEASE, params)
                row = await cur.fetchone()
                if row is None:  # held by another live store, or no such session
                    cur = await conn.execute(Q(SESSION_LIVE), (session_id, params["now"]))
                    gone = await cur.fetchone() is None
                    return gone, None
        except self._psycopg.errors.LockNotAvailable:
            # Another client keeps the session's row locked: as busy as a lease of another
            # live worker, so the turn polls again until its wait runs out (SessionBusy). A
            # poll started just before that deadline ends at most LOCK_TIMEOUT after it.
            return False, None
        except self._psycopg.Error as exc:
            raise self._failed(exc, session_id) from None
        return True, schema.session_from_row(row, kept)

    async def drop_lease(self, session_id: str, holder: str) -> None:
        await self._fetch(DROP_LEASE, (session_id, holder), session_id=session_id)

    async def commit_turn(self, session: SessionRecord, outcome: TurnOutcome, holder: str) -> None:
        record = outcome.record
        params = schema.after_turn_params(outcome, session, holder, time.time())
        try:
            # One statement writes the session and the turn and gives the lease back, or
            # does nothing (the lease is then dropped on the way out).
            async with self._conn() as conn:
                cur = await conn.execute(
                    Q(schema.COMMIT_TURN), (*params, *schema.turn_params(record))
                )
        except self._psycopg.errors.UniqueViolation:
            raise ValueError(
                f"Idempotency-Key {record.idempotency_key!r} already used in this session"
            ) from None
        except self._psycopg.Error as exc:
            raise self._failed(exc, session.session_id) from None
        if cur.rowcount != 1:  # the guard did not match: nothing was written
            raise TurnConflict(session.session_id, session.turns)

    async def find_turn(self, session_id: str, idempotency_key: str) -> TurnRecord | None:
        rows = await self._fetch(schema.FIND_TURN, (session_id, idempotency_key))
        return schema.turn_from_row(rows[0]) if rows else None

    async def get_turn(self, session_id: str, turn: int) -> TurnRecord | None:
        rows = await self._fetch(schema.GET_TURN, (session_id, turn))
        return schema.turn_from_row(rows[0]) if rows else None

    async def list_turns(
        self,
        session_id: str,
        after: int = 0,
        limit: int = 1_000_000_000,
        max_bytes: int | None = None,
    ) -> list[TurnRecord]:
        rows = await self._fetch(
            *schema.list_turns_query(
                schema.LIST_TURNS_SIZED_POSTGRESQL,
                session_id=session_id,
                after=after,
                limit=limit,
                max_bytes=max_bytes,
            )
        )
        return [schema.turn_from_row(r) for r in rows]

    async def list_turns_with_traces(self, session_id: str, limit: int) -> list[TurnRecord]:
        rows = await self._fetch(schema.LIST_TURNS_WITH_TRACES, (session_id, limit))
        return [schema.turn_from_row(r) for r in rows]

    async def purge_expired(self) -> int:
        # Sessions expired by now only: ones expiring during the purge wait for the next.
        now = time.time()
        return await in_batches(lambda: self._purge_batch(now), PURGE_BATCH)

    async def _purge_batch(self, now: float) -> int:
        """Up to PURGE_BATCH sessions expired at ``now``: their rows deleted in one transaction,
        then their turns in chunks (with those of any deletion left unfinished), which see
        every turn committed before the rows were deleted (see schema.DELETE_SESSION_ROW); how
        many."""
        try:
            async with self._conn(PURGE_TIMEOUT + ANSWER_MARGIN) as conn, conn.transaction():
                await conn.execute(BOUND_TRANSACTION, (_ms(LOCK_TIMEOUT), _ms(PURGE_TIMEOUT)))
                cur = await conn.execute(Q(schema.PURGE_SESSION_ROWS), (now, now, PURGE_BATCH))
                gone = [row[0] for row in await cur.fetchall()]
                if gone:
                    async with conn.cursor() as cursor:
                        await cursor.executemany(
                            Q(schema.MARK_DELETING), [(schema.DELETING + s, s) for s in gone]
                        )
        except self._psycopg.Error as exc:
            raise self._failed(exc, limit=PURGE_TIMEOUT) from None
        await self._finish_deletions()
        return len(gone)

    async def backfill_expiry(self, ttl: float) -> int:
        return await in_batches(
            lambda: self._changed(schema.BACKFILL_EXPIRY_SKIP_LOCKED, (ttl, PURGE_BATCH)),
            PURGE_BATCH,
        )

    async def _changed(self, sql: str, params: tuple[Any, ...]) -> int:
        """How many rows one statement that writes changed."""
        try:
            async with self._conn() as conn:
                return int((await conn.execute(Q(sql), params)).rowcount)
        except self._psycopg.Error as exc:
            raise self._failed(exc) from None


class _Transaction:
    """A connection in a transaction, as batches.delete_turns_chunk uses it."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    async def rows(self, sql: str, params: tuple[Any, ...]) -> list[Any]:
        cur = await self._conn.execute(Q(sql), params)
        return list(await cur.fetchall())

    async def run(self, sql: str, params: tuple[Any, ...]) -> None:
        await self._conn.execute(Q(sql), params)


class _Deadline:
    """Cuts a connection left unanswered ``seconds`` (unless cancelled first): its socket is
    shut down, not closed (psycopg owns the descriptor), so whatever waits on the connection
    wakes at once and fails as on a connection the server dropped, and nothing more can be
    sent on it. Cancelling the task instead would have psycopg send the server a cancel
    request, then wait 5 s more for the statement to end: up to 10 s more, spent waiting on
    the server that stopped answering. A timer per use of a connection: about a microsecond
    with uvloop (what ``serve`` runs), a third of what ``asyncio.timeout`` costs."""

    __slots__ = ("_timer", "fired", "seconds")

    def __init__(self, conn: Any, seconds: float) -> None:
        self.seconds = seconds
        self.fired = False
        self._timer = asyncio.get_running_loop().call_later(seconds, self._cut, conn)

    def _cut(self, conn: Any) -> None:
        self.fired = True
        _shut_down(conn)

    def cancel(self) -> None:
        self._timer.cancel()

    def __enter__(self) -> _Deadline:
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()

    def reason(self, exc: BaseException) -> str:
        """Why a statement failed: cut by this deadline, or ``exc``'s first line."""
        if self.fired:
            return (
                f"no answer within {self.seconds:g} s (the server or the network stopped "
                "answering); the connection was dropped"
            )
        return _first_line(exc)


def _shut_down(conn: Any) -> None:
    """Shut down the socket of ``conn`` (both ways), if it still has one."""
    try:
        fd = os.dup(conn.fileno())
    except Exception:  # closed already
        return
    try:
        sock = socket.socket(fileno=fd)
    except OSError:
        os.close(fd)
        return
    with sock, contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)


def _what_was_locked(exc: Any, session_id: str | None) -> str:
    """What a lock timeout waited for, as far as PostgreSQL says: a wait for a row lock has
    the row's relation in its context, a wait for a table lock (``LOCK TABLE``) has none."""
    context = getattr(exc.diag, "context", None) or ""
    if session_id and "tuple" in context and '"agentscript_sessions"' in context:
        return f"the row of session {session_id}"
    if session_id:
        return f"a row or table that session {session_id} needed"
    return "a row or table"


def _hung_up(conn: Any) -> bool:
    """Whether an idle connection was closed by the server (a restart, a failover,
    ``idle_session_timeout``, ``pg_terminate_backend``): it then has an error message or the
    end of the stream to read, while a live idle connection has nothing to say. Checked before
    a connection is handed out, so that a dead one fails no request."""
    if conn.closed:
        return True
    try:
        poller = select.poll()
        poller.register(conn.fileno(), select.POLLIN)
        return bool(poller.poll(0))
    except (OSError, ValueError):
        return True


def masked(dsn: str) -> str:
    """``dsn`` with every password in it replaced by ``***``: in the user part of a URL (up to
    its last ``@``, since a password may hold an unencoded one), in its query string, or in a
    ``key=value`` connection string."""
    scheme, sep, rest = dsn.partition("://")
    if not sep:
        return _KEYWORD_PASSWORD.sub(r"\1***", dsn)
    authority, query_sep, query = rest.partition("?")
    user, at, host = authority.rpartition("@")
    if at and ":" in user:
        authority = f"{user.split(':', 1)[0]}:***@{host}"
    query = _QUERY_PASSWORD.sub(r"\1***", query)
    return f"{scheme}{sep}{authority}{query_sep}{query}"


def _ms(seconds: float) -> str:
    """A duration as a PostgreSQL setting takes it (0: no bound)."""
    return f"{round(seconds * 1000)}ms"


def _first_line(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
