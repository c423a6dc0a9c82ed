"""A server without API keys answers only requests that no other web site can make.

Without keys the server listens on loopback alone (``command.py``), but the browser of the
developer running it can still reach it on behalf of any page it visits:

- DNS rebinding: a site whose name resolves to ``127.0.0.1`` gets the browser to send it
  requests, and reads the answers as its own. Its requests carry its name in ``Host``; here
  only a loopback name or address is accepted (``localhost``, ``127.0.0.1``, ``[::1]``, with any
  port).
- Cross-site requests: any page can make a form post or a ``no-cors`` fetch to
  ``http://127.0.0.1:8000``, with a correct ``Host``. It cannot read the answer, but it could
  create sessions and, through the playground, run turns. A browser names the page's origin in
  ``Origin`` on every such request; one naming neither this server nor an origin allowed by
  ``--cors-origin`` is refused.

Programs other than browsers send no ``Origin`` and a loopback ``Host``, and are not affected.
With API keys neither guard is needed: a browser never adds another site's ``Authorization``
header, and asking it to is a CORS preflight the server refuses.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from agentscript.server.errors import body
from agentscript.server.middleware import HttpMiddleware

MAX_KNOWN_HOSTS = 64


def host_name(host: str) -> str:
    """The name or address of a ``Host`` header, without its port or IPv6 brackets."""
    if host.startswith("["):
        return host[1:].partition("]")[0]
    name, colon, port = host.rpartition(":")
    return name if colon and port.isdigit() else host


def is_loopback_name(name: str) -> bool:
    if name.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class LocalOnly(HttpMiddleware):
    """``403 host_not_allowed`` for a ``Host`` that is not a loopback name, ``403
    origin_not_allowed`` for an ``Origin`` that is neither this server nor an allowed one."""

    def __init__(self, app: ASGIApp, allowed_origins: Iterable[str] = ()) -> None:
        super().__init__(app)
        self.allowed_origins = frozenset(origin.rstrip("/").lower() for origin in allowed_origins)
        # Host headers already found to name loopback (a few: the names a client uses), so
        # that a request does not parse an address each time.
        self._loopback: set[bytes] = set()

    async def http(self, scope: Scope, receive: Receive, send: Send) -> None:
        host = origin = b""
        for name, value in scope["headers"]:
            if name == b"host":
                host = value
            elif name == b"origin":
                origin = value
        if host in self._loopback and not origin:
            await self.app(scope, receive, send)
            return
        refused = self._refusal(host.decode("latin-1"), origin.decode("latin-1"))
        if refused is None:
            if len(self._loopback) < MAX_KNOWN_HOSTS:
                self._loopback.add(host)
            await self.app(scope, receive, send)
            return
        await JSONResponse(body(*refused), status_code=403)(scope, receive, send)

    def _refusal(self, host: str, origin: str) -> tuple[str, str] | None:
        if not is_loopback_name(host_name(host)):
            return (
                "host_not_allowed",
                "this server has no API keys and answers only requests addressed to "
                "localhost, 127.0.0.1 or [::1]; set AGENTSCRIPT_API_KEYS to serve other names",
            )
        if not origin:
            return None
        own = origin.lower().partition("://")[2] == host.lower()
        if own or origin.rstrip("/").lower() in self.allowed_origins:
            return None
        return (
            "origin_not_allowed",
            "a page of another site cannot use this server; allow its origin with "
            "--cors-origin if it should",
        )
