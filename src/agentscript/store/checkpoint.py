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

Durability is unchanged: with ``synchronous=NORMAL`` a commit is in the WAL, and a crash of
the process loses nothing; the file is synced at each checkpoint.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from pathlib import Path

# Seconds between checkpoints: at a few hundred turns a second, about SQLite's own 1,000-page
# threshold of log.
DEFAULT_INTERVAL = 0.25


class Checkpointer:
    """Runs ``PRAGMA wal_checkpoint(PASSIVE)`` on ``path`` every ``interval`` seconds."""

    def __init__(self, path: Path, interval: float = DEFAULT_INTERVAL) -> None:
        self.path = path
        self.interval = interval
        self.frames = 0  # log frames copied into the database file so far
        self.failed = 0  # checkpoints that raised (the next one tries again)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the thread (again, after :meth:`stop`, when the store is reopened)."""
        self._stop.clear()
        self._thread = threading.Thread(
            target=self._run, name="agentscript-sqlite-checkpoint", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def _run(self) -> None:
        db = sqlite3.connect(self.path, isolation_level=None)
        try:
            db.execute("PRAGMA busy_timeout=1000")
            while not self._stop.wait(self.interval):
                try:
                    _busy, _log, copied = db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                except sqlite3.Error:
                    self.failed += 1
                    continue
                self.frames += max(0, copied)
        finally:
            with contextlib.suppress(sqlite3.Error):
                db.close()
