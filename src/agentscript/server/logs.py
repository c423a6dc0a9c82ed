"""What the server writes to its log: errors always, one line per request with ``--access-log``.

Lines go to stderr, one per event, prefixed with the time, level, logger and the id of the
request being handled (``-`` outside one; :mod:`.requestid`), so that a process manager or a
log collector (journald, Docker, Kubernetes) can take them as they are, and a response's
``X-Request-ID`` finds its lines. A request
line names the client address, method, path, status (0 when no response was sent: the client
left or the server cut the request at shutdown) and the time until the response ended (a
streamed turn: until its last event). Never a header, a body or a query string: a key or
anything a user typed cannot reach the log this way.

Off by default: the line costs a few microseconds of a turn's CPU, and a proxy in front
usually keeps its own access log.
"""

from __future__ import annotations

import logging
import sys
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from agentscript.server import requestid

access = logging.getLogger("agentscript.access")

FORMAT = "%(asctime)s %(levelname)s %(name)s %(request_id)s: %(message)s"


class WithRequestId(logging.Filter):
    """Gives each record the id of the request being handled (``%(request_id)s``)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = requestid.current.get()
        return True


def configure(*, access_log: bool) -> None:
    """Send the ``agentscript`` loggers to stderr (errors; requests too with ``access_log``)."""
    root = logging.getLogger("agentscript")
    if not any(getattr(handler, "agentscript", False) for handler in root.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter(FORMAT))
        handler.addFilter(WithRequestId())
        handler.agentscript = True  # type: ignore[attr-defined]
        root.addHandler(handler)
    root.setLevel(logging.INFO if access_log else logging.WARNING)


class AccessLog:
    """One ``agentscript.access`` line per HTTP request, once its response has ended."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 0

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            client = scope.get("client")
            # As it came on the wire (percent-encoded): a decoded %0a would forge a line.
            path = (scope.get("raw_path") or scope["path"].encode("utf-8")).split(b"?", 1)[0]
            access.info(
                "%s %s %s %d %.1fms",
                client[0] if client else "-",
                scope["method"],
                path.decode("ascii", "backslashreplace"),
                status,
                (time.perf_counter() - started) * 1000,
            )
