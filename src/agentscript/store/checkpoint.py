"""SQLite WAL checkpoints on a thread of their own, never inside a turn's commit.

In WAL mode SQLite copies the log back into the database file once it passes 1,000 pages, and
by default the commit that crosses that line does it: 5-7 ms of writing and syncing on the
event loop's thread, every hundred turns or so, which every turn in flight waits out (it was a
large part of ``serve``'s p99). The store turns that off on its own connection
(``wal_autocheckpoint=0``) and tells a :class:`Checkpointer` about each commit; every ``every``
commits the checkpointer's thread runs a passive checkpoint on a connection of its own. A
passive checkpoint waits for no reader or writer, and Python's sqlite3 releases the GIL while
SQLite works, so turns go on meanwhile.

Durability is unchanged: with ``synchronous=NORMAL`` a commit is in the WAL, and a crash of
the process loses nothing; the file is synced at each checkpoint.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from pathlib import Path

# Commits between checkpoints: about SQLite's own 1,000-page threshold for a turn of the
# benchmark agent (its trace is most of the pages).
DEFAULT_EVERY = 100


class Checkpointer:
    """Runs ``PRAGMA wal_checkpoint(PASSIVE)`` on ``path`` after every ``every`` commits."""

    def __init__(self, path: Path, every: int = DEFAULT_EVERY) -> None:
        self.path = path
        self.every = every
        self.done = 0  # checkpoints run (for tests and curiosity)
        self.failed = 0  # checkpoints that raised (the next one tries again)
        self._commits = 0
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the thread (again, after :meth:`stop`, when the store is reopened)."""
        self._stopping = False
        self._commits = 0
        self._wake.clear()
        self._thread = threading.Thread(
            target=self._run, name="agentscript-sqlite-checkpoint", daemon=True
        )
        self._thread.start()

    def committed(self) -> None:
        """Called after each commit on the store's connection (the loop's thread)."""
        self._commits += 1
        if self._commits >= self.every:
            self._commits = 0
            self._wake.set()

    def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def _run(self) -> None:
        db = sqlite3.connect(self.path, isolation_level=None)
        try:
            db.execute("PRAGMA busy_timeout=1000")
            while True:
                self._wake.wait()
                self._wake.clear()
                if self._stopping:
                    return
                try:
                    db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                    self.done += 1
                except sqlite3.Error:
                    self.failed += 1
        finally:
            with contextlib.suppress(sqlite3.Error):
                db.close()
