"""Server-Sent Events framing for streamed turns.

Events of a turn, in order: ``token`` (``{"text": delta}``, text as the model writes it),
``step`` (a trace step, sent once the next step begins so that it is filled in), then exactly
one ``turn`` (the final turn JSON, as the non-streaming response) or ``error``
(``{"status", "code", "message"}``).
"""

from __future__ import annotations

import json
from typing import Any

from agentscript import jsontext


def wants_stream(accept: str | None) -> bool:
    """Whether an ``Accept`` header asks for the turn as a stream: it names
    ``text/event-stream`` with a quality above 0 and at least that of JSON (``application/json``,
    ``application/*`` or ``*/*``). So ``text/event-stream;q=0.5, application/json`` (JSON
    preferred) and ``text/event-stream;q=0`` (refused) get JSON."""
    if not accept or "text/event-stream" not in accept.lower():
        return False
    stream = json_q = 0.0
    for item in accept.lower().split(","):
        media, *params = (part.strip() for part in item.split(";"))
        q = 1.0
        for param in params:
            name, _, value = param.partition("=")
            if name.strip() == "q":
                try:
                    q = float(value.strip())
                except ValueError:
                    q = 0.0
        if media == "text/event-stream":
            stream = max(stream, q)
        elif media in ("application/json", "application/*", "*/*"):
            json_q = max(json_q, q)
    return stream > 0 and stream >= json_q


def event(name: str, data: Any) -> str:
    """One SSE event; the JSON payload is on one ``data:`` line (compact JSON never holds a
    newline). Written by ``jsontext`` (orjson when installed), as the JSON answer is: the
    standard library took a third of a streamed turn's extra CPU (docs/performance.md)."""
    return f"event: {name}\ndata: {jsontext.dumps(data)}\n\n"


def error_event(status: int, code: str, message: str) -> str:
    """The ``error`` event that ends a stream whose turn failed after it began."""
    return event("error", {"status": status, "code": code, "message": message})


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
