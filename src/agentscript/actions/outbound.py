"""One outbound HTTP request of an action (OpenAPI operations, ``http_json_handler``), bounded
whatever the other side does.

``urllib`` bounds each read by its timeout, not the call: a server sending a byte a second kept
a call, and the pool thread running it, busy forever (the turn ended at the action timeout,
the thread did not, and a few such calls starved every synchronous action of the process). It
follows redirects to any host with the request's headers, credentials included, and turns a
``POST`` into a ``GET``. Here:

- the whole call (connect, head, body) ends by ``total`` seconds: one watchdog thread for the
  process shuts the socket of a call past its deadline, which ends the read it is blocked in;
- a redirect is never followed with the request's headers: :func:`fetch` returns it as it came
  and the caller refuses it (only a document ``GET`` without credentials follows same-scheme
  redirects, :func:`fetch_following`);
- the body is read up to ``max_bytes``;
- a header value that HTTP cannot carry (a token read with its trailing newline) is refused
  without showing it, where ``http.client`` quoted it in its error;
- a URL holding a user or password is refused before connecting: the connection is made to
  the host alone, so the credential would silently never be sent (send it as a header).
"""

from __future__ import annotations

import contextlib
import http.client
import itertools
import math
import socket
import threading
import time
import urllib.parse
from dataclasses import dataclass


class FetchError(Exception):
    """The request did not get a whole answer; the message says why (no header values)."""


@dataclass(slots=True)
class Fetched:
    status: int
    headers: dict[str, str]  # lower-cased names
    body: bytes


@dataclass(slots=True)
class _Watch:
    at: float
    number: int
    sock: socket.socket
    fired: bool = False


class _Watchdog:
    """Shuts the sockets of calls past their deadline; one daemon thread, started on first use.

    It holds the calls still running only: a call that ends takes its entry out at once (most
    end long before their deadline, and a process making many calls kept as many entries).
    The thread sleeps until the earliest deadline and is woken only for an earlier one, so it
    runs about once per deadline, not once per call; the entry it slept for may be gone by
    then, and it sleeps again until the next one."""

    def __init__(self) -> None:
        # By call number, in a dict: taking a call out is O(1); the thread looks for the
        # earliest deadline among the running calls (one per thread making one) when it wakes.
        self._watched: dict[int, _Watch] = {}
        self._count = itertools.count()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._sleeps_until = math.inf  # when the thread wakes on its own

    def watch(self, sock: socket.socket, at: float) -> _Watch:
        entry = _Watch(at, next(self._count), sock)
        with self._wake:
            self._watched[entry.number] = entry
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="agentscript-outbound-deadlines", daemon=True
                )
                self._thread.start()
            if at < self._sleeps_until:
                self._wake.notify()
        return entry

    def release(self, entry: _Watch) -> None:
        """The call ended: forget it. Under the lock the thread fires in, so a call released is
        never shut afterwards."""
        with self._wake:
            self._watched.pop(entry.number, None)

    def watched(self) -> int:
        """How many calls are watched: the calls running."""
        with self._wake:
            return len(self._watched)

    def _run(self) -> None:
        with self._wake:
            while True:
                now = time.monotonic()
                for entry in [e for e in self._watched.values() if e.at <= now]:
                    del self._watched[entry.number]
                    entry.fired = True
                    with contextlib.suppress(OSError):  # already closed
                        entry.sock.shutdown(socket.SHUT_RDWR)
                self._sleeps_until = min((e.at for e in self._watched.values()), default=math.inf)
                self._wake.wait(self._sleeps_until - now if self._watched else None)


_WATCHDOG = _Watchdog()


def fetch(
    url: str,
    *,
    method: str = "GET",
    headers: dict[str, str] | None = None,
    body: bytes | None = None,
    timeout: float,
    total: float,
    max_bytes: int,
) -> Fetched:
    """``method url`` with ``headers`` and ``body``: the answer as it came, any status, a
    redirect included (never followed). Each read waits at most ``timeout`` and the whole call
    at most ``total`` seconds; a body over ``max_bytes`` is a FetchError."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise FetchError(f"not an http:// or https:// URL: {parts.scheme}://{parts.hostname}")
    if "@" in parts.netloc:
        raise FetchError(
            "the URL holds a user or password, which is never sent; "
            "send the credential as a header (Authorization) instead"
        )
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    connection = kind(parts.hostname, parts.port, timeout=min(timeout, total))
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    deadline = time.monotonic() + total
    watch: _Watch | None = None
    try:
        try:
            connection.connect()
            assert connection.sock is not None
            watch = _WATCHDOG.watch(connection.sock, deadline)
            connection.request(method, target, body=body, headers=headers or {})
            response = connection.getresponse()
            raw = response.read(max_bytes + 1)
        except ValueError as exc:
            if "header name" in str(exc).lower():
                raise FetchError("a header name holds a character HTTP cannot send") from None
            if "header" in str(exc).lower():
                raise FetchError(
                    "a header value holds a character HTTP cannot send (a newline?); "
                    "check the configured headers"
                ) from None
            raise FetchError(f"{type(exc).__name__}: the request could not be sent") from None
        except (OSError, http.client.HTTPException) as exc:
            if watch is not None and watch.fired:
                raise FetchError(f"no whole answer within {total:g} s") from None
            if isinstance(exc, TimeoutError | socket.timeout):
                raise FetchError(f"no answer within {min(timeout, total):g} s") from None
            raise FetchError(_describe(exc)) from None
        if watch is not None and watch.fired:
            raise FetchError(f"no whole answer within {total:g} s")
    finally:
        if watch is not None:
            _WATCHDOG.release(watch)
        connection.close()
    if len(raw) > max_bytes:
        raise FetchError(f"the answer is larger than {max_bytes} bytes")
    return Fetched(
        response.status, {name.lower(): value for name, value in response.getheaders()}, raw
    )


def fetch_following(
    url: str, *, timeout: float, total: float, max_bytes: int, hops: int = 5
) -> Fetched:
    """A ``GET`` without credentials that follows up to ``hops`` redirects to addresses of
    the same scheme (a document on a host that moved), all within ``total`` seconds. A
    redirect from ``https`` to ``http`` (or any other change of scheme) is a FetchError: the
    document would come in the clear, where anyone on the path can rewrite it."""
    deadline = time.monotonic() + total
    for _ in range(hops + 1):
        left = deadline - time.monotonic()
        if left <= 0:
            raise FetchError(f"no whole answer within {total:g} s")
        answer = fetch(url, timeout=timeout, total=left, max_bytes=max_bytes)
        location = answer.headers.get("location")
        if answer.status not in (301, 302, 303, 307, 308) or not location:
            return answer
        try:
            target = urllib.parse.urljoin(url, location)
            scheme = urllib.parse.urlsplit(url).scheme.lower()
            moved_to = urllib.parse.urlsplit(target).scheme.lower()
        except ValueError:  # "Invalid IPv6 URL"
            raise FetchError(f"HTTP {answer.status}: a redirect to an invalid URL") from None
        if moved_to != scheme:
            raise FetchError(
                f"HTTP {answer.status}: a redirect from {scheme}:// to {_shown_location(target)}, "
                "which changes the scheme; only same-scheme redirects are followed: use the "
                "final address"
            )
        url = target
    raise FetchError(f"more than {hops} redirects")


def redirect_note(answer: Fetched) -> str:
    """What a refused redirect says: where it pointed (its origin and path only)."""
    where = _shown_location(answer.headers.get("location", ""))
    return f" (a redirect to {where}; redirects are not followed: use the final address)"


def _shown_location(url: str) -> str:
    """``url`` as a message shows it: scheme, host and path; no user, password or query."""
    try:
        location = urllib.parse.urlsplit(url)
    except ValueError:  # "Invalid IPv6 URL"
        return "an invalid URL"
    return f"{location.scheme}://{location.netloc.rpartition('@')[2]}{location.path}"


def _describe(exc: BaseException) -> str:
    if isinstance(exc, http.client.HTTPException):
        return f"the answer is not valid HTTP ({type(exc).__name__})"
    reason = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
    return f"cannot reach the server: {reason}"
