"""Errors the API returns, and the one table from exception class to HTTP status and code.

Every error body is ``{"error": {"code": ..., "message": ...}}``. Routes raise
:class:`ApiError` for the caller's mistakes; store and engine exceptions are mapped by
:data:`STATUS`; anything else is a 500 ``internal`` whose message names no internals, as an
unreachable store's (``503 store_unavailable``) names none of the store: the log has them.
"""

from __future__ import annotations

import logging

from agentscript.server import requestid
from agentscript.store import DamagedRecord, SessionBusy, SessionGone, StoreError, TurnConflict

log = logging.getLogger("agentscript.server")


class ApiError(Exception):
    """A request the server refuses, with its status, stable code and a message for the user."""

    def __init__(
        self, status: int, code: str, message: str, *, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}


class IncompatibleSession(Exception):
    """A stored session the loaded agent cannot continue (its agent changed shape)."""


class DuplicateKey(Exception):
    """An Idempotency-Key already used by a committed turn of the session with other text."""


# Exception class -> (status, code). Looked up along the class's MRO.
STATUS: dict[type[BaseException], tuple[int, str]] = {
    SessionGone: (404, "session_not_found"),
    SessionBusy: (409, "session_busy"),
    TurnConflict: (409, "turn_conflict"),
    IncompatibleSession: (409, "session_incompatible"),
    DuplicateKey: (409, "idempotency_key_reused"),
    StoreError: (503, "store_unavailable"),
    # The server's own data, not the caller's mistake: a 500, but one that says which row.
    DamagedRecord: (500, "session_damaged"),
}


# What the client of a turn cut at shutdown is told (app.CountRequests, streaming.EventStream).
CUT_AT_SHUTDOWN = (
    "the server stopped before this turn finished; nothing of it was committed unless it was "
    "cut while committing: send it again with the same Idempotency-Key, which returns the "
    "turn if it was committed"
)


def store_unavailable() -> str:
    """What a client is told of an unreachable store. The store's error names its host, port,
    user, database or file and the driver's reason: that is for the operator, in the log line
    beside the request's id (:func:`log_failure`), as ``/readyz`` keeps them to the log too."""
    found = requestid.request_id()
    why = "the server's log says why" + ("" if found is None else f", under request id {found}")
    return f"the session store is unavailable; retry shortly ({why})"


def status_of(exc: BaseException) -> tuple[int, str, str]:
    """``(status, code, message)`` for any exception raised while serving a request."""
    if isinstance(exc, ApiError):
        return exc.status, exc.code, exc.message
    for cls in type(exc).__mro__:
        if cls in STATUS:
            status, code = STATUS[cls]
            if code == "store_unavailable":
                return status, code, store_unavailable()
            return status, code, str(exc)
    return 500, "internal", "the server failed on this request; it has been logged"


def error_headers(exc: BaseException, code: str) -> dict[str, str]:
    """The headers of the error answer: an ApiError's own; for an unreachable store, a
    ``Retry-After`` as the other 503s have (the docs tell clients to retry it, with the same
    ``Idempotency-Key``: the commit may have happened with its answer lost)."""
    if isinstance(exc, ApiError):
        return exc.headers
    return {"Retry-After": "1"} if code == "store_unavailable" else {}


def body(code: str, message: str) -> dict[str, dict[str, str]]:
    """An error answer's body. Every one is built here, whoever answers (a route, a
    middleware), so here the request being handled learns its error code, for its access line
    (:data:`.requestid.outcome`)."""
    requestid.outcome.set(code)
    return {"error": {"code": code, "message": message}}


def log_failure(exc: BaseException, code: str, message: str) -> None:
    """Log what the operator must see: the server's own failures, an unreachable store (the
    store's own error, which names it, its password masked: the client is told only that it
    is unavailable) and a stored row that cannot be read."""
    if code == "internal":
        log.error("internal error: %s: %s", type(exc).__name__, exc)
    elif code == "store_unavailable":
        log.error("store unavailable: %s", exc)
    elif code == "session_damaged":
        log.error("damaged record: %s", message)
