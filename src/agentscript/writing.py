"""Writing a user's file in place without risking it (``agentscript fmt``).

``Path.write_text`` truncates the file first: a write that fails midway (a full disk, a file
size limit, the process killed) left a formatted file cut short, the original gone.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path


def write_text_atomically(path: Path, text: str, *, newline: str | None = None) -> None:
    """Write ``text`` to ``path`` through a temporary file beside it, then a rename: a failed
    write leaves the file as it was (OSError says why). A symlink keeps pointing where it did
    (its target is replaced), and the file keeps its permission bits."""
    target = path.resolve()
    try:
        mode: int | None = stat.S_IMODE(target.stat().st_mode)
    except FileNotFoundError:
        mode = None
    handle, temporary = tempfile.mkstemp(
        dir=target.parent, prefix=f".{target.name}.", suffix=".tmp"
    )
    try:
        with os.fdopen(handle, "w", encoding="utf-8", newline=newline) as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())  # the rename must not land before the data
        if mode is not None:
            os.chmod(temporary, mode)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
