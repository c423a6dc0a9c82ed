"""``--workers N``: ``GET /metrics`` answers the whole server's figures, whichever worker takes
the connection.

The supervisor creates a private directory (:class:`MetricsDir`, mode 0700, removed when the
server stops) and names it to its workers in :data:`METRICS_DIR_ENV`. Each worker
(:class:`SharedMetrics`) writes a snapshot of its own figures there (``Metrics.to_json``, a
temporary file renamed over the last one, so a reader never sees half of one): every
:data:`WRITE_EVERY` seconds when they changed, at each scrape it answers, and when it stops;
never on a turn's path. A scrape answers the worker's live figures plus every other worker's
last snapshot, plus the departed total: the counters and histograms of the workers that ended,
folded in by the supervisor (:meth:`MetricsDir.fold`) as it replaces them. So counters never go
down: a worker's file only grows, a worker writes it before it answers any figure of its own
(a later scrape elsewhere reads at least that), and a worker that ends moves from its file to
the departed total in one rename, which lists the files it folded (a reader that still read
the file skips it). Gauges are summed over the live workers; a departed worker's are dropped.

What a worker killed outright (``SIGKILL``) counted since its last snapshot, at most
:data:`WRITE_EVERY` seconds of it, is lost. A supervisor killed outright leaves its directory;
the next one to start removes it (:func:`remove_orphans`). One worker (the default) has no
directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

from agentscript.server.metrics import Metrics

log = logging.getLogger("agentscript.server")

# Names the directory to the workers the supervisor starts (they inherit its environment).
METRICS_DIR_ENV = "AGENTSCRIPT_METRICS_DIR"
# Seconds between two snapshots of a worker whose figures changed: the most another worker's
# scrape lags behind it. A snapshot of 4 busy agents' figures is about 2 kB, written (temporary
# file and rename) in about 0.35 ms; a scrape of 8 such workers takes about 1 ms, 0.1 ms alone.
WRITE_EVERY = 1.0
# The departed workers' total, written by the supervisor alone.
DEPARTED = "departed.json"
SNAPSHOT = ".json"


def write_at_once(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` at once (a reader sees the old file or the new one). Not
    synced: the files need only outlive a process, never the machine."""
    temp = path.with_name(path.name + ".tmp")
    temp.write_text(text)
    os.replace(temp, path)


def dumps(data: dict[str, Any]) -> str:
    return json.dumps(data, separators=(",", ":"))


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``; None when the file is gone (its worker ended meanwhile)."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return None
    if not isinstance(data, dict):
        raise ValueError(f"{path.name}: not a JSON object")
    return data


def read_figures(path: Path) -> Metrics | None:
    """The figures a worker wrote in ``path``; None when the file is gone (its worker ended
    meanwhile) or cannot be read, which the renames should make impossible: a line then."""
    try:
        data = read_json(path)
        return None if data is None else Metrics.from_json(data)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.error("metrics: %s cannot be read, left out: %s", path.name, exc)
        return None


def read_departed(path: Path) -> tuple[Metrics, list[str]] | None:
    """The departed total in ``path`` and the snapshots it folded; None when there is none yet
    or it cannot be read: a line then, and the scrape answers without it (as for a snapshot)."""
    try:
        data = read_json(path)
        if data is None:
            return None
        folded = data.get("folded", [])
        if not isinstance(folded, list) or not all(isinstance(name, str) for name in folded):
            raise ValueError("folded: not a list of names")
        return Metrics.from_json(data), folded
    except (OSError, ValueError, KeyError, TypeError) as exc:
        log.error("metrics: %s cannot be read, left out: %s", path.name, exc)
        return None


# The name of a supervisor's directory: the prefix, its pid, a dash and mkdtemp's letters.
PREFIX = "agentscript-metrics-"


def remove_orphans(parent: Path) -> None:
    """Remove the directories in ``parent`` of supervisors no longer running: this user's,
    named after a pid that is gone."""
    for path in parent.glob(f"{PREFIX}*-*"):
        pid = path.name.removeprefix(PREFIX).partition("-")[0]
        if not pid.isdigit() or _running(int(pid)):
            continue
        with contextlib.suppress(OSError):
            if path.is_dir() and not path.is_symlink() and path.stat().st_uid == os.getuid():
                shutil.rmtree(path)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


class MetricsDir:
    """The supervisor's side: the directory, and the total of the workers that ended."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.departed = Metrics()
        self.folded: list[str] = []  # the snapshots in the departed total

    @classmethod
    def create(cls) -> MetricsDir:
        """A new directory, named after this process; the directories of supervisors that died
        without removing theirs (killed outright) are removed first, so they do not pile up."""
        remove_orphans(Path(tempfile.gettempdir()))
        # mkdtemp makes it 0700: the figures name agents and are this server's alone.
        return cls(Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-")))

    def fold(self, pid: int) -> None:
        """The worker ``pid`` ended: its counters and histograms join the departed total, its
        gauges are dropped, its snapshot goes."""
        for snapshot in sorted(self.path.glob(f"{pid}-*{SNAPSHOT}")):
            try:
                figures = read_figures(snapshot)
                if figures is not None:
                    self.departed.add(figures, gauges=False)
                    self.folded.append(snapshot.name)
                    # Added and listed in one rename: readers skip the snapshot from then on.
                    data = {**self.departed.to_json(), "folded": self.folded}
                    write_at_once(self.path / DEPARTED, dumps(data))
                snapshot.unlink(missing_ok=True)
            except OSError as exc:  # a full disk: the snapshot stays, counted by the readers
                log.error("the metrics of worker process [%d] not folded: %s", pid, exc)

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


class SharedMetrics:
    """A worker's side: its snapshots, and the sum of every worker's figures for a scrape."""

    def __init__(self, metrics: Metrics, directory: str | Path) -> None:
        self.metrics = metrics
        self.directory = Path(directory)
        # The pid for the supervisor's fold, and a nonce: a pid used again is another worker.
        self.name = f"{os.getpid()}-{uuid.uuid4().hex[:8]}{SNAPSHOT}"
        self._written = ""

    def write(self) -> None:
        """Write this worker's snapshot, if its figures changed since the last one."""
        text = dumps(self.metrics.to_json())
        if text != self._written:
            write_at_once(self.directory / self.name, text)
            self._written = text

    async def run(self) -> None:
        """Write a snapshot every :data:`WRITE_EVERY` seconds, until cancelled."""
        while True:
            await asyncio.sleep(WRITE_EVERY)
            with contextlib.suppress(OSError):  # a full disk: the next round tries again
                self.write()

    def merged(self) -> Metrics:
        """This worker's live figures, the others' last snapshots and the departed total."""
        # First: no later scrape, whichever worker answers it, reads less of ours.
        with contextlib.suppress(OSError):
            self.write()
        total = Metrics()
        total.add(self.metrics)
        others: dict[str, Metrics] = {}
        # The snapshots before the departed total: a snapshot folded meanwhile is in the total
        # read next, and skipped here; read after it, it could be missing from both.
        for path in sorted(self.directory.glob(f"*{SNAPSHOT}")):
            if path.name in (self.name, DEPARTED):
                continue
            figures = read_figures(path)
            if figures is not None:
                others[path.name] = figures
        departed = read_departed(self.directory / DEPARTED)
        if departed is not None:
            figures, folded = departed
            total.add(figures, gauges=False)
            for name in folded:
                others.pop(name, None)
        for figures in others.values():
            total.add(figures)
        return total

    def render(self) -> str:
        return self.merged().render()
