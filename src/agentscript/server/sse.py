"""Server-Sent Events framing for streamed turns.

Events of a turn, in order: ``token`` (``{"text": delta}``, text as the model writes it),
``step`` (a trace step, sent once the next step begins so that it is filled in), then exactly
one ``turn`` (the final turn JSON, as the non-streaming response) or ``error``
(``{"status", "code", "message"}``).
"""

from __future__ import annotations

import json
from typing import Any


def event(name: str, data: Any) -> str:
    """One SSE event; the JSON payload is on one ``data:`` line (JSON never holds a newline)."""
    return f"event: {name}\ndata: {json.dumps(data, default=repr, separators=(',', ':'))}\n\n"


def parse(text: str) -> list[tuple[str, Any]]:
    """``(event, data)`` pairs of an SSE body written by :func:`event` (for clients, tests)."""
    out = []
    for block in text.split("\n\n"):
        name, data = "message", None
        for line in block.splitlines():
            if line.startswith("event:"):
                name = line[6:].strip()
            elif line.startswith("data:"):
                data = json.loads(line[5:].strip())
        if data is not None:
            out.append((name, data))
    return out
