"""What the server writes to its log: errors and failed turns always, one line per request with
``--access-log``.

Lines go to stderr, one per event, prefixed with the time, level, logger and the id of the
request being handled (``-`` outside one; :mod:`.requestid`), so that a process manager or a
log collector (journald, Docker, Kubernetes) can take them as they are, and a response's
``X-Request-ID`` finds its lines. A request line names the client address, method, path
(the public one: with ``--root-path``'s prefix, as the proxy in front logs it), status (0
when no response was sent: the client left or the server cut the request at shutdown), the
code of an error answer (``422 message_too_long``) or ``turn_error`` for a turn answered 200
that failed inside (the model or an action failed: ``200 turn_error``), and the time until the
response ended (a streamed turn: until its last event).
Never a header, a body or a query string: a key or anything a user typed cannot reach the
log this way.

Off by default: the line costs a few microseconds of a turn's CPU, and a proxy in front
usually keeps its own access log.

``--log-format json`` writes each line as one JSON object instead (``time`` in UTC, ``level``,
``logger``, ``request_id``, ``message``, and an access line's ``client``, ``method``, ``path``,
``status``, ``error_code`` (when there is one) and ``duration_ms`` as fields of their own), for
collectors that index fields; the start-up banner comes the same way, so every line of stderr
parses. uvicorn's own warnings and errors, and any library's (psycopg, asyncio, httpx: WARNING
and above), have the same shape as ours in either format.
"""

from __future__ import annotations

import logging
import sys
import time
from datetime import UTC, datetime
from typing import Any

from starlette.types import Message, Receive, Scope, Send

from agentscript import jsontext
from agentscript.server import requestid
from agentscript.server.middleware import HttpMiddleware

access = logging.getLogger("agentscript.access")

FORMAT = "%(asctime)s %(levelname)s %(name)s %(request_id)s: %(message)s"


class WithRequestId(logging.Filter):
    """Gives each record the id of the request being handled (``%(request_id)s``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = requestid.current.get()
        return True


class JsonLines(logging.Formatter):
    """A record as one line of JSON (``--log-format json``)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "request_id": getattr(record, "request_id", requestid.current.get()),
            "message": record.getMessage(),
        }
        line.update(getattr(record, "fields", None) or {})
        if record.exc_info:
            line["error"] = self.formatException(record.exc_info)
        return jsontext.dumps(line)


def configure(*, access_log: bool, log_format: str = "text") -> None:
    """Send every log record of the process to stderr through one handler on the root logger,
    as text or JSON lines: the ``agentscript`` loggers' (errors; requests too with
    ``access_log``), uvicorn's (started with ``log_config=None``, its loggers have no handler
    of their own) and any library's (psycopg, asyncio, httpx), so every line has the same
    shape. Without a handler on the root, a library's warning went to Python's last-resort
    handler: a bare line, no time, level or request id, not JSON."""
    formatter = JsonLines() if log_format == "json" else logging.Formatter(FORMAT)
    root = logging.getLogger()
    ours = [h for h in root.handlers if getattr(h, "agentscript", False)]
    if not ours:
        added = logging.StreamHandler(sys.stderr)
        added.addFilter(WithRequestId())
        added.agentscript = True  # type: ignore[attr-defined]
        root.addHandler(added)
        ours = [added]
    for handler in ours:
        handler.setFormatter(formatter)
    # A library's warnings and errors; its INFO and DEBUG are noise here. Our own loggers set
    # their level below, uvicorn's its own (``log_level``); each record reaches the root's
    # handler once, by propagation, so none of them has a handler of its own.
    root.setLevel(logging.WARNING)
    logging.getLogger("agentscript").setLevel(logging.INFO if access_log else logging.WARNING)
    # Python's warnings (a DeprecationWarning at an import) as records of ``py.warnings``:
    # printed as they are, they were the one other shape of line on stderr.
    logging.captureWarnings(True)


def banner(lines: list[str], log_format: str) -> list[str]:
    """The start-up lines as printed: themselves, or JSON lines with ``--log-format json``."""
    if log_format != "json":
        return lines
    formatter = JsonLines()
    return [
        formatter.format(
            logging.LogRecord("agentscript.serve", logging.INFO, "", 0, line, None, None)
        )
        for line in lines
    ]


class AccessLog(HttpMiddleware):
    """One ``agentscript.access`` line per HTTP request, once its response has ended."""

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        started = time.perf_counter()
        status = 0
        if requestid.outcome.get() is not None:
            # An earlier request's, where requests share a task (an in-process ASGI client):
            # uvicorn runs each in a task of its own, which starts without one.
            requestid.outcome.set(None)

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            client = scope.get("client")
            # The public path: with --root-path's prefix (uvicorn puts it back in raw_path), as
            # the proxy in front logs the request, although the proxy stripped it. Percent-
            # encoded as the client sent it: a decoded %0a would forge a line.
            path = (scope.get("raw_path") or scope["path"].encode("utf-8")).split(b"?", 1)[0]
            fields = {
                "client": client[0] if client else "-",
                "method": scope["method"],
                "path": path.decode("ascii", "backslashreplace"),
                "status": status,
                "duration_ms": round((time.perf_counter() - started) * 1000, 1),
            }
            # The status the app answered, and whether the client was still there to read it
            # (a turn answered 200 was committed either way): uvicorn drops what is sent to a
            # closed connection and tells the app nothing, but its ``receive`` is a method of
            # the request's cycle, which knows (``disconnected``). Read only here, so requests
            # pay nothing for it without --access-log.
            if getattr(getattr(receive, "__self__", None), "disconnected", False) is True:
                fields["client_gone"] = True
            # What the status alone does not say: which error (a 422's code), or that a turn
            # answered 200 failed inside (``turn_error``).
            code = requestid.outcome.get()
            if code is not None:
                fields["error_code"] = code
            access.info(
                "%s %s %s %d%s %.1fms%s",
                fields["client"],
                fields["method"],
                fields["path"],
                status,
                "" if code is None else f" {code}",
                fields["duration_ms"],
                " (client gone)" if "client_gone" in fields else "",
                extra={"fields": fields},
            )
