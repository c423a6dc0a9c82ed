"""The SQL schema both SQL stores share, as numbered migrations, and the row <-> record mapping.

Migrations are applied in order at start-up; ``agentscript_meta`` records the last one applied.
JSON is stored as text so that SQLite and PostgreSQL hold the same bytes, except a trace, which
SQLite keeps deflated (:func:`pack_trace`) where PostgreSQL compresses the text itself.
Placeholders are written ``?`` and rewritten for drivers that use ``%s``.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any

from agentscript import jsontext
from agentscript.store.base import (
    SessionRecord,
    StoreError,
    TurnOutcome,
    TurnRecord,
    json_object,
)

SCHEMA_VERSION_KEY = "schema_version"
# zlib's fastest level for a packed trace (``pack_trace``): about 14 us for a 2 kB trace, within
# 5 % of the size the default level gives.
TRACE_PACK_LEVEL = 1

# The statements of migration 5 that differ between the backends: a state written without a new
# revision loses its old one (SQLite cannot change a row in its BEFORE trigger, so it clears it
# after). Only an UPDATE that names ``state`` fires them, never a lease's or an expiry's.
STATE_WRITTEN_SQLITE = """CREATE TRIGGER IF NOT EXISTS agentscript_state_written
    AFTER UPDATE OF state ON agentscript_sessions
    WHEN NEW.revision IS OLD.revision
    BEGIN
        UPDATE agentscript_sessions SET revision = NULL WHERE session_id = NEW.session_id;
    END"""
STATE_WRITTEN_FUNCTION = """CREATE OR REPLACE FUNCTION agentscript_state_written() RETURNS trigger
    LANGUAGE plpgsql AS $$ BEGIN NEW.revision := NULL; RETURN NEW; END $$"""
STATE_WRITTEN_POSTGRESQL = """CREATE TRIGGER agentscript_state_written
    BEFORE UPDATE OF state ON agentscript_sessions
    FOR EACH ROW WHEN (NEW.revision IS NOT DISTINCT FROM OLD.revision)
    EXECUTE PROCEDURE agentscript_state_written()"""

# Migration 6, SQLite only: a session's lease moves from its row to a table of its own
# (store/sqlite.py). SQLite writes a whole record on any UPDATE of it, state included: a lease
# taken or given back on the row of a session at the history limit rewrote its 4 MB state, in
# 25-40 ms on the event loop and 8 MB of log each (twice a turn). A row of this table holds a
# held (or expired) lease; none, a free one. PostgreSQL keeps its lease on the row: an UPDATE
# there leaves an unchanged TOASTed state where it is.
LEASES_TABLE_SQLITE = """CREATE TABLE IF NOT EXISTS agentscript_leases (
    session_id TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    until DOUBLE PRECISION NOT NULL
) WITHOUT ROWID"""
# The leases held at the upgrade, by turns of workers still running the older agentscript: their
# turns go on and must not run beside a new one. The scan reads no state but a leased row's: a
# NULL holder is read from its record's header alone.
LEASES_CARRIED_SQLITE = """INSERT OR IGNORE INTO agentscript_leases (session_id, holder, until)
    SELECT session_id, lease_holder, coalesce(lease_until, 0) FROM agentscript_sessions
    WHERE lease_holder IS NOT NULL"""
# A session's lease goes with its row, however the row is deleted (a deletion, a purge, an
# operator, an older agentscript): no lease outlives its session, nor passes to a new session
# given the same id.
LEASE_OF_DELETED_SQLITE = """CREATE TRIGGER IF NOT EXISTS agentscript_lease_of_deleted
    AFTER DELETE ON agentscript_sessions
    BEGIN
        DELETE FROM agentscript_leases WHERE session_id = OLD.session_id;
    END"""
# A worker of an older agentscript that ran on at the upgrade writes leases on the row, where
# nobody else reads them now: its taking one fails (a 503 telling to restart it), so it never
# runs a turn beside a new worker's; its giving one back (its commit's update, or its drop)
# still goes through and gives back the lease carried over for it. This agentscript never
# names the columns, so neither trigger fires for it.
LEASE_ON_ROW_REFUSED = (
    "leases are kept in agentscript_leases since schema version 6: this worker runs an older "
    "agentscript, restart it"
)
LEASE_ON_ROW_REFUSED_SQLITE = f"""CREATE TRIGGER IF NOT EXISTS agentscript_lease_on_row_refused
    BEFORE UPDATE OF lease_holder ON agentscript_sessions
    WHEN NEW.lease_holder IS NOT NULL AND NEW.lease_holder IS NOT OLD.lease_holder
    BEGIN
        SELECT RAISE(ABORT, '{LEASE_ON_ROW_REFUSED}');
    END"""
LEASE_ON_ROW_GIVEN_BACK_SQLITE = """CREATE TRIGGER IF NOT EXISTS agentscript_lease_on_row_given_back
    AFTER UPDATE OF lease_holder ON agentscript_sessions
    WHEN OLD.lease_holder IS NOT NULL AND NEW.lease_holder IS NULL
    BEGIN
        DELETE FROM agentscript_leases
        WHERE session_id = NEW.session_id AND holder = OLD.lease_holder;
    END"""

# A migration's statements: each for both backends, or (a dict) for the backends it names.
MIGRATIONS: list[list[str | dict[str, str]]] = [
    [
        """CREATE TABLE IF NOT EXISTS agentscript_sessions (
            session_id TEXT PRIMARY KEY,
            agent TEXT NOT NULL,
            owner TEXT NOT NULL,
            agent_version TEXT NOT NULL,
            format TEXT NOT NULL,
            state TEXT NOT NULL,
            turns INTEGER NOT NULL,
            ended INTEGER NOT NULL,
            escalated INTEGER NOT NULL,
            created_at DOUBLE PRECISION NOT NULL,
            updated_at DOUBLE PRECISION NOT NULL,
            expires_at DOUBLE PRECISION
        )""",
        """CREATE TABLE IF NOT EXISTS agentscript_turns (
            session_id TEXT NOT NULL,
            turn INTEGER NOT NULL,
            idempotency_key TEXT,
            result TEXT NOT NULL,
            trace TEXT NOT NULL,
            created_at DOUBLE PRECISION NOT NULL,
            PRIMARY KEY (session_id, turn)
        )""",
        """CREATE UNIQUE INDEX IF NOT EXISTS agentscript_turns_key
            ON agentscript_turns (session_id, idempotency_key)
            WHERE idempotency_key IS NOT NULL""",
        """CREATE INDEX IF NOT EXISTS agentscript_sessions_owner
            ON agentscript_sessions (owner, agent, session_id)""",
        """CREATE INDEX IF NOT EXISTS agentscript_sessions_expiry
            ON agentscript_sessions (expires_at)""",
        # Per-session leases (version 1; replaced by version 2).
        """CREATE TABLE IF NOT EXISTS agentscript_locks (
            session_id TEXT PRIMARY KEY,
            holder TEXT NOT NULL,
            until DOUBLE PRECISION NOT NULL
        )""",
    ],
    [
        # A session's lease (store/lease.py: who runs a turn of it now, and until when) is
        # on its own row: taking it reads the session in the same statement, and the turn's
        # commit gives it back in the update it makes anyway, instead of writing and
        # deleting a row of a table of its own each turn. The old table is dropped, so that
        # a worker of an older agentscript still running on this store fails its turns
        # loudly instead of taking leases nobody else reads.
        "ALTER TABLE agentscript_sessions ADD COLUMN lease_holder TEXT",
        "ALTER TABLE agentscript_sessions ADD COLUMN lease_until DOUBLE PRECISION",
        "DROP TABLE IF EXISTS agentscript_locks",
    ],
    [
        # No statement: from version 3 a trace may be stored packed (``pack_trace``: zlib over
        # its JSON, as a blob), which SQLite does. Reading one needs this version's code, so an
        # older agentscript refuses the store (``pending_migrations``) instead of failing on
        # its traces one by one.
    ],
    [
        # A page of one key's sessions of every agent (``LIST_SESSIONS``) read in order from
        # an index: without it SQLite read and sorted every session of the key for each page
        # (300,000 of them: 520 ms on the event loop). The agent's index serves a page of one
        # agent's sessions.
        """CREATE INDEX IF NOT EXISTS agentscript_sessions_owner_id
            ON agentscript_sessions (owner, session_id)""",
    ],
    [
        # A session's revision: a token written with its state by its creation and by each
        # turn's commit (``new_revision``), so that a worker knows, without reading the state,
        # that the row still holds the state its own commit wrote (server/live.py). Rows
        # written before have none, which matches no commit: their sessions are restored once.
        "ALTER TABLE agentscript_sessions ADD COLUMN revision TEXT",
        # A state written by anything else (an operator's UPDATE, an older agentscript's
        # commit) without a new revision loses the one it had: it is not that commit's state
        # any more, and it is read, checked and restored as a state from elsewhere always was.
        {"sqlite": STATE_WRITTEN_SQLITE, "postgresql": STATE_WRITTEN_FUNCTION},
        {"postgresql": STATE_WRITTEN_POSTGRESQL},
    ],
    [
        # SQLite's leases in a table of their own (``LEASES_TABLE_SQLITE`` says why); nothing
        # changes on PostgreSQL, whose version only follows.
        {"sqlite": LEASES_TABLE_SQLITE},
        {"sqlite": LEASES_CARRIED_SQLITE},
        {"sqlite": LEASE_OF_DELETED_SQLITE},
        {"sqlite": LEASE_ON_ROW_REFUSED_SQLITE},
        {"sqlite": LEASE_ON_ROW_GIVEN_BACK_SQLITE},
    ],
]


def pending_migrations(done: int, where: str, backend: str) -> list[str]:
    """The statements that bring a store of ``backend`` ("sqlite", "postgresql") at schema
    version ``done`` (read from its ``agentscript_meta`` table) up to date, in order;
    StoreError naming ``where`` for a store written by a newer agentscript."""
    if done > len(MIGRATIONS):
        raise StoreError(
            f"{where} has schema version {done}, newer than this agentscript "
            f"({len(MIGRATIONS)}); upgrade agentscript"
        )
    return [
        sql
        for statements in MIGRATIONS[done:]
        for each in statements
        if (sql := each if isinstance(each, str) else each.get(backend))
    ]


SESSION_COLUMNS = (
    "session_id, agent, owner, agent_version, format, state, turns, ended, escalated, "
    "created_at, updated_at, expires_at, revision"
)

INSERT_SESSION = (
    f"INSERT INTO agentscript_sessions ({SESSION_COLUMNS}) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
SELECT_SESSION = f"SELECT {SESSION_COLUMNS} FROM agentscript_sessions WHERE session_id = ?"
# A lock read's columns: the state NULL (not read) when the row has the revision the caller
# keeps (its first parameter; NULL matches none), since that caller runs the session it kept.
# Neither database reads the value of a branch not taken: SQLite only walks the chain of the
# state's overflow pages to the columns stored after it (0.5 ms at the history limit, 4 MB,
# where reading the state took 1-6 ms), PostgreSQL leaves a TOASTed state unread.
SESSION_COLUMNS_UNLESS_KEPT = SESSION_COLUMNS.replace(
    " state,", " CASE WHEN revision = ? THEN NULL ELSE state END,"
)
# Parameters: the kept revision (or None), the session id.
SELECT_SESSION_UNLESS_KEPT = (
    f"SELECT {SESSION_COLUMNS_UNLESS_KEPT} FROM agentscript_sessions WHERE session_id = ?"
)
# The turn's commit, guarded by the turn count read under the lease; it gives the lease back
# when it is still the committing turn's (a lease taken over meanwhile stays its taker's).
_AFTER_TURN = (
    "UPDATE agentscript_sessions SET state = ?, revision = ?, turns = turns + 1, ended = ?, "
    "escalated = ?, updated_at = ?, expires_at = ?{lease} WHERE session_id = ? AND turns = ?"
)
UPDATE_AFTER_TURN = _AFTER_TURN.format(lease=", lease_holder = NULLIF(lease_holder, ?)")
# SQLite's, whose lease is not on the row: the commit's transaction gives it back by a
# statement of its own (store/sqlite.py).
UPDATE_AFTER_TURN_SQLITE = _AFTER_TURN.format(lease="")
INSERT_TURN = (
    "INSERT INTO agentscript_turns (session_id, turn, idempotency_key, result, trace, created_at) "
    "VALUES (?, ?, ?, ?, ?, ?)"
)
# PostgreSQL only (SQLite has no writes in a WITH clause): a turn's commit as one statement,
# atomic without a transaction around it. The turn row is written only if the guarded update
# matched (else the statement reports 0 rows, and the lease is given back on the way out).
COMMIT_TURN = (
    f"WITH updated AS ({UPDATE_AFTER_TURN} RETURNING session_id) "
    "INSERT INTO agentscript_turns (session_id, turn, idempotency_key, result, trace, created_at) "
    "SELECT ?, ?, ?, ?, ?, ? FROM updated"
)
# Deleting a session (both SQL stores): its row first, in a transaction that also writes a note
# that its turns are to be deleted (``MARK_DELETING``: a key of ``agentscript_meta``). From then
# on no request sees the session: it is not read, listed or leased, a turn's commit finds no row
# and writes nothing, and its turns are never read (``TURN_OF_LIVE_SESSION``). Its turns then go
# in later transactions of bounded size (store/batches.py), the note with the last of them: a
# session at the history limit holds hundreds of megabytes of turns, which one transaction
# deleted while every other worker waited for the write lock (and, on SQLite, the event loop
# for the statement). A deletion cut short (a worker killed) leaves the note, and the next purge
# or deletion finishes it. On PostgreSQL the order matters for a turn committing at the same
# moment, which updates the session row and inserts the turn row in one statement: once the
# deletion holds the row, that commit finds no session and writes nothing; a commit that got
# the row first has committed when the deletion gets it, and the turns deleted later include
# its turn. Parameter: the session id.
DELETE_SESSION_ROW = "DELETE FROM agentscript_sessions WHERE session_id = ?"
# The note of a session whose turns are being deleted: key DELETING + its id, value its id.
DELETING = "deleting:"
MARK_DELETING = (
    "INSERT INTO agentscript_meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO NOTHING"
)
UNMARK_DELETING = "DELETE FROM agentscript_meta WHERE key = ?"
# The sessions whose turns are being deleted, up to ? of them (the table holds few rows: the
# schema version and these notes).
PENDING_DELETIONS = (
    f"SELECT value FROM agentscript_meta WHERE key LIKE '{DELETING}%' ORDER BY key LIMIT ?"
)
SESSION_EXISTS = "SELECT 1 FROM agentscript_sessions WHERE session_id = ?"
# A session's first ? turns being deleted, each with about the bytes it holds: SQLite's
# ``length`` of a blob (a packed trace) reads no more than the row's header, PostgreSQL's
# ``pg_column_size`` the stored (compressed) size without reading a toasted value.
_TURN_SIZES = (
    "SELECT turn, {size}(result) + {size}(trace) FROM agentscript_turns "
    "WHERE session_id = ? ORDER BY turn LIMIT ?"
)
TURN_SIZES_SQLITE = _TURN_SIZES.format(size="length")
TURN_SIZES_POSTGRESQL = _TURN_SIZES.format(size="pg_column_size")
# A session's turns up to one (parameters: the session id, the turn).
DELETE_TURNS_THROUGH = "DELETE FROM agentscript_turns WHERE session_id = ? AND turn <= ?"
# Expired, and no turn running: a live lease is a turn that began before the expiry, whose
# commit pushes the expiry back; purged under it, the session and its turns were gone when it
# committed. Parameters: the current time, twice. PostgreSQL's, whose lease is on the row
# (SQLite's: ``sqlite.PURGEABLE``).
PURGEABLE = (
    "expires_at IS NOT NULL AND expires_at <= ? AND (lease_holder IS NULL OR lease_until <= ?)"
)
# PostgreSQL: the session rows of one batch of a purge, deleted as DELETE_SESSION_ROW says (their
# turns go later). A row another client holds (a turn committing, an operator's transaction) is
# skipped, not waited for: it is purged next time if still expired. Parameters: the current
# time twice, the batch size.
PURGE_SESSION_ROWS = (
    "DELETE FROM agentscript_sessions WHERE session_id IN (SELECT session_id "
    f"FROM agentscript_sessions WHERE {PURGEABLE} LIMIT ? FOR UPDATE SKIP LOCKED) "
    "RETURNING session_id"
)
# Sessions written while no TTL was set, which a TTL set since must expire too: up to ? of
# them get the expiry their last update would have given them. Parameters: the TTL, the
# batch size. PostgreSQL's skips a row another client holds rather than wait for it (and fail
# the start-up after LOCK_TIMEOUT): a turn committing gives its session an expiry itself.
_BACKFILL_EXPIRY = (
    "UPDATE agentscript_sessions SET expires_at = updated_at + ? WHERE session_id IN "
    "(SELECT session_id FROM agentscript_sessions WHERE expires_at IS NULL LIMIT ?{lock})"
)
BACKFILL_EXPIRY = _BACKFILL_EXPIRY.format(lock="")
BACKFILL_EXPIRY_SKIP_LOCKED = _BACKFILL_EXPIRY.format(lock=" FOR UPDATE SKIP LOCKED")
# A listed session's columns: its state stays in the database (a page of a thousand sessions
# at the history limit would read and parse gigabytes to show their turn counts).
SESSION_SUMMARY_COLUMNS = SESSION_COLUMNS.replace(" state,", " '{}',")
# A page of one key's live sessions, in id order, of any agent or of one: two texts rather
# than ``(? IS NULL OR agent = ?)``, which no index serves, so that either reads its rows in
# order from an index (``agentscript_sessions_owner_id``, ``agentscript_sessions_owner``).
_LIST_SESSIONS = (
    f"SELECT {SESSION_SUMMARY_COLUMNS} FROM agentscript_sessions WHERE owner = ? <agent>"
    "AND session_id > ? AND (expires_at IS NULL OR expires_at > ?) ORDER BY session_id LIMIT ?"
)
LIST_SESSIONS = _LIST_SESSIONS.replace("<agent>", "")
LIST_SESSIONS_OF_AGENT = _LIST_SESSIONS.replace("<agent>", "AND agent = ? ")
# One session without its state: who owns it and how many turns it has (a page of its turns,
# a trace, a deletion, the owner check before a turn queues for its lock).
SELECT_SESSION_SUMMARY = (
    f"SELECT {SESSION_SUMMARY_COLUMNS} FROM agentscript_sessions WHERE session_id = ?"
)


def list_sessions_query(
    *, owner: str, agent: str | None, after: str | None, now: float, limit: int
) -> tuple[str, tuple[Any, ...]]:
    """The statement listing a page of sessions (both SQL stores) and its parameters."""
    if agent is None:
        return LIST_SESSIONS, (owner, after or "", now, limit)
    return LIST_SESSIONS_OF_AGENT, (owner, agent, after or "", now, limit)


TURN_COLUMNS = "session_id, turn, idempotency_key, result, trace, created_at"
TURN_SUMMARY_COLUMNS = "session_id, turn, idempotency_key, result, '{}', created_at"
# The turns of a session whose row exists (an index lookup, never reading the row): a session
# being deleted has lost its row, and none of the turns it has left is read. One statement
# reads one snapshot, so a session is seen with all its turns or with none.
TURN_OF_LIVE_SESSION = (
    "session_id = (SELECT session_id FROM agentscript_sessions WHERE session_id = ?)"
)
FIND_TURN = (
    f"SELECT {TURN_COLUMNS} FROM agentscript_turns "
    f"WHERE {TURN_OF_LIVE_SESSION} AND idempotency_key = ?"
)
GET_TURN = f"SELECT {TURN_COLUMNS} FROM agentscript_turns WHERE {TURN_OF_LIVE_SESSION} AND turn = ?"
# A page of a session's turns: those after a turn number, at most a count of them.
LIST_TURNS = (
    f"SELECT {TURN_SUMMARY_COLUMNS} FROM agentscript_turns "
    f"WHERE {TURN_OF_LIVE_SESSION} AND turn > ? ORDER BY turn LIMIT ?"
)
# A page of a session's turns that also ends at a size: at the first turn at which the page's
# stored results (their JSON, in UTF-8 bytes) reach the size given, so that a page always holds
# one turn (GET /v1/sessions/{id}/turns: 1,000 turns of 32 kB results made a 32 MB answer,
# built on the event loop). The recursive part walks the turns from the first after ``after``,
# one primary-key lookup each, adding up their sizes, and stops at the turn that reaches the
# size or at the count: the database reads the turns of the page only, where a running sum
# over a window reads every turn up to the count before the page is cut from them. The page is
# then read as LIST_TURNS reads it, a range of the primary key, up to the last turn walked. A
# session's turns are numbered without a gap (a commit writes the next number): a missing one
# would end the walk, and so the page, early without skipping a turn. The sum is a BIGINT on
# PostgreSQL, whose ``octet_length`` is 32 bits. Parameters: the session id, ``after``, the
# session id, the size, the count, the session id, ``after``.
_LIST_TURNS_SIZED = (
    "WITH RECURSIVE walked (turn, total, n) AS ("
    "SELECT turn, CAST(<size of result> AS BIGINT), 1 FROM (SELECT turn, result "
    f"FROM agentscript_turns WHERE {TURN_OF_LIVE_SESSION} AND turn > ? ORDER BY turn LIMIT 1) "
    "AS earliest UNION ALL SELECT t.turn, walked.total + <size of t.result>, walked.n + 1 "
    "FROM walked JOIN agentscript_turns AS t ON t.session_id = ? AND t.turn = walked.turn + 1 "
    "WHERE walked.total < ? AND walked.n < ?) "
    f"SELECT {TURN_SUMMARY_COLUMNS} FROM agentscript_turns WHERE session_id = ? AND turn > ? "
    "AND turn <= (SELECT max(turn) FROM walked) ORDER BY turn"
)


def _sized_by(size: str) -> str:
    """``_LIST_TURNS_SIZED`` with ``size`` (a text of ``{}`` for a column) for its sizes."""
    return _LIST_TURNS_SIZED.replace("<size of result>", size.format("result")).replace(
        "<size of t.result>", size.format("t.result")
    )


# A stored text's size in bytes: PostgreSQL's ``octet_length`` reads a toasted value's header,
# not the value; SQLite before 3.43 has no such function, and a text's ``length`` counts
# characters.
LIST_TURNS_SIZED_SQLITE = _sized_by("length(CAST({} AS BLOB))")
LIST_TURNS_SIZED_POSTGRESQL = _sized_by("octet_length({})")


def list_turns_query(
    sized: str, *, session_id: str, after: int, limit: int, max_bytes: int | None
) -> tuple[str, tuple[Any, ...]]:
    """The statement listing a page of turns (both SQL stores) and its parameters; ``sized``:
    the backend's ``LIST_TURNS_SIZED_*``, for a page that also ends at ``max_bytes``."""
    if max_bytes is None or limit <= 0:
        return LIST_TURNS, (session_id, after, limit)
    return sized, (session_id, after, session_id, max_bytes, limit, session_id, after)


LIST_TURNS_WITH_TRACES = (
    f"SELECT {TURN_COLUMNS} FROM agentscript_turns "
    f"WHERE {TURN_OF_LIVE_SESSION} ORDER BY turn LIMIT ?"
)


def session_params(record: SessionRecord) -> tuple[Any, ...]:
    return (
        record.session_id,
        record.agent,
        record.owner,
        record.agent_version,
        record.format,
        dumps(record.state),
        record.turns,
        int(record.ended),
        int(record.escalated),
        record.created_at,
        record.updated_at,
        record.expires_at,
        record.revision,
    )


def session_from_row(row: Sequence[Any], kept: str | None = None) -> SessionRecord:
    """The record of a row of ``SESSION_COLUMNS``; its state is parsed when first used (a
    value stored as bytes, not text, is restored from the parsed ``state``). A row of
    ``SESSION_COLUMNS_UNLESS_KEPT`` read with revision ``kept`` has no state (NULL; the
    column itself is NOT NULL): the record is ``withheld``."""
    return SessionRecord(
        session_id=row[0],
        agent=row[1],
        owner=row[2],
        agent_version=row[3],
        format=row[4],
        column=row[5],
        turns=int(row[6]),
        ended=bool(row[7]),
        escalated=bool(row[8]),
        created_at=float(row[9]),
        updated_at=float(row[10]),
        expires_at=None if row[11] is None else float(row[11]),
        revision=row[12],
        withheld=row[5] is None and kept is not None and row[12] == kept,
    )


def after_turn_params(
    outcome: TurnOutcome, session: SessionRecord, holder: str | None, now: float
) -> tuple[Any, ...]:
    """The parameters of ``UPDATE_AFTER_TURN``: the new state (its ``state_text`` as it is,
    when given), the lease given back if ``holder`` still has it, guarded by the turn count the
    turn started from; of ``UPDATE_AFTER_TURN_SQLITE`` without a holder (None)."""
    lease = () if holder is None else (holder,)
    text = outcome.state_text
    return (
        dumps(outcome.state) if text is None else text,
        outcome.revision,
        int(outcome.ended),
        int(outcome.escalated),
        now,
        outcome.expires_at,
        *lease,
        session.session_id,
        session.turns,
    )


def turn_params(record: TurnRecord, *, packed_trace: bool = False) -> tuple[Any, ...]:
    """The parameters of ``INSERT_TURN``; the trace as JSON text, or packed
    (:func:`pack_trace`)."""
    return (
        record.session_id,
        record.turn,
        record.idempotency_key,
        dumps(record.result),
        pack_trace(record.trace) if packed_trace else dumps(record.trace),
        record.created_at,
    )


def turn_from_row(row: Sequence[Any]) -> TurnRecord:
    damaged: dict[str, str] = {}
    try:
        trace_text: str | bytes = unpack_trace(row[4])
    except zlib.error as exc:
        damaged["trace"] = f"not a deflated trace: {exc}"
        trace_text = "{}"
    return TurnRecord(
        session_id=row[0],
        turn=int(row[1]),
        idempotency_key=row[2],
        result=json_object(row[3], "result", damaged),
        trace=json_object(trace_text, "trace", damaged),
        created_at=float(row[5]),
        damaged=damaged,
    )


def pack_trace(trace: dict[str, Any]) -> bytes:
    """A trace as the SQLite store keeps it: its JSON, deflated. A trace is the bulk of a turn
    row and is written once and seldom read; packed, a typical one takes about 40 % of its
    text's bytes, and its row then shares a page with others instead of filling one or
    spilling over (PostgreSQL compresses a large value itself, so it gets the text)."""
    return zlib.compress(jsontext.dumps_bytes(trace), TRACE_PACK_LEVEL)


def unpack_trace(stored: str | bytes) -> str | bytes:
    """A stored trace's JSON: text as it is, a packed one (bytes) inflated."""
    return zlib.decompress(stored) if isinstance(stored, bytes) else stored


def dumps(value: Any) -> str:
    # Host objects in state are shown, not serialised (as in trace files).
    return jsontext.dumps(value)


def pyformat(sql: str) -> str:
    """``?`` placeholders as ``%s`` (psycopg); the schema's SQL contains no literal ``?``."""
    return sql.replace("%", "%%").replace("?", "%s")
