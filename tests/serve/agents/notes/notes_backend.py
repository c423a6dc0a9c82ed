"""The notes agent's backend (serve tests): records each call, may block until released.

``NOTES_LOG``: a file that gets one JSON line per call (text, idempotency key, pid).
``NOTES_BLOCK``: while this file exists, a call waits (at most 60 s) — the crash test kills the
server while a turn is inside this action.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path


def save_note(text: str, idempotency_key: str | None = None) -> dict[str, object]:
    log = os.environ.get("NOTES_LOG")
    count = 0
    if log:
        path = Path(log)
        with path.open("a", encoding="utf-8") as out:
            out.write(json.dumps({"text": text, "key": idempotency_key, "pid": os.getpid()}) + "\n")
        count = len(path.read_text(encoding="utf-8").splitlines())
    block = os.environ.get("NOTES_BLOCK")
    deadline = time.monotonic() + 60
    while block and Path(block).exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    return {"saved": text, "count": count}
