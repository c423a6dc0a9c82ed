"""SQLite WAL checkpoints on a thread of their own, never inside a request's commit.

In WAL mode SQLite copies the log back into the database file once it passes 1,000 pages, and
by default the commit that crosses that line does it: 5-7 ms of writing and syncing on the
event loop's thread, every hundred turns or so, which every turn in flight waits out (it was a
large part of ``serve``'s p99). The store turns that off on its own connection
(``wal_autocheckpoint=0``) and a :class:`Checkpointer` runs a passive checkpoint every
``interval`` seconds on a connection of its own, whatever wrote to the log (turns, new
sessions, deletions, leases). A passive checkpoint waits for no reader or writer, costs next to
nothing when the log holds nothing new, and Python's sqlite3 releases the GIL while SQLite
works, so requests go on meanwhile.

A checkpoint also has to catch up with the log, not only copy most of it. A passive one
copies the frames the log held when it began (and reports that log as all copied); under
steady load more have arrived by the time it ends, and SQLite starts the log again from its
beginning only when a write begins while all of it is in the database file. One pass every
quarter second never got there: at saturation the log grew by about 40 MB a second (4.9 GB
after 120 s, the disk's to fill) and the server's CPU per turn rose about 30 % as it grew.
Once the log passes ``CATCH_UP_BYTES``, a round repeats the checkpoint until a pass finds
nothing new since the one before (a few passes at most; each copies only what arrived during
the one before), which lets the next write restart the log. A server so busy that its writes
never leave such a gap gets a RESTART checkpoint once its log passes ``RESTART_BYTES``
(writes wait for it, a few ms). The store's connection cuts the log file back to
``journal_size_limit`` when it restarts, so a burst that grew it does not keep the disk
space.

A round that catches up is not always followed by a restart either: only a write that *begins*
with the whole log copied restarts it, and one that began before the round ended (a turn's
commit of a multi-megabyte state takes tens of ms) appends to it. Turns of one long session
sent back to back were always mid-write at the end of a round: every round caught up, none
restarted, and the log grew by 2.2 GB in 200 turns. So a log ``RESTART_BYTES`` long or more
when a round catches up, which the round before left that long and writes since made longer
without restarting it, gets the RESTART checkpoint too.

A round with little new in the log skips its checkpoint, for up to ``SETTLE_ROUNDS`` rounds: a
passive checkpoint that copies the pages of a turn or two costs about half a millisecond of
CPU (copying, two syncs), which a server answering one turn at a time paid every other turn
(a quarter of a millisecond a turn; docs/performance.md, session 29). What is new in the log
is read from SQLite's wal-index (the ``-shm`` file, :func:`frames_pending`): the frames the
log holds (``mxFrame``) less those already copied (``nBackfill``), written by any connection
of any process. A round checkpoints once ``DEFERRED_FRAMES`` are pending (a busy server, or
one large state: every round, as before), once any are and ``SETTLE_ROUNDS`` rounds passed,
whenever the last pass found the log long, and whenever the wal-index cannot be read.

Durability: with ``synchronous=NORMAL`` a commit is in the WAL, and a crash of the process
loses nothing; the file is synced at each checkpoint, so a power cut may lose the commits of
the last second at most (a quarter of one before session 29), never corrupt the file.

A :class:`FileWatch` tells the thread, and each operation of the store, whether the path still
names the file opened; the thread's rounds also see a file replaced or removed while no
request comes (see there).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import struct
import threading
from pathlib import Path
from typing import Literal

# Seconds between checkpoints: at a few hundred turns a second, about SQLite's own 1,000-page
# threshold of log.
DEFAULT_INTERVAL = 0.25
# Log frames not yet in the database file that make a round checkpoint at once (512 KiB of
# 8 KiB pages: at a few hundred turns a second, every round; one multi-megabyte state, at once).
DEFERRED_FRAMES = 64
# Rounds a checkpoint waits for DEFERRED_FRAMES before it runs anyway: a commit is synced into
# the database file within SETTLE_ROUNDS + 1 rounds of the write (a second at the default
# interval).
SETTLE_ROUNDS = 3
# The wal-index (SQLite's walformat.html): a 48-byte header, twice (its mxFrame at offset 16
# and 64), then the checkpoint information, whose nBackfill is at offset 96; native byte order.
WAL_INDEX_VERSION = 3007000
_WAL_INDEX = struct.Struct("=I12xI")  # iVersion, mxFrame
_WAL_INDEX_SIZE = 100
# Passes of one round at most: enough to catch up with what a busy server writes meanwhile
# (each pass is much shorter than the one before), few enough that a writer that never pauses
# (nothing real) cannot keep the thread copying forever.
CATCH_UP_PASSES = 5
# Bytes of log file kept when a write restarts the log (``journal_size_limit``): far above
# what a quarter second of turns writes, so a steady server never cuts and regrows it.
WAL_SIZE_LIMIT = 64 * 1024 * 1024
# A log this long (64 MiB of frames) that the passive passes could not catch up with gets one
# RESTART checkpoint: new writes wait while it copies what the passes left (1-9 ms measured),
# and the next write starts the log again. Only a server saturated with writes gets there;
# below that the passive passes catch up.
RESTART_BYTES = WAL_SIZE_LIMIT
# A round repeats its pass only once the log is this long (16 MiB), so the log restarts every
# few seconds under load rather than every round: each pass that copies something syncs both
# files.
CATCH_UP_BYTES = 16 * 1024 * 1024
# The page size of a store SQLite creates (sqlite.py; a store keeps the one it was made with,
# and the checkpointer counts its log in frames of that size). A turn row holds 2-3 kB: two
# never fit a 4 KiB page, so each took a page of its own, half of it empty; 8 KiB pages hold
# three (docs/performance.md, session 15).
PAGE_SIZE = 8192
# How long the one checkpoint that empties the log of a file gone from its path waits for other
# connections' locks (ms): the wait the store's statements once had on the loop's thread.
EMPTY_WAIT_MS = 5000


Change = Literal["removed", "replaced"]


class FileWatch:
    """Whether ``path`` still names the database file opened, and what to do once it does not.

    A file replaced under the server (a backup restored with ``mv``) or removed: the open
    connections go on with the file they opened, and its log is still ``<path>-wal``. A WAL
    names no database file, so the next process to open whatever ``path`` names then replays
    the old file's frames into it; and SQLite's close checkpoints and deletes the log only of a
    file that has not moved (``SQLITE_FCNTL_HAS_MOVED``), so closing leaves them there too.
    The first time a connection of the store sees the change, the whole log therefore goes
    into the file opened (``wal_checkpoint(TRUNCATE)``), leaving ``<path>-wal`` empty. Once
    only: a process that opened the new file since shares that log (and ``<path>-shm``), and a
    later checkpoint from here would move its commits into the old file. The checkpointer's
    rounds look every ``interval`` seconds, so the log is emptied that soon even when no
    request comes; a process that opens the new file before then finds the old frames
    whatever this store does.
    """

    def __init__(self, path: Path) -> None:
        self.path = os.fspath(path)  # a str: a little less per stat
        self.opened: tuple[int, int] | None = None  # (device, inode) of the file opened
        self.emptied = False  # the log went into the file opened since it left the path
        # Held by the checkpointer's rounds: the log is emptied between two rounds, and no
        # round of this store checkpoints once the file has left the path.
        self.lock = threading.RLock()

    def start(self) -> None:
        """Take the file ``path`` names now as the one opened."""
        self.opened = identity(self.path)
        self.emptied = False

    def changed(self, db: sqlite3.Connection) -> Change | None:
        """None while ``path`` names the file opened (one ``stat``); otherwise how it changed,
        the log emptied into the file opened the first time (``db``: a connection to it)."""
        if self.opened is None:  # not open
            return None
        found = identity(self.path)
        if found == self.opened:
            if self.emptied:  # it came back (renamed away and back): a next change empties
                self.emptied = False
            return None
        with self.lock:
            if not self.emptied:
                self.emptied = True  # even if it fails: never a later try (see above)
                # A failure leaves the log as it was; refusing the operation matters more.
                with contextlib.suppress(sqlite3.Error):
                    _empty_log(db)
        return "removed" if found is None else "replaced"


def _empty_log(db: sqlite3.Connection) -> None:
    """Copy the whole log into the file ``db`` opened, waiting up to ``EMPTY_WAIT_MS`` for
    other connections' locks whatever ``busy_timeout`` ``db`` keeps for its own statements (the
    store's is a few ms): it runs once, and a log left partly copied would be replayed into the
    file now at the path."""
    kept = db.execute("PRAGMA busy_timeout").fetchone()[0]
    db.execute(f"PRAGMA busy_timeout={EMPTY_WAIT_MS}")
    try:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    finally:
        db.execute(f"PRAGMA busy_timeout={int(kept)}")


def identity(path: str | Path) -> tuple[int, int] | None:
    """(device, inode) of ``path``, or None when there is no such file."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return found.st_dev, found.st_ino


def frames_pending(shm: str) -> int | None:
    """The frames of the log not yet copied into the database file, from the wal-index at
    ``shm`` (``mxFrame - nBackfill``), written by any connection; None when it cannot be read
    (no such file, another layout, the two copies of its header disagreeing mid-write).
    Read without SQLite's locks, so a reading may be a moment old: it only decides when the
    next checkpoint runs, never what it copies."""
    try:
        with open(shm, "rb") as index:
            data = index.read(_WAL_INDEX_SIZE)
    except OSError:
        return None
    if len(data) < _WAL_INDEX_SIZE:
        return None
    version, frames = _WAL_INDEX.unpack_from(data, 0)
    again = _WAL_INDEX.unpack_from(data, 48)
    if version != WAL_INDEX_VERSION or again != (version, frames):
        return None
    (backfilled,) = struct.unpack_from("=I", data, 96)
    return max(0, int(frames) - int(backfilled))


class Checkpointer:
    """Runs ``PRAGMA wal_checkpoint(PASSIVE)`` on ``path`` every ``interval`` seconds, while
    ``watch`` (if given) finds the file opened there."""

    def __init__(
        self,
        path: Path,
        interval: float = DEFAULT_INTERVAL,
        *,
        watch: FileWatch | None = None,
    ) -> None:
        self.path = path
        self.interval = interval
        self.watch = watch
        self.shm = f"{os.fspath(path)}-shm"  # the wal-index (frames_pending)
        self._waited = 0  # rounds skipped since the last checkpoint
        self.skipped = 0  # rounds that skipped their checkpoint (little new in the log)
        self.page_size = PAGE_SIZE  # the file's own, read when the thread connects
        self.frames = 0  # log frames copied into the database file so far
        self.caught_up = 0  # rounds that ended with the whole log in the database file
        self.restarts = 0  # rounds that had to make writers wait (RESTART_BYTES)
        self.failed = 0  # checkpoints that raised (the next one tries again)
        self._backfilled = 0  # frames of the current log copied when last seen
        # The log a caught-up round left RESTART_BYTES long or more (0: shorter): the next
        # round restarts it if no write did meanwhile.
        self._left_long = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Connect and start the thread (again, after :meth:`stop`, when the store is reopened).

        The connection is made here, just after the store's own, and to an existing file only:
        a thread connecting later would open whatever the path names by then, or create an
        empty file there, and checkpoint the store's log into it."""
        db = sqlite3.connect(
            f"{Path(self.path).absolute().as_uri()}?mode=rw",
            uri=True,
            isolation_level=None,
            check_same_thread=False,  # made here, used on the thread
        )
        if self.watch is not None and identity(self.watch.path) != self.watch.opened:
            # Another file already: no checkpoint of it from here (nothing read yet, so the
            # close touches no log); the store's next operation says what happened.
            db.close()
            return
        self._stop.clear()
        self._waited = 0
        self._thread = threading.Thread(
            target=self._run, args=(db,), name="agentscript-sqlite-checkpoint", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def _run(self, db: sqlite3.Connection) -> None:
        try:
            db.execute("PRAGMA busy_timeout=1000")
            # Unreadable (it never was so far): the default, rather than a thread that died.
            with contextlib.suppress(sqlite3.Error):
                self.page_size = int(db.execute("PRAGMA page_size").fetchone()[0])
            while not self._stop.wait(self.interval):
                try:
                    self.round(db)
                except sqlite3.Error:
                    self.failed += 1
        finally:
            with contextlib.suppress(sqlite3.Error):
                db.close()

    def round(self, db: sqlite3.Connection) -> None:
        """A checkpoint, unless the file opened has left the path (then its log is emptied
        into it once, and nothing more: see :class:`FileWatch`)."""
        if self.watch is None:
            if self.due():
                self.checkpoint(db)
            return
        with self.watch.lock:
            if self.watch.changed(db) is None and self.due():
                self.checkpoint(db)

    def due(self) -> bool:
        """Whether this round checkpoints (see the module's docstring): once
        ``DEFERRED_FRAMES`` are pending, once any are and the round waited ``SETTLE_ROUNDS``,
        while the log is long, or when the wal-index cannot be read."""
        pending = frames_pending(self.shm)
        long = self._backfilled >= self.frames_of(CATCH_UP_BYTES) or self._left_long
        if pending is None or long or pending >= DEFERRED_FRAMES:
            self._waited = 0
            return True
        if pending == 0:
            return False
        if self._waited >= SETTLE_ROUNDS:
            self._waited = 0
            return True
        self._waited += 1
        self.skipped += 1
        return False

    def checkpoint(self, db: sqlite3.Connection) -> None:
        """One round: passive checkpoints until the whole log is in the database file (or
        ``CATCH_UP_PASSES`` ran)."""
        seen = -1
        passes = CATCH_UP_PASSES if self._backfilled >= self.frames_of(CATCH_UP_BYTES) else 1
        for _ in range(passes):
            log = self._pass(db, "PASSIVE")
            # A pass reports the log as it was when the pass began, so "all copied" means
            # something only when nothing arrived since the pass before began either.
            if log == seen:
                self.caught_up += 1
                self._restart_if_stuck(db, log)
                return
            seen = log
        if seen >= self.frames_of(RESTART_BYTES):
            # Writes never paused long enough: make them wait for the rest of this one.
            self._restart(db)

    def _restart_if_stuck(self, db: sqlite3.Connection, log: int) -> None:
        """After a round that caught up with a log of ``log`` frames: a RESTART checkpoint if
        the log is RESTART_BYTES long or more, the round before left it so long already, and
        writes since made it longer without restarting it (a restart would have made it
        shorter, unless writes grew it back further within a round, when a RESTART costs them
        little next to their own). A log no write touched since is left to the next one."""
        long = log >= self.frames_of(RESTART_BYTES)
        stuck = long and self._left_long and log > self._left_long
        self._left_long = log if long else 0
        if stuck:
            self._restart(db)

    def _restart(self, db: sqlite3.Connection) -> None:
        """A RESTART checkpoint: writes wait while it copies what is left and until no reader
        uses the log, which then starts again from its beginning."""
        self._pass(db, "RESTART")
        self.restarts += 1
        self._left_long = 0

    def frames_of(self, size: int) -> int:
        """How many frames of this store's log hold ``size`` bytes of pages."""
        return size // self.page_size

    def _pass(self, db: sqlite3.Connection, mode: str) -> int:
        """One checkpoint; the frames the log held when it began."""
        _busy, log, backfilled = db.execute(f"PRAGMA wal_checkpoint({mode})").fetchone()
        if backfilled < self._backfilled:  # the log started again since the last pass
            self._backfilled = 0
        self.frames += max(0, backfilled - self._backfilled)
        self._backfilled = max(0, backfilled)
        return int(log)
