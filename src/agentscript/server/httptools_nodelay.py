"""uvicorn's httptools protocol with TCP_NODELAY (see ``nodelay``); a module of its own
because importing it needs httptools, which only the ``serve`` extra installs."""

from __future__ import annotations

import asyncio

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from agentscript.server.nodelay import set_nodelay


class NoDelayHttpToolsProtocol(HttpToolsProtocol):
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        set_nodelay(transport)
        super().connection_made(transport)
